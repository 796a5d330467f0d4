"""Persistence: SQLAlchemy models, migrations, and the Store every component goes through."""

from autotuner.store.models import Candidate, Cluster, Config, Launch, Quarantine, Study, Workload, utcnow
from autotuner.store.repo import (
    ACTIVE_STUDY_STATES,
    CANDIDATE_SORT_KEYS,
    STUDY_STATES,
    NotFound,
    Store,
    env_hash,
    pick_served,
)

__all__ = [
    "ACTIVE_STUDY_STATES",
    "CANDIDATE_SORT_KEYS",
    "STUDY_STATES",
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
