"""Executors run trial launches: locally, from recorded results, on Slurm, on Kubernetes."""

from autotuner.executors.base import (
    AppDryrun,
    Description,
    Executor,
    LaunchRequest,
    LaunchState,
    Outcome,
)
from autotuner.executors.local import Fabric, LocalExecutor
from autotuner.executors.replay import Landscape, ReplayExecutor

__all__ = [
    "AppDryrun",
    "Description",
    "Executor",
    "Fabric",
    "Landscape",
    "LaunchRequest",
    "LaunchState",
    "LocalExecutor",
    "Outcome",
    "ReplayExecutor",
]
