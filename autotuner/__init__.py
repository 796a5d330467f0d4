"""nccl-autotuner engine: search space, study driver, executors, store, configs, CLI."""

__version__ = "0.1.0"
