"""A convergence check that should have run and did not (its launch failed) adopts nothing it was to
judge: the knobs that change the training stay the job's own. And a check that could not train at all
(fewer quality samples than one batch per rank) is refused when the study is created, not found out
after the search (found by an adversarial tester: a batch change was published unchecked)."""

from __future__ import annotations

import pytest

from autotuner.store import Store
from autotuner.tuning import StudySettings, create_study
from autotuner.tuning.pairs import Setting
from autotuner.tuning.quality import check
from autotuner.tuning.study import StudyError
from tests.tuning.test_quality_stats import ctx  # noqa: F401 (a fixture)

WORKLOAD = {"name": "w", "batch_size": 512, "dense": {"in_features": 13, "arch": [16], "over_arch": [16, 1]},
            "tables": [{"name": "t0", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}]}  # fmt: skip
SPACE = {
    "precisions": [["fp32", "fp32"], ["int8", "int8"]],
    "batch_sizes": [512, 4096],
    "allow_batch_change": True,
}


def test_a_check_whose_launch_failed_adopts_none_of_what_it_was_to_judge(ctx, monkeypatch):  # noqa: F811
    from autotuner.tuning import quality

    def failed_launch(ctx, plan, search):
        launch = ctx.store.add_launch(study_id=ctx.study_id, kind=plan.kind, env=plan.env, spec={"candidates": []},
                                      executor="fake", attempt=1, nnodes=None)  # fmt: skip
        ctx.store.update_launch(launch.id, state="failed", error="fewer samples than one batch per rank")

    monkeypatch.setattr(quality, "run_launch", failed_launch)
    base = Setting({"NCCL_NSOCKS_PERTHREAD": "4"}, ctx.baseline_point)
    tuned = base.but(fwd_precision="int8", bwd_precision="int8", batch_size=1024)
    evidence, kept = check(ctx, base, tuned)
    assert evidence.skipped == "the convergence check did not run: fewer samples than one batch per rank"
    assert sorted(evidence.unresolved) == ["batch", "precision"]
    assert kept == base  # nothing unjudged is published (the env, which trains alike, was the baseline's)


@pytest.mark.parametrize(("samples", "nproc"), [(1000, 2), (4096 * 4 - 1, 4)])
def test_too_few_quality_samples_to_train_one_batch_per_rank_are_refused_at_creation(
    tmp_path, samples, nproc
):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    settings = StudySettings(executor="local", trials=1, quality_samples=samples, nproc_per_node=nproc,
                             workdir=str(tmp_path / "runs"))  # fmt: skip
    with pytest.raises(StudyError, match="less than one batch of 4,096 per rank") as raised:
        create_study(store, cluster="c", workload=WORKLOAD, space=SPACE, settings=settings)
    assert raised.value.where == "settings"
    assert store.studies() == []
    store.dispose()
