"""The front end: the `autotuner` commands, the claim in words, and `make demo`."""
