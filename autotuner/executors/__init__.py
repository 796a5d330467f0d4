"""Executors run trial launches: locally, from recorded results, on Slurm, on Kubernetes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def executor_for(name: str, options: Mapping[str, Any]) -> Executor:
    """The executor of that name with its options (cluster backends imported only when used)."""
    opts = dict(options)
    if name == "local":
        fabric = opts.get("fabric")
        return LocalExecutor(fabric=Fabric(fabric) if fabric else None,
                             emulate_nodes=bool(opts.get("emulate_nodes", False)))  # fmt: skip
    if name == "replay":
        return ReplayExecutor(Landscape.load(opts["landscape"]), seed=int(opts.get("seed", 0)),
                              delay_s=float(opts.get("delay_s", 0.0)))  # fmt: skip
    if name == "slurm":
        from autotuner.executors.slurm import SlurmExecutor

        return SlurmExecutor(**opts)
    from autotuner.executors.kubernetes import KubernetesExecutor

    return KubernetesExecutor(**opts)


def validate_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError / TypeError naming what is wrong with an executor's options (no I/O)."""
    opts = {k: v for k, v in options.items() if not (name == "replay" and k == "seed")}
    if name == "local":
        unknown = sorted(set(opts) - {"fabric", "emulate_nodes"})
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r}")
        return
    if name == "replay":
        return
    executor_for(name, options)


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
    "executor_for",
    "validate_options",
]
