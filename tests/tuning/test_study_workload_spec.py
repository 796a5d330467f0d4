"""A study measures the tables it was created with: a later study under the same workload name with
other tables changes what that name's next studies run, not a queued, resumed or re-validated one."""

from __future__ import annotations

from autotuner.executors import LocalExecutor
from autotuner.store import Store
from autotuner.tuning import StudySettings, create_study
from autotuner.tuning.context import StudyContext
from autotuner.tuning.lease import Lease


def workload(*tables: str) -> dict:
    return {"name": "dlrm", "tables": [{"name": t, "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}
                                       for t in tables]}  # fmt: skip


def tables(store: Store, study_id: int) -> list[str]:
    ctx = StudyContext.load(store, study_id, LocalExecutor(), Lease(store, study_id))
    return [t.name for t in ctx.workload.tables]


def test_a_queued_study_keeps_its_tables_when_a_later_study_of_the_same_workload_changes_them(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    try:
        settings = StudySettings(executor="local", trials=1, workdir=str(tmp_path / "runs"))
        first = create_study(store, cluster="c", workload=workload("t0", "t1"), space={}, settings=settings)
        second = create_study(store, cluster="c", workload=workload("other"), space={}, settings=settings)
        assert first.workload_id == second.workload_id  # one workload name, as the hook asks for it
        assert tables(store, first.id) == ["t0", "t1"]  # before 0013: ["other"], the second study's
        assert tables(store, second.id) == ["other"]
        assert store.workload("dlrm").spec == workload("other")  # the name's latest, for its next study
    finally:
        store.dispose()
