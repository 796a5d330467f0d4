"""Caps on the work one request, file or command may ask for, declared in one place.

A small request must not buy unbounded work: a 16 KB space can describe a grid of a billion in-process
candidates, a 1 MB body tens of thousands of values. Each cap has a default that covers real studies
and an environment variable that raises it (read at each check, so a service picks up a new value at
its next start and a test can set one):

    AUTOTUNER_MAX_CANDIDATES   in-process candidates of one space (precisions x batch_sizes x sharding
                               x num_threads x pipelines), default 100,000
    AUTOTUNER_MAX_DIM_VALUES   values of one dimension or list of a space (batch_sizes, one env
                               variable's values, allow_risky, ...) and variables in env / fixed_env,
                               default 1,000
    AUTOTUNER_MAX_TABLES       embedding tables of one workload, default 4,096 (a trial builds no more
                               whatever this says: trials.spec.MAX_TABLES; it may only lower it)
    AUTOTUNER_MAX_BODY_BYTES   a REST request body, chunked or not (413 above it), default 1 MiB
    AUTOTUNER_MAX_NODES        nodes one launch of a study may ask for (nnodes, scaling_nodes), default 64
    AUTOTUNER_MAX_RESULT_BYTES a trial's result.json as the tuner reads it (a larger one fails its
                               launch), default 64 MiB: each candidate's per-rank call log grows
                               with the square of the ranks (~22 MiB for 15 candidates at 192
                               ranks); parsing takes up to ~15x the file's size in memory (a file
                               of more objects and lists than one per 64 bytes of the cap, at
                               least 1,000,000, is refused unparsed)
    AUTOTUNER_MAX_QUEUED       studies waiting in the service's queue at once: a POST beyond it is
                               refused with 429 and Retry-After until one starts or is cancelled,
                               default 100

A request over a cap is refused with 422 (the CLI: exit 2) naming the limit, its variable and the size
asked for. Numbers must be finite (NaN and infinities are refused with 422, never a 500).

Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULTS = {
    "AUTOTUNER_MAX_CANDIDATES": 100_000,
    "AUTOTUNER_MAX_DIM_VALUES": 1_000,
    "AUTOTUNER_MAX_TABLES": 4_096,
    "AUTOTUNER_MAX_BODY_BYTES": 1 << 20,
    "AUTOTUNER_MAX_NODES": 64,
    "AUTOTUNER_MAX_RESULT_BYTES": 64 << 20,
    "AUTOTUNER_MAX_QUEUED": 100,
}


@dataclass(frozen=True)
class Limits:
    max_candidates: int
    max_dim_values: int
    max_tables: int
    max_body_bytes: int
    max_nodes: int
    max_result_bytes: int
    max_queued: int


class SettingError(ValueError):
    """An AUTOTUNER_* variable of the environment that cannot be used: its name, value and rule."""


def _read(name: str) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return DEFAULTS[name]
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) < 1:
        raise SettingError(f"{name}={text[:40]!r}: a positive integer (default {DEFAULTS[name]})")
    return int(text)


def limits() -> Limits:
    """The caps in force now (environment, else the defaults)."""
    return Limits(
        max_candidates=_read("AUTOTUNER_MAX_CANDIDATES"),
        max_dim_values=_read("AUTOTUNER_MAX_DIM_VALUES"),
        max_tables=_read("AUTOTUNER_MAX_TABLES"),
        max_body_bytes=_read("AUTOTUNER_MAX_BODY_BYTES"),
        max_nodes=_read("AUTOTUNER_MAX_NODES"),
        max_result_bytes=_read("AUTOTUNER_MAX_RESULT_BYTES"),
        max_queued=_read("AUTOTUNER_MAX_QUEUED"),
    )


def over(what: str, size: int, limit: int, variable: str, unit: str = "") -> str:
    """The message of a request over a cap: what, how big, the limit and how to raise it."""
    return f"{what} is {size:,}{unit}, above the limit of {limit:,}{unit} (raise it with {variable})"
