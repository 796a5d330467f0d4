"""The executors by name: each one's options model and factory, in one table.

`EXECUTORS` lists them (what callers offer and validate against); `validate_options` checks options
without building anything; `executor_for` builds one. A backend module (and its client) is imported
only when its factory runs. `make_executor(settings)` is the study settings' way in, kept thin.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotuner.executors.base import Executor
from autotuner.executors.kubernetes.options import KubernetesOptions
from autotuner.executors.local.options import LocalOptions
from autotuner.executors.options import ExecutorOptions
from autotuner.executors.replay import ReplayOptions
from autotuner.executors.slurm.options import SlurmOptions


@dataclass(frozen=True)
class ExecutorEntry:
    """One executor: what it is, its options, how to build it from them, and which of them a study's
    settings fill in (`make_executor`)."""

    help: str
    options: type[ExecutorOptions]
    build: Callable[[Any], Executor]
    from_settings: tuple[str, ...] = ()


def _local(options: LocalOptions) -> Executor:
    from autotuner.executors.local.executor import Fabric, LocalExecutor

    fabric = Fabric(options.fabric) if options.fabric else None
    return LocalExecutor(fabric=fabric, nodes=options.nodes)


def _replay(options: ReplayOptions) -> Executor:
    from autotuner.executors.replay import Landscape, ReplayExecutor

    return ReplayExecutor(Landscape.load(options.landscape), seed=options.seed, delay_s=options.delay_s)


def _slurm(options: SlurmOptions) -> Executor:
    from autotuner.executors.slurm.executor import SlurmExecutor

    return SlurmExecutor(options)


def _kubernetes(options: KubernetesOptions) -> Executor:
    from autotuner.executors.kubernetes.executor import KubernetesExecutor

    return KubernetesExecutor(options)


EXECUTORS: dict[str, ExecutorEntry] = {
    "local": ExecutorEntry(
        "torchrun on this machine, optionally in an emulated fabric",
        LocalOptions,
        _local,
        from_settings=("fabric",),
    ),
    "replay": ExecutorEntry(
        "answers launches from results recorded on a real machine",
        ReplayOptions,
        _replay,
        from_settings=("seed",),
    ),
    "slurm": ExecutorEntry(
        "one batch job per launch, torchrun on every node through srun", SlurmOptions, _slurm
    ),
    "kubernetes": ExecutorEntry("one Indexed Job per launch, a pod per node", KubernetesOptions, _kubernetes),
}


def validate_options(name: str, options: Mapping[str, Any]) -> ExecutorOptions:
    """The executor's options model for `options`; a ValueError names the executor or option at fault."""
    entry = EXECUTORS.get(name)
    if entry is None:
        close = difflib.get_close_matches(str(name), list(EXECUTORS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown executor {name!r}{hint}; known: {', '.join(EXECUTORS)}")
    return entry.options.parse(options)


def executor_for(name: str, options: Mapping[str, Any]) -> Executor:
    """The executor `name` with `options` (ValueError: bad name or options; OSError: a replay
    landscape that cannot be read)."""
    parsed = validate_options(name, options)  # first: it names an unknown executor
    return EXECUTORS[name].build(parsed)


def fields_from_settings(executor: str) -> tuple[str, ...]:
    """The options of `executor` that a study gives as its own settings (fabric, seed), not as options."""
    entry = EXECUTORS.get(executor)
    return entry.from_settings if entry else ()


def settings_options(settings: Any) -> dict[str, Any]:
    """A study's executor options with the fields its executor takes from the study's own settings
    (fabric, seed). Duck-typed, so this package needs nothing of the study's."""
    taken = {key: getattr(settings, key) for key in fields_from_settings(settings.executor)}
    return {**settings.executor_options, **taken}


def make_executor(settings: Any) -> Executor:
    """The executor a study's settings ask for."""
    return executor_for(settings.executor, settings_options(settings))
