"""Precision x sharding pairs that cannot run (int8 comms on a reduce-scatter) are never searched."""

from __future__ import annotations

import pytest

from autotuner.space import InProcPoint, SpaceError, lint_space, load_space

SPACE = {
    "precisions": [["fp32", "fp32"], ["int8", "int8"], ["fp16", "int8"]],
    "batch_sizes": [512],
    "sharding": ["table_wise", "row_wise", "table_row_wise"],
}


def test_int8_on_a_reduce_scatter_sharding_is_left_out_of_the_points():
    points = load_space(SPACE).inproc_points()
    assert {(p.fwd_precision, p.bwd_precision, p.sharding) for p in points} == {
        ("fp32", "fp32", "table_wise"),
        ("fp32", "fp32", "row_wise"),
        ("fp32", "fp32", "table_row_wise"),
        ("int8", "int8", "table_wise"),
        ("fp16", "int8", "table_wise"),
    }
    assert all(p.problem() is None for p in points)


def test_the_space_warns_of_each_pair_it_leaves_out():
    problems = lint_space(SPACE)
    left_out = [p for p in problems if p.rule == "cannot-run"]
    assert [p.message.split(" is not searched")[0] for p in left_out] == [
        "int8/int8 x row_wise",
        "int8/int8 x table_row_wise",
        "fp16/int8 x row_wise",
        "fp16/int8 x table_row_wise",
    ]
    assert all(p.variable == "precisions" and p.severity == "warning" for p in left_out)
    assert "reduce-scatter" in left_out[0].message


def test_a_space_with_nothing_left_to_search_is_refused():
    with pytest.raises(SpaceError) as err:
        load_space({"precisions": [["int8", "int8"]], "sharding": ["row_wise"]})
    (problem,) = err.value.problems
    assert problem.rule == "cannot-run"
    assert "no precision x sharding pair can run" in problem.message


@pytest.mark.parametrize(
    ("point", "refused"),
    [
        (InProcPoint("int8", "int8", 64, "row_wise"), True),
        (InProcPoint("fp32", "int8", 64, "table_row_wise"), True),
        (InProcPoint("int8", "int8", 64, "column_wise"), False),
        (InProcPoint("fp8", "bf16", 64, "row_wise"), False),
    ],
)
def test_a_point_says_why_it_cannot_run(point, refused):
    assert (point.problem() is not None) == refused
