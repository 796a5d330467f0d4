"""Persistence: SQLAlchemy models, migrations, and the Store every component goes through."""

from autotuner.store.models import Candidate, Cluster, Config, Launch, Quarantine, Study, Workload, utcnow
from autotuner.store.repo import (
    CANDIDATE_SORT_KEYS,
    NotFound,
    Store,
    env_hash,
    pick_served,
)
from autotuner.store.states import (
    ACTIVE,
    MEASURED,
    TERMINAL,
    CandidateState,
    LaunchKind,
    StudyState,
)

__all__ = [
    "ACTIVE",
    "CANDIDATE_SORT_KEYS",
    "MEASURED",
    "TERMINAL",
    "CandidateState",
    "LaunchKind",
    "StudyState",
    "Candidate",
    "Cluster",
    "Config",
    "Launch",
    "NotFound",
    "Quarantine",
    "Store",
    "Study",
    "Workload",
    "env_hash",
    "pick_served",
    "utcnow",
]
