"""Speedup with a confidence interval, from paired (tuned, baseline) measurements."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% Student t quantiles t(0.975, df) for small samples (df -> value); normal beyond.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}  # fmt: skip


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("need at least 2 pairs for an interval")
    known = [d for d in _T975 if d <= df]
    return _T975[max(known)] if df <= 30 else 1.96


@dataclass(frozen=True)
class Speedup:
    ratio: float  # geometric mean of tuned/baseline over rounds
    ci_low: float
    ci_high: float
    rounds: int
    tuned: float  # mean samples/s of the tuned config
    baseline: float

    @property
    def significant(self) -> bool:
        """The tuned config is faster with 95% confidence."""
        return self.ci_low > 1.0

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "speedup": self.ratio,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": 0.95,
            "rounds": self.rounds,
            "tuned_samples_per_s": self.tuned,
            "baseline_samples_per_s": self.baseline,
            "significant": self.significant,
        }


def paired_speedup(tuned: Sequence[float], baseline: Sequence[float]) -> Speedup:
    """95% t-interval on the mean log ratio of paired rounds (interleaved, so drift cancels).

    Log ratios make the interval multiplicative and symmetric in "x faster" / "x slower". One round
    gives no interval at all, so at least two are required.
    """
    if len(tuned) != len(baseline) or len(tuned) < 2:
        raise ValueError("need the same number (at least 2) of tuned and baseline rounds")
    logs = [math.log(t / b) for t, b in zip(tuned, baseline, strict=True)]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    return Speedup(math.exp(mean), low, high, n, sum(tuned) / n, sum(baseline) / n)
