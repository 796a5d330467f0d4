"""A search launch's candidates of one sharding go together: the trial runs them in the spec's order
and re-shards at every change of sharding (paired rounds depend on that order; a search's is free)."""

from __future__ import annotations

from autotuner.space.dims import InProcPoint
from autotuner.store import LaunchKind
from autotuner.tuning.plan import PlannedLaunch, by_sharding


def point(batch: int, sharding: str) -> InProcPoint:
    return InProcPoint("fp32", "fp32", batch, sharding)


def test_points_of_one_sharding_are_put_together_with_what_asked_for_them():
    points = [
        point(64, "table_wise"),
        point(64, "row_wise"),
        point(128, "table_wise"),
        point(128, "row_wise"),
    ]
    plan = PlannedLaunch({}, list(points), [10, 11, None, 13], LaunchKind.SEARCH, echoes={14: 2, 15: 1})
    by_sharding(plan)
    assert plan.points == [points[0], points[2], points[1], points[3]]  # each sharding's own order kept
    assert plan.trials == [10, None, 11, 13]  # each proposal still with the point it asked for
    assert plan.echoes == {14: 1, 15: 2}  # and each echo with the slot that measures its point
    assert [plan.points[slot] for slot in plan.echoes.values()] == [points[2], points[1]]
