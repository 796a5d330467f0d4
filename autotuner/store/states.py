"""The states and kinds the store records, as StrEnums: one spelling for the store, the engine,
the API and the demo. Values are the strings in the database (a StrEnum compares equal to them).

They live with the store, not the engine, so that imports point one way (tuning -> store).
"""

from __future__ import annotations

from enum import StrEnum


class StudyState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CONFIRMING = "confirming"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class LaunchKind(StrEnum):
    BASELINE = "baseline"
    SEARCH = "search"
    CONFIRM = "confirm"
    LADDER = "ladder"  # one knob group at a time, from the baseline to the tuned config
    QUALITY = "quality"  # the convergence check: training, not timing
    SCALING = "scaling"


class CandidateState(StrEnum):
    OK = "ok"
    FAILED = "failed"
    INFEASIBLE = "infeasible"  # measured, but its codec's error is over the tolerance


# A study in one of these never runs again; the others are what a scheduler picks up.
TERMINAL: frozenset[StudyState] = frozenset({StudyState.DONE, StudyState.FAILED, StudyState.CANCELLED})
ACTIVE: tuple[StudyState, ...] = tuple(s for s in StudyState if s not in TERMINAL)
# Measured (a throughput exists): what confirmation, scaling and the ladder read back.
MEASURED: tuple[CandidateState, ...] = (CandidateState.OK, CandidateState.INFEASIBLE)
