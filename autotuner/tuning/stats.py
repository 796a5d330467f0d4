"""Confidence intervals from paired measurements: a speedup (tuned vs baseline rounds), a quality
delta (a variant vs the baseline under the same model seeds), a ratio over seeds, and a product of
two such ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

PASSED, REFUSED, NOT_RESOLVED = "passed", "refused", "not resolved"
MAX_SEEDS = 1000  # "would resolve at k=..." says no more than this
CONFIDENCE = 0.95  # of every interval, unless several were tried and the best taken (family_confidence)


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student t quantile of `confidence` (95%: t(0.975, df))."""
    if df < 1:
        raise ValueError("need at least 2 pairs for an interval")
    # imported here: scipy costs every service process and CLI command ~0.2 s at start, and only
    # an interval needs it
    from scipy.special import stdtrit

    return float(stdtrit(df, 1 - (1 - confidence) / 2))


def family_confidence(tries: int) -> float:
    """The confidence each of `tries` intervals needs when the best of them is taken (Bonferroni):
    the best of three learning-rate rules at 95% each passed a batch with no gain in time to quality
    twice as often as one rule did (tests/tuning/test_quality_stats.py)."""
    return 1 - (1 - CONFIDENCE) / max(tries, 1)


@dataclass(frozen=True)
class Speedup:
    ratio: float  # geometric mean of tuned/baseline over rounds
    ci_low: float
    ci_high: float
    rounds: int
    tuned: float  # mean samples/s of the tuned config
    baseline: float
    confidence: float = CONFIDENCE  # of the interval (a re-validation's two looks: 97.5% each)

    @property
    def significant(self) -> bool:
        """The tuned config is faster with the interval's confidence."""
        return self.ci_low > 1.0

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "speedup": self.ratio,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": self.confidence,
            "rounds": self.rounds,
            "tuned_samples_per_s": self.tuned,
            "baseline_samples_per_s": self.baseline,
            "significant": self.significant,
        }


def paired_speedup(
    tuned: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE
) -> Speedup:
    """t-interval (95% unless told) on the mean log ratio of paired rounds.

    The pairs must come from counterbalanced rounds (pairs.py: ABBA, each side first in every other
    round): only then does a steady drift of the machine cancel over each two rounds; in a fixed
    order it would shift every ratio the same way and read as a speedup. Log ratios make the interval
    multiplicative and symmetric in "x faster" / "x slower". One round gives no interval at all, so
    at least two are required.
    """
    if len(tuned) != len(baseline) or len(tuned) < 2:
        raise ValueError("need the same number (at least 2) of tuned and baseline rounds")
    logs = [math.log(t / b) for t, b in zip(tuned, baseline, strict=True)]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    return Speedup(math.exp(mean), low, high, n, sum(tuned) / n, sum(baseline) / n, confidence)


@dataclass(frozen=True)
class Delta:
    """The mean of paired differences (variant - baseline, one per model seed) with its t-interval."""

    mean: float
    ci_low: float
    ci_high: float
    sd: float  # of the paired differences
    k: int
    confidence: float = CONFIDENCE

    def verdict(self, limit: float) -> str:
        """Passed when the interval's upper end is within `limit`; refused when its lower end is
        above it, or when the interval is narrower than `limit` and its upper end above it; else not
        resolved (the interval is too wide to tell a cost from chance)."""
        if self.ci_high <= limit:
            return PASSED
        if self.ci_low > limit or self.ci_high - self.ci_low <= limit:
            return REFUSED
        return NOT_RESOLVED

    def k_to_resolve(self, limit: float) -> int | None:
        """The fewest seeds whose interval would be no wider than `limit` at this spread (None: more
        than MAX_SEEDS)."""
        return seeds_to_resolve(self.sd, limit, self.confidence)

    def as_dict(self, limit: float) -> dict[str, float | int | str | None]:
        verdict = self.verdict(limit)
        return {"delta": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high, "sd": self.sd, "k": self.k,
                "confidence": self.confidence, "verdict": verdict, "k_to_resolve": self.k_to_resolve(limit) if verdict == NOT_RESOLVED else None}  # fmt: skip


def paired_delta(
    variant: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE
) -> Delta:
    """t-interval on the mean of `variant[i] - baseline[i]` over the k pairs (k >= 2)."""
    if len(variant) != len(baseline) or len(variant) < 2:
        raise ValueError("need the same number (at least 2) of variant and baseline seeds")
    diffs = [v - b for v, b in zip(variant, baseline, strict=True)]
    k, mean, sd = len(diffs), statistics.fmean(diffs), statistics.stdev(diffs)
    half = t_quantile(k - 1, confidence) * sd / math.sqrt(k)
    return Delta(mean, mean - half, mean + half, sd, k, confidence)


def seeds_to_resolve(sd: float, limit: float, confidence: float = CONFIDENCE) -> int | None:
    """The fewest pairs k (>= 2) whose interval, 2 t(k-1) sd / sqrt(k), is no wider than `limit`."""
    for k in range(2, MAX_SEEDS + 1):
        if 2 * t_quantile(k - 1, confidence) * sd / math.sqrt(k) <= limit:
            return k
    return None


@dataclass(frozen=True)
class Ratio:
    """A geometric-mean ratio with its 95% interval, and the spread of its log (for a product)."""

    ratio: float
    ci_low: float
    ci_high: float
    se: float  # standard error of the mean log ratio
    df: float

    def as_dict(self) -> dict[str, float]:
        return {"ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high}

    @classmethod
    def of_interval(cls, ratio: float, ci_low: float, ci_high: float, n: int) -> Ratio:
        """A ratio known by its 95% t-interval over n pairs (a ladder step's gain)."""
        df = max(n - 1, 1)
        return cls(ratio, ci_low, ci_high, math.log(ci_high / ci_low) / (2 * t_quantile(df)), df)


def ratio_over(ratios: Sequence[float], confidence: float = CONFIDENCE) -> Ratio:
    """t-interval on the geometric mean of per-seed ratios (k >= 2)."""
    if len(ratios) < 2 or min(ratios) <= 0:
        raise ValueError("need at least 2 positive ratios")
    logs = [math.log(r) for r in ratios]
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    half = t_quantile(len(logs) - 1, confidence) * se
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), se, len(logs) - 1)


def product(a: Ratio, b: Ratio, confidence: float = CONFIDENCE) -> Ratio:
    """a x b with its interval: the logs' standard errors add in quadrature (the two are measured
    independently: throughput rounds, model seeds), with the fewer degrees of freedom of the two (the
    conservative choice; Welch-Satterthwaite's would be narrower at a handful of seeds)."""
    var = a.se**2 + b.se**2
    ratio = a.ratio * b.ratio
    df = min(a.df, b.df)
    half = t_quantile(df, confidence) * math.sqrt(var)
    return Ratio(ratio, ratio * math.exp(-half), ratio * math.exp(half), math.sqrt(var), df)
