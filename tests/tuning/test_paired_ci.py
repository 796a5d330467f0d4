"""The intervals every claim rests on: t_quantile against Student's t, paired_speedup against a hand-worked
interval and scipy's one-sample t-interval on the log ratios."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from autotuner.tuning.stats import paired_speedup, t_quantile

# Student's t(0.975, df), from the printed tables (df 11-14 and past 30 are where a table lookup slips).
TABLE = {1: 12.7062, 2: 4.3027, 4: 2.7764, 10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448,
         30: 2.0423, 31: 2.0395, 40: 2.0211, 60: 2.0003, 120: 1.9799}  # fmt: skip


@pytest.mark.parametrize(("df", "quantile"), sorted(TABLE.items()))
def test_t_quantile_is_the_tables_value(df, quantile):
    assert t_quantile(df) == pytest.approx(quantile, abs=5e-5)


def test_t_quantile_is_scipys_students_t_at_every_df():
    for df in [*range(1, 101), 1_000, 100_000]:
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-12)


def test_a_hand_worked_interval():
    # log ratios ln 1.2 and 0: mean ln(1.2)/2, sd ln(1.2)/sqrt(2), t(0.975, 1) = 12.7062
    s = paired_speedup([12.0, 10.0], [10.0, 10.0])
    mean, se = math.log(1.2) / 2, math.log(1.2) / 2  # sd / sqrt(2)
    assert s.ratio == pytest.approx(math.sqrt(1.2))
    assert s.ci_low == pytest.approx(math.exp(mean - 12.7062 * se), rel=1e-5)
    assert s.ci_high == pytest.approx(math.exp(mean + 12.7062 * se), rel=1e-5)
    assert (s.rounds, s.tuned, s.baseline) == (2, 11.0, 10.0)
    assert not s.significant  # [0.35, 3.43]: one good round of two proves nothing


def test_the_interval_is_scipys_t_interval_on_the_log_ratios():
    tuned = [1480.0, 1512.0, 1466.0, 1530.0, 1497.0]
    baseline = [1301.0, 1322.0, 1318.0, 1290.0, 1335.0]
    logs = [math.log(t / b) for t, b in zip(tuned, baseline, strict=True)]
    low, high = stats.ttest_1samp(logs, 0.0).confidence_interval(0.95)
    s = paired_speedup(tuned, baseline)
    assert s.ratio == pytest.approx(math.exp(sum(logs) / len(logs)))
    assert (s.ci_low, s.ci_high) == (pytest.approx(math.exp(low)), pytest.approx(math.exp(high)))
    assert s.significant
    assert s.as_dict()["ci_low"] == s.ci_low > 1.0


def test_rounds_that_agree_exactly_give_a_point_interval():
    s = paired_speedup([110.0, 121.0, 99.0], [100.0, 110.0, 90.0])  # 1.1x in every round
    assert (s.ratio, s.ci_low, s.ci_high) == (pytest.approx(1.1),) * 3
    assert s.significant


def test_swapping_the_sides_inverts_the_interval():
    tuned, baseline = [10.4, 9.7, 10.9, 10.1], [9.9, 9.8, 10.0, 9.6]
    forward, backward = paired_speedup(tuned, baseline), paired_speedup(baseline, tuned)
    assert backward.ratio == pytest.approx(1 / forward.ratio)
    assert (backward.ci_low, backward.ci_high) == (
        pytest.approx(1 / forward.ci_high),
        pytest.approx(1 / forward.ci_low),
    )


@pytest.mark.parametrize(("tuned", "baseline"), [([1.0], [1.0]), ([1.0, 2.0], [1.0]), ([], [])])
def test_fewer_than_two_pairs_is_refused(tuned, baseline):
    with pytest.raises(ValueError, match="at least 2"):
        paired_speedup(tuned, baseline)
