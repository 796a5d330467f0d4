"""Executors run trial launches: locally, from recorded results, on Slurm, on Kubernetes.

`EXECUTORS` is the table of them by name (options model and factory); `executor_for(name, options)`
builds one, `validate_options(name, options)` checks options without building anything. The Slurm and
Kubernetes modules are imported only when such an executor is built.
"""

from autotuner.executors.base import (
    AppDryrun,
    Description,
    Executor,
    LaunchRequest,
    LaunchState,
    Outcome,
)
from autotuner.executors.kubernetes.options import KubernetesOptions
from autotuner.executors.local.executor import Fabric, LocalExecutor
from autotuner.executors.local.options import LocalOptions
from autotuner.executors.options import ExecutorOptions
from autotuner.executors.registry import (
    EXECUTORS,
    ExecutorEntry,
    executor_for,
    make_executor,
    settings_options,
    validate_options,
)
from autotuner.executors.replay import Landscape, ReplayExecutor, ReplayOptions
from autotuner.executors.slurm.options import SlurmOptions

__all__ = [
    "EXECUTORS",
    "AppDryrun",
    "Description",
    "Executor",
    "ExecutorEntry",
    "ExecutorOptions",
    "Fabric",
    "KubernetesOptions",
    "Landscape",
    "LaunchRequest",
    "LaunchState",
    "LocalExecutor",
    "LocalOptions",
    "Outcome",
    "ReplayExecutor",
    "ReplayOptions",
    "SlurmOptions",
    "executor_for",
    "make_executor",
    "settings_options",
    "validate_options",
]
