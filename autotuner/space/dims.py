"""The pieces a search space yields: an integer range dimension, an in-process point, an exported env point.

An env dimension is a list of values (null = unset) or an IntRange; an in-process point is one candidate
measured inside a launch. These types know nothing of the registry: `checks` judges them against it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from trials.spec import comm_precision_problem


class IntRange(BaseModel):
    """An integer dimension sampled between low and high (inclusive); `step` makes it a grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: StrictInt
    high: StrictInt
    log: StrictBool = False
    step: StrictInt | None = None

    def values(self) -> list[int] | None:
        """Every point when the range has a step, else None (a continuum for the sampler). Ask
        `count()` first: a wide range with a small step is a long list."""
        return list(range(self.low, self.high + 1, self.step)) if self.step else None

    def count(self) -> int | None:
        """How many points `values()` would list (None without a step), without listing them."""
        return len(range(self.low, self.high + 1, self.step)) if self.step else None


@dataclass(frozen=True)
class InProcPoint:
    """One candidate measured inside a launch; fields as trials.spec.CandidateSpec."""

    fwd_precision: str
    bwd_precision: str
    batch_size: int
    sharding: str
    num_threads: int | None = None
    pipeline: str | None = None  # None: the workload's own (trials.spec.WorkloadSpec.default_pipeline)

    def key(self) -> str:
        threads = "-" if self.num_threads is None else str(self.num_threads)
        key = f"{self.fwd_precision}/{self.bwd_precision}|{self.batch_size}|{self.sharding}|t{threads}"
        return key if self.pipeline is None else f"{key}|{self.pipeline}"

    def problem(self) -> str | None:
        """Why this point cannot run at all (int8 comms on a reduce-scatter sharding); None when it can."""
        return comm_precision_problem(self.fwd_precision, self.bwd_precision, self.sharding)

    def to_candidate(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fwd_precision": self.fwd_precision,
            "bwd_precision": self.bwd_precision,
            "batch_size": self.batch_size,
            "sharding": self.sharding,
        }
        if self.num_threads is not None:
            out["num_threads"] = self.num_threads
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline
        return out


def to_env_strings(point: Mapping[str, object]) -> dict[str, str]:
    """A sampled point -> the strings exported: None (unset) dropped, integers as plain decimal."""
    out: dict[str, str] = {}
    for name, value in point.items():
        if value is None:
            continue
        if isinstance(value, bool):
            raise ValueError(f"{name}: {value!r} is a boolean, not an env value (use 0 or 1)")
        if isinstance(value, numbers.Integral):
            out[name] = str(int(value))
        elif isinstance(value, str):
            out[name] = value
        else:
            raise ValueError(f"{name}: {value!r} is not an integer or a string")
    return out
