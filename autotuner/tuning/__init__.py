"""Tuning studies: one settings schema, the driver as a loop over phases, the study queue.

create_study(store, ...) -> a queued study        StudyDriver(store, id, executor).run()
StudyQueue(store).start()  runs queued studies
"""

from autotuner.names import NAME_PATTERN, NAME_RULE
from autotuner.tuning.context import Progress, point_of
from autotuner.tuning.driver import StudyDriver
from autotuner.tuning.ingest import fingerprint
from autotuner.tuning.lease import (
    LEASE_S,
    StoreUnavailable,
    StudyBusy,
    StudyCancelled,
    WorkdirFull,
    owner_id,
    owner_is_dead,
)
from autotuner.tuning.queue import StudyQueue
from autotuner.tuning.search import optuna_storage, record_name
from autotuner.tuning.settings import EXECUTORS, RequestSettings, StudySettings
from autotuner.tuning.study import (
    StudyError,
    StudyExists,
    baseline_batch,
    best_and_baseline,
    check_name,
    create_study,
    study_settings,
)

__all__ = [
    "EXECUTORS",
    "LEASE_S",
    "StoreUnavailable",
    "NAME_PATTERN",
    "NAME_RULE",
    "Progress",
    "RequestSettings",
    "StudyBusy",
    "StudyCancelled",
    "StudyDriver",
    "StudyError",
    "StudyExists",
    "StudyQueue",
    "StudySettings",
    "WorkdirFull",
    "baseline_batch",
    "best_and_baseline",
    "check_name",
    "create_study",
    "fingerprint",
    "optuna_storage",
    "owner_id",
    "owner_is_dead",
    "point_of",
    "record_name",
    "study_settings",
]
