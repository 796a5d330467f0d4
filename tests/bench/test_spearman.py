"""The fidelity benchmark's rank correlation (bench/training.py) on hand-worked cases."""

from __future__ import annotations

import pytest

from bench.training import spearman


@pytest.mark.parametrize(
    ("xs", "ys", "rho"),
    [
        ([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], 1.0),
        ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0], -1.0),
        ([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], 0.8),  # 1 - 6 * 2 / (4 * 15)
        ([1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], 4.5 / (4.5 * 5) ** 0.5),  # a tie: mean ranks 2.5
    ],
)
def test_spearman_on_hand_worked_ranks(xs, ys, rho):
    assert spearman(xs, ys) == pytest.approx(rho)


def test_a_constant_side_has_no_order_to_agree_with():
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
