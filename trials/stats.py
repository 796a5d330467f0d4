"""Summary statistics of per-iteration samples (pure Python, shared with the engine)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """median / p10 / p90 / mean / cv (sample std over mean) / min / max of `values`."""
    s = sorted(values)
    n = len(s)
    mean = sum(s) / n
    var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
    return {
        "median": percentile(s, 50),
        "p10": percentile(s, 10),
        "p90": percentile(s, 90),
        "mean": mean,
        "cv": math.sqrt(var) / mean if mean > 0 else 0.0,
        "min": s[0],
        "max": s[-1],
        "n": n,
    }
