"""Local executor: torchrun on this machine (one agent, an agent per emulated node, or network namespaces).

Nothing is imported here: the options are read where no backend client is installed."""
