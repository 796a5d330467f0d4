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
    REVALIDATE = "revalidate"  # a published config against the baseline again, after the study


class CandidateState(StrEnum):
    OK = "ok"
    FAILED = "failed"
    INFEASIBLE = "infeasible"  # measured, but its codec's error is over the tolerance


class ValidationState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    HELD = "held"  # still faster than the baseline with 95% confidence (or the baseline itself)
    FAILED = "failed"  # shown slower, or its gain shown gone, over the quality limit, or no longer runs
    # measured, but neither still faster with 95% confidence nor shown to have lost its gain: kept
    UNRESOLVED = "unresolved"
    ERROR = "error"  # could not be measured (the baseline failed too): nothing concluded


class ValidationTrigger(StrEnum):
    MANUAL = "manual"  # autotuner revalidate, POST .../revalidate
    SCHEDULE = "schedule"  # AUTOTUNER_REVALIDATE_EVERY
    FINGERPRINT = "fingerprint"  # jobs reported a stack other than the one it was validated on


VALIDATION_PENDING: tuple[ValidationState, ...] = (ValidationState.QUEUED, ValidationState.RUNNING)
VALIDATION_DONE: tuple[ValidationState, ...] = (
    ValidationState.HELD,
    ValidationState.FAILED,
    ValidationState.UNRESOLVED,
    ValidationState.ERROR,
)


# A study in one of these never runs again; the others are what a scheduler picks up.
TERMINAL: frozenset[StudyState] = frozenset({StudyState.DONE, StudyState.FAILED, StudyState.CANCELLED})
ACTIVE: tuple[StudyState, ...] = tuple(s for s in StudyState if s not in TERMINAL)
# Measured (a throughput exists): what confirmation, scaling and the ladder read back.
MEASURED: tuple[CandidateState, ...] = (CandidateState.OK, CandidateState.INFEASIBLE)
