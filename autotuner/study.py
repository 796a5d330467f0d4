"""What a tuning study is: its settings, and how one is created from a workload and a space."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.space import SearchSpace, load_space
from autotuner.store import Store, Study
from trials.spec import WorkloadSpec, parse_workload

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NAME_RULE = "1-128 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_name(kind: str, value: str) -> str:
    """Cluster / workload / study names end up in URLs, file paths and job names: keep them plain."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(f"{kind} name {value!r} is invalid: {NAME_RULE}")
    return value


def default_data_dir() -> Path:
    return Path(os.environ.get("AUTOTUNER_DATA_DIR", Path.home() / ".local" / "share" / "nccl-autotuner"))


def default_database_url() -> str:
    return os.environ.get("AUTOTUNER_DATABASE_URL") or f"sqlite:///{default_data_dir() / 'autotuner.db'}"


class StudySettings(BaseModel):
    """How a study runs. Stored with the study, so a resumed study runs the same way."""

    model_config = ConfigDict(extra="forbid")

    executor: Literal["local", "replay", "slurm", "kubernetes"] = "local"
    nproc_per_node: int = Field(2, ge=1, le=64)
    nnodes: int = Field(1, ge=1, le=4096)
    trials: int | None = Field(8, ge=0, description="search launches (baseline and confirmation not counted)")
    time_budget_s: float | None = Field(None, gt=0, description="no new search launch after this long")
    candidates_per_launch: int | None = Field(
        None, ge=1, description="cap k; default: every in-process point"
    )
    warmup: int = Field(3, ge=0, le=10_000)
    iterations: int = Field(30, ge=1, le=1_000_000)
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int = Field(0, ge=0)
    confirm_rounds: int = Field(
        3, ge=0, le=20, description="interleaved best/baseline pairs (0 skips, else >= 2)"
    )
    launch_timeout_s: float = Field(900, gt=0)
    max_attempts: int = Field(2, ge=1, le=5, description="tries of a launch interrupted by a tuner crash")
    fabric: str | None = Field(None, description="local only: emulate a fabric of this rate, e.g. 2gbit")
    publish: bool = True
    scaling_nodes: list[int] = Field(
        default_factory=list, description="after publishing, measure tuned and baseline at these node counts"
    )
    workdir: str | None = Field(None, description="where launch directories go (shared with the nodes)")
    executor_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> StudySettings:
        if any(n < 1 or n > 4096 for n in self.scaling_nodes) or len(set(self.scaling_nodes)) != len(
            self.scaling_nodes
        ):
            raise ValueError("scaling_nodes: distinct node counts between 1 and 4096, e.g. [1, 2, 4]")
        if self.confirm_rounds == 1:
            raise ValueError(
                "confirm_rounds must be 0 (skip) or at least 2: one round gives no confidence interval"
            )
        if self.trials is None and self.time_budget_s is None:
            raise ValueError("give a budget: trials, time_budget_s, or both")
        if self.fabric is not None and self.executor != "local":
            raise ValueError("fabric emulation is only available with the local executor")
        if self.executor == "replay" and "landscape" not in self.executor_options:
            raise ValueError(
                "the replay executor needs executor_options.landscape (a recorded landscape file)"
            )
        return self


def baseline_batch(workload: WorkloadSpec, space: SearchSpace) -> int:
    """The batch the job runs today: the workload's, else the smallest the space considers."""
    return workload.batch_size or min(space.batch_sizes)


def create_study(
    store: Store,
    *,
    cluster: str,
    workload: dict[str, Any],
    space: SearchSpace | dict[str, Any] | str,
    settings: StudySettings,
    name: str | None = None,
) -> Study:
    """Validate everything a study needs, then persist it as queued.

    Raises SpecError (workload), SpaceError (space) or ValueError (names), each naming the problem.
    """
    check_name("cluster", cluster)
    workload_spec = parse_workload(workload)  # SpecError (a ValueError) names the field
    check_name("workload", workload_spec.name)
    space_obj = space if isinstance(space, SearchSpace) else load_space(space)
    from autotuner.executors import make_executor

    try:  # bad executor options fail here, before a study row exists (constructors do no I/O)
        make_executor(settings)
    except (ValueError, TypeError, OSError) as exc:
        raise ValueError(f"executor {settings.executor}: {exc}") from exc
    if name is None:
        name = f"{cluster}.{workload_spec.name}.{store.count_studies() + 1}"
    check_name("study", name)
    if store.study(name) is not None:
        raise ValueError(f"study {name!r} already exists")
    return store.create_study(
        name=name,
        cluster=cluster,
        workload_name=workload_spec.name,
        workload_spec=workload,
        space=space_obj.model_dump(mode="json"),
        settings=settings.model_dump(mode="json"),
    )
