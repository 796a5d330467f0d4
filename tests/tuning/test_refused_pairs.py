"""The engine never proposes int8 comms on a reduce-scatter sharding: not from the sampler, not as a
ladder step, not as a convergence-check variant (InProcPoint.problem)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from autotuner.space import InProcPoint, load_space
from autotuner.tuning import StudyDriver, StudySettings, create_study, ladder
from autotuner.tuning.outcome import LadderStep
from autotuner.tuning.pairs import Setting
from autotuner.tuning.plan import plan_launch
from autotuner.tuning.quality import _alone
from autotuner.tuning.search import Search
from tests.autotuner.test_driver import RECORDED, replay
from tests.helpers import LANDSCAPE


def test_the_sampler_never_gets_int8_on_a_reduce_scatter_launched(store, tmp_path):
    space = {"precisions": [["fp32", "fp32"], ["int8", "int8"]], "batch_sizes": [64],
             "sharding": ["table_wise", "row_wise"]}  # fmt: skip
    settings = StudySettings(executor="replay", trials=3, candidates_per_launch=3, seed=7,
                             workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    study = create_study(
        store, cluster="cpu-box", workload=RECORDED["workload"], space=space, settings=settings
    )
    ctx = StudyDriver(store, study.id, replay(), poll_s=0.01).ctx
    assert len(ctx.points) == 3  # int8 x row_wise is not a point
    search, planned = Search(ctx), []
    for seed in range(6):
        plan = plan_launch(ctx, search, random.Random(seed))
        assert plan is not None
        planned += plan.points
    assert planned
    assert all(p.problem() is None for p in planned)
    assert ("int8", "row_wise") not in {(p.fwd_precision, p.sharding) for p in planned}
    # precision and sharding are sampled apart: the sampler did propose the pair, and it was skipped
    skipped = [t.user_attrs["skipped"] for t in search.memory.trials if "skipped" in t.user_attrs]
    assert any("int8 comms cannot run with row_wise sharding" in why for why in skipped)


def _ctx(order):
    return SimpleNamespace(
        space=SimpleNamespace(ladder=list(order)),
        settings=SimpleNamespace(confirm_rounds=0),
        store=SimpleNamespace(candidate=lambda _id: None),
    )


def _walk(monkeypatch, kept):
    measured = []

    def step(ctx, tag, group, current, nxt, changed, cumulative, confirmed):
        measured.append((tag, group, nxt.point))
        return LadderStep(step=group, kept=kept(group), candidate=None, cumulative=cumulative)

    monkeypatch.setattr(ladder, "_step", step)
    baseline = Setting({}, InProcPoint("fp32", "fp32", 64, "row_wise"))
    target = Setting({}, InProcPoint("int8", "int8", 256, "table_wise"))
    steps: list = []
    top, _ = ladder.climb(_ctx(["precision", "batch", "sharding"]), baseline, target, steps)
    return measured, steps, top


def test_the_ladder_takes_int8_after_the_sharding_that_can_carry_it(monkeypatch):
    measured, steps, top = _walk(monkeypatch, kept=lambda group: True)
    # tagged by each group's place in the ladder, whatever order they were taken in
    assert [(tag, group) for tag, group, _ in measured] == [
        ("ladder-1-batch", "batch"), ("ladder-2-sharding", "sharding"), ("ladder-0-precision", "precision")
    ]  # fmt: skip
    assert all(point.problem() is None for _, _, point in measured)
    assert measured[-1][2] == InProcPoint("int8", "int8", 256, "table_wise")
    assert [s.step for s in steps] == ["batch", "sharding", "precision"]
    assert top.point == InProcPoint("int8", "int8", 256, "table_wise")


def test_a_ladder_step_that_still_cannot_run_is_recorded_never_launched(monkeypatch):
    measured, steps, top = _walk(monkeypatch, kept=lambda group: group != "sharding")
    assert [group for _, group, _ in measured] == ["batch", "sharding"]  # precision never launched
    precision = steps[-1]
    assert precision.step == "precision"
    assert not precision.kept
    assert precision.candidate is None
    assert (precision.verdict or "").startswith("cannot run: int8 comms cannot run with row_wise sharding")
    assert precision.changed == {"precision": [["fp32", "fp32"], ["int8", "int8"]]}
    assert top.point == InProcPoint("fp32", "fp32", 256, "row_wise")


def test_a_convergence_check_variant_carries_the_sharding_int8_needs():
    baseline = Setting({}, InProcPoint("fp32", "fp32", 64, "row_wise"))
    tuned = Setting({}, InProcPoint("int8", "int8", 256, "table_wise"))
    assert _alone("precision", baseline, tuned).point == InProcPoint("int8", "int8", 64, "table_wise")
    assert _alone("batch", baseline, tuned).point == InProcPoint("fp32", "fp32", 256, "row_wise")
    fp16 = Setting({}, InProcPoint("fp16", "fp16", 256, "table_wise"))
    assert _alone("precision", baseline, fp16).point == InProcPoint("fp16", "fp16", 64, "row_wise")


def test_the_points_a_space_yields_are_what_the_ladder_and_sampler_accept():
    space = load_space({"precisions": [["int8", "int8"], ["fp16", "fp16"]], "sharding": ["row_wise"]})
    assert [p.key() for p in space.inproc_points()] == ["fp16/fp16|512|row_wise|t-"]
