"""The background scheduler: runs queued studies (and resumes interrupted ones) with their executor.

One study at a time per process. Studies are taken through the store's lease, so several service
replicas on one PostgreSQL never run the same study twice, and a replica that dies (SIGKILL) loses
its lease: another one, or itself restarted, resumes the study where it stopped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from autotuner.driver import StudyBusy, StudyDriver, owner_id, owner_is_dead
from autotuner.executors import Executor
from autotuner.store import ACTIVE_STUDY_STATES, Store
from autotuner.study import StudySettings

log = logging.getLogger("autotuner.scheduler")


class Scheduler:
    def __init__(
        self,
        store: Store,
        make_executor: Callable[[StudySettings], Executor],
        *,
        poll_s: float = 1.0,
        on_study_end: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.make_executor = make_executor
        self.poll_s = poll_s
        self.on_study_end = on_study_end
        self.owner = owner_id()
        self.current: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="study-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def runnable(self) -> list[Any]:
        """Studies nobody live is running: free or expired lease, or a holder that died on this host."""
        claimable = {s.id: s for s in self.store.claimable_studies()}
        for study in self.store.studies(states=ACTIVE_STUDY_STATES, limit=1000):
            if study.id not in claimable and owner_is_dead(study.owner):
                claimable[study.id] = study
        return sorted(claimable.values(), key=lambda s: s.id)

    def run_once(self) -> bool:
        for study in self.runnable():
            settings = StudySettings.model_validate(study.settings)
            self.current = study.id
            try:
                StudyDriver(self.store, study.id, self.make_executor(settings), owner=self.owner).run()
            except StudyBusy:
                continue
            except Exception:  # a broken study must not stop the scheduler
                log.exception("study %s crashed the driver", study.id)
            finally:
                self.current = None
                self.on_study_end()
            return True
        return False

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.run_once()
            except Exception:
                log.exception("scheduler tick failed")
                worked = False
            if not worked:
                self._stop.wait(self.poll_s)
