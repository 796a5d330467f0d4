"""The store: every read and write of our tables goes through here, one short transaction each.

One class over the table families (studies.py, launches.py, configs.py, validations.py), so callers
hold one object.
"""

from __future__ import annotations

from autotuner.store.base import NameTaken, NotFound, ServedChanged, env_hash
from autotuner.store.configs import pick_served
from autotuner.store.launches import CANDIDATE_SORT_KEYS, LaunchRecords
from autotuner.store.validations import ValidationRecords


class Store(ValidationRecords, LaunchRecords):
    pass


__all__ = [
    "CANDIDATE_SORT_KEYS",
    "NameTaken",
    "NotFound",
    "ServedChanged",
    "Store",
    "env_hash",
    "pick_served",
]
