"""Executors run trial launches: locally, from recorded results, on Slurm, on Kubernetes."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from autotuner.study import StudySettings


def make_executor(settings: StudySettings) -> Executor:
    """The executor a study's settings ask for (cluster backends imported only when used)."""
    if settings.executor == "local":
        return LocalExecutor(
            fabric=Fabric(settings.fabric) if settings.fabric else None,
            emulate_nodes=bool(settings.executor_options.get("emulate_nodes", False)),
        )
    if settings.executor == "replay":
        options = settings.executor_options
        return ReplayExecutor(Landscape.load(options["landscape"]), seed=settings.seed,
                              delay_s=float(options.get("delay_s", 0.0)))  # fmt: skip
    if settings.executor == "slurm":
        from autotuner.executors.slurm import SlurmExecutor

        return SlurmExecutor(**settings.executor_options)
    from autotuner.executors.kubernetes import KubernetesExecutor

    return KubernetesExecutor(**settings.executor_options)


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
    "make_executor",
]
