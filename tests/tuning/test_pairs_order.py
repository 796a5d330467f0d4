"""Paired rounds are counterbalanced (ABBA): under a steady drift of the machine, two settings that run
equally fast must not come out "significantly" faster one than the other. In a fixed a-then-b order
they did (found by a statistics review: a no-op was declared faster in 11-55% of simulated studies).
The launches here train nothing: each measured slot's samples/s is a clock that falls by a fixed
step per slot, whatever the setting."""

from __future__ import annotations

import pytest

from autotuner.store import LaunchKind
from autotuner.tuning import pairs
from autotuner.tuning.launch import spec_of
from autotuner.tuning.pairs import Setting, abba, compare, measure
from autotuner.tuning.stats import paired_speedup
from tests.tuning.test_quality_stats import ctx  # noqa: F401 (a fixture)

DRIFT = 0.005  # the machine slows by 0.5% per measured slot


class DriftingLaunches:
    """run_launch stand-in: each candidate measured at a rate that only falls with time; the slots
    whose number is in `fail` come back failed (a candidate of a launch that otherwise ran)."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.slot, self.order, self.fail = 0, [], fail

    def __call__(self, study, plan, search) -> None:
        spec = spec_of(study, plan)
        launch = study.store.add_launch(study_id=study.study_id, kind=plan.kind, env=plan.env, spec=spec,
                                      executor="fake", attempt=1, nnodes=None)  # fmt: skip
        rows = []
        for i, point in enumerate(plan.points):
            self.order.append((dict(plan.env), point.fwd_precision))
            failed, self.slot = self.slot in self.fail, self.slot + 1
            rows.append({"study_id": study.study_id, "launch_id": launch.id, "index": i, "kind": plan.kind,
                         "env": plan.env, "fwd_precision": point.fwd_precision, "bwd_precision": point.bwd_precision,
                         "batch_size": point.batch_size, "sharding": point.sharding, "pipeline": point.pipeline,
                         "state": "failed" if failed else "ok", "error": "crashed" if failed else None,
                         "samples_per_s": None if failed else 1000.0 * (1 - DRIFT * self.slot)})  # fmt: skip
        study.store.finish_launch(launch.id, rows, state="succeeded")


def _settings(study, same_env: bool) -> tuple[Setting, Setting]:
    """Two settings the drifting clock measures alike: in one process environment, or in two."""
    b = Setting({}, study.baseline_point)
    if same_env:
        return b.but(fwd_precision="int8", bwd_precision="int8"), b
    return Setting({"NCCL_NSOCKS_PERTHREAD": "4"}, study.baseline_point), b


@pytest.mark.parametrize("same_env", [False, True], ids=["a launch per setting", "one launch for both"])
@pytest.mark.parametrize("rounds", [3, 4, 5])
def test_a_no_op_under_a_steady_drift_is_not_significantly_faster(ctx, monkeypatch, same_env, rounds):  # noqa: F811
    launches = DriftingLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    a, b = _settings(ctx, same_env)
    speedup, row = compare(ctx, a, b, rounds, LaunchKind.LADDER, "ladder-0-x")
    assert speedup is not None
    assert row is not None
    assert speedup.rounds == rounds
    # a b | b a | a b ...: each side runs first in every other round
    who = ["a" if (env, fwd) == (a.env, a.point.fwd_precision) else "b" for env, fwd in launches.order]
    assert who == [s for r in range(rounds) for s in (("a", "b") if r % 2 == 0 else ("b", "a"))]
    assert not speedup.significant
    assert speedup.ci_low < 1 < speedup.ci_high


def test_a_round_one_of_whose_slots_failed_is_measured_again_never_paired_across_rounds(ctx, monkeypatch):  # noqa: F811
    launches = DriftingLaunches(fail=frozenset({2}))  # round 1's first slot (b, in ABBA order)
    monkeypatch.setattr(pairs, "run_launch", launches)
    a, b = _settings(ctx, same_env=True)
    a_rows, b_rows = measure(ctx, a, b, 3, LaunchKind.LADDER, "ladder-0-x")
    assert len(a_rows) == len(b_rows) == 3
    for x, y in zip(a_rows, b_rows, strict=True):  # both of a round from one launch, adjacent slots
        assert (x.launch_id, x.index // 2) == (y.launch_id, y.index // 2)
    # the first launch kept rounds 0 and 2; the missing round came from a second launch
    assert [r.launch_id for r in a_rows] == [a_rows[0].launch_id] * 2 + [a_rows[0].launch_id + 1]
    # ... in the order it lacked: b first (rounds 0 and 2 were both a-first; a third would be the fixed
    # order, and a no-op under the drift "significantly" faster)
    assert [x.index < y.index for x, y in zip(a_rows, b_rows, strict=True)] == [True, True, False]
    speedup = paired_speedup([x.samples_per_s for x in a_rows], [y.samples_per_s for y in b_rows])
    assert not speedup.significant, speedup


@pytest.mark.parametrize("failed", [frozenset({2}), frozenset({3}), frozenset({0, 5}), frozenset()])
def test_refilled_rounds_leave_each_side_first_in_half_of_them(ctx, monkeypatch, failed):  # noqa: F811
    launches = DriftingLaunches(fail=failed)
    monkeypatch.setattr(pairs, "run_launch", launches)
    a, b = _settings(ctx, same_env=True)
    a_rows, b_rows = measure(ctx, a, b, 4, LaunchKind.LADDER, "ladder-0-x")
    firsts = [x.index < y.index for x, y in zip(a_rows, b_rows, strict=True)]
    assert sorted(firsts) == [False, False, True, True]


def test_abba_puts_each_side_first_in_every_other_round_and_cancels_a_linear_drift():
    assert abba("a", "b", 0, 4) == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert abba("a", "b", 1, 2) == ["b", "a", "a", "b"]  # a launch resuming at round 1 keeps the order
    slots = abba("a", "b", 0, 6)
    rate = [1000.0 * (1 - DRIFT * i) for i in range(len(slots))]
    a = [r for r, s in zip(rate, slots, strict=True) if s == "a"]
    b = [r for r, s in zip(rate, slots, strict=True) if s == "b"]
    drifting = paired_speedup(a, b)
    assert not drifting.significant
    assert drifting.ratio == pytest.approx(1.0, abs=1e-4)
    fixed = paired_speedup(rate[0::2], rate[1::2])  # a always first: the drift reads as a speedup
    assert fixed.significant


def test_a_stored_row_without_a_positive_rate_is_measured_again_not_a_crash(ctx, monkeypatch):  # noqa: F811
    # A row an older version or a hand wrote: "ok" with no rate, or 0, failed the study (math domain error).
    launches = DriftingLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    a, b = _settings(ctx, same_env=False)
    spec = spec_of(ctx, pairs.PlannedLaunch.of(a.env, [a.point], LaunchKind.LADDER, tag="ladder-0-x"))
    launch = ctx.store.add_launch(study_id=ctx.study_id, kind=LaunchKind.LADDER, env=a.env, spec=spec,
                                  executor="fake", attempt=1, nnodes=None)  # fmt: skip
    ctx.store.finish_launch(launch.id, [{"study_id": ctx.study_id, "launch_id": launch.id, "index": 0,
                                         "kind": LaunchKind.LADDER, "env": a.env, "fwd_precision": "fp32",
                                         "bwd_precision": "fp32", "batch_size": a.point.batch_size,
                                         "sharding": a.point.sharding, "pipeline": a.point.pipeline, "state": "ok",
                                         "samples_per_s": 0.0}], state="succeeded")  # fmt: skip
    speedup, _ = compare(ctx, a, b, 3, LaunchKind.LADDER, "ladder-0-x")
    assert speedup is not None
    assert speedup.rounds == 3
