"""What every phase of a study reads: the study's facts, loaded once, and where its launches run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from autotuner.executors import Executor
from autotuner.space import InProcPoint, SearchSpace, stored_space
from autotuner.store import Candidate, Launch, Store
from autotuner.tuning.lease import Lease
from autotuner.tuning.settings import StudySettings
from autotuner.tuning.study import baseline_batch, baseline_of, finalist
from trials.spec import WorkloadSpec, parse_workload

log = logging.getLogger("autotuner.tuning")


@dataclass
class Progress:
    """Callbacks a front end (CLI progress bar, service log) may hook; all optional. A callback that
    raises is logged and otherwise ignored: what a front end shows never fails a study."""

    on_launch_start: Callable[[Launch], None] = lambda launch: None
    # queued: why, once per change; "" once it runs
    on_launch_waiting: Callable[[Launch, str], None] = lambda launch, why: None
    on_launch_end: Callable[[Launch, list[Candidate]], None] = lambda launch, rows: None
    on_phase: Callable[[str], None] = lambda phase: None
    # a line the study's log has at INFO that someone watching the run is told too (an early end)
    on_note: Callable[[str], None] = lambda line: None

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, _guarded(f.name, getattr(self, f.name)))


def _guarded(name: str, callback: Callable[..., None]) -> Callable[..., None]:
    def call(*args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            log.warning("progress callback %s failed (the study goes on)", name, exc_info=True)

    return call


def point_of(candidate: Candidate | dict[str, Any]) -> InProcPoint:
    """The in-process point a stored row (or a spec's candidate) measured."""

    def get(key: str) -> Any:
        return candidate.get(key) if isinstance(candidate, dict) else getattr(candidate, key)

    return InProcPoint(
        get("fwd_precision"),
        get("bwd_precision"),
        get("batch_size"),
        get("sharding"),
        get("num_threads"),
        get("pipeline"),
    )


@dataclass
class StudyContext:
    store: Store
    executor: Executor
    lease: Lease
    study_id: int
    settings: StudySettings
    space: SearchSpace
    workload_obj: dict[str, Any]
    workload: WorkloadSpec
    cluster_id: int
    cluster_name: str
    workload_name: str
    workdir: Path
    progress: Progress = field(default_factory=Progress)
    poll_s: float = 0.5
    inert: dict[str, str] = field(default_factory=dict)  # variables that cannot act here -> why

    @classmethod
    def load(
        cls, store: Store, study_id: int, executor: Executor, lease: Lease, **kwargs: Any
    ) -> StudyContext:
        study = store.study(study_id)
        if study is None:
            raise LookupError(f"study {study_id} not found")
        settings = StudySettings.model_validate(study.settings)
        # its own tables, not those a later study under the same workload name stored since
        spec = study.workload_spec if study.workload_spec is not None else study.workload.spec
        return cls(
            store=store, executor=executor, lease=lease, study_id=study.id, settings=settings,
            space=stored_space(study.space), workload_obj=spec,
            workload=parse_workload(spec), cluster_id=study.cluster_id,
            cluster_name=study.cluster.name, workload_name=study.workload.name,
            workdir=settings.study_dir(study.id), **kwargs,
        )  # fmt: skip

    @cached_property
    def baseline_point(self) -> InProcPoint:
        """What the job runs today: its comm precision, its batch, its sharding, its pipeline."""
        fwd, bwd = self.workload.comm_precision
        return InProcPoint(fwd, bwd, baseline_batch(self.workload, self.space), self.workload.sharding,
                           None, self.workload.default_pipeline)  # fmt: skip

    @cached_property
    def points(self) -> list[InProcPoint]:
        """Every in-process point, a null pipeline resolved to the job's own: rows store what ran."""
        return self.space.inproc_points(self.workload.default_pipeline)

    def baseline(self) -> Candidate | None:
        return baseline_of(self.store, self.study_id)

    def finalist(self) -> Candidate | None:
        return finalist(self.store, self.study_id)
