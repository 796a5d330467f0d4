"""Kubernetes executor: a ConfigMap, a headless Service and an Indexed Job per launch, and their options.

Nothing is imported here: the options are read where no backend client is installed."""
