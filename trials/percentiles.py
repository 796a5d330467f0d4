"""Summary statistics of per-iteration samples (numpy's definitions: linear-interpolated percentiles,
the sample standard deviation)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear-interpolated) percentile of `values`, q in [0, 100]."""
    if not len(values):
        raise ValueError("percentile of no values")
    return float(np.percentile(values, q))


def summarize(values: Sequence[float]) -> dict[str, float]:
    """median / p10 / p90 / mean / cv (sample std over mean) / min / max / n of `values`."""
    a = np.asarray(values, dtype=float)
    if not a.size:
        raise ValueError("summary of no values")
    p10, median, p90 = np.percentile(a, [10, 50, 90])
    mean = float(a.mean())
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {
        "median": float(median),
        "p10": float(p10),
        "p90": float(p90),
        "mean": mean,
        "cv": sd / mean if mean > 0 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "n": a.size,
    }
