"""The background scheduler: runs queued studies (and resumes interrupted ones) with their executor.

It runs in a child process of `autotuner serve` (`python -m api.scheduler`), so study work (Optuna,
writes, polling launches) never holds the interpreter lock of the process that answers config
fetches. One study at a time per scheduler. Studies are taken through the store's lease, so
several replicas on one PostgreSQL never run the same study twice, and a scheduler that dies
(SIGKILL) loses its lease: another one, or itself restarted, resumes the study where it stopped.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
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


class SchedulerProcess:
    """The scheduler as a child process that dies with its parent (PR_SET_PDEATHSIG on Linux)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        parent = os.getpid()
        self.proc = subprocess.Popen([sys.executable, "-m", "api.scheduler"], env=self.env,
                                     preexec_fn=lambda: die_with_parent(nice=10, parent=parent))  # fmt: skip

    def stop(self, timeout_s: float = 10) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class RunningScheduler:
    """A scheduler started by someone else (`autotuner serve`), seen from a worker: alive or not."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    @property
    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def scheduler_env(settings: Any) -> dict[str, str]:
    """The scheduler reads the same settings as the service; make the resolved store explicit."""
    return {
        **os.environ,
        "AUTOTUNER_DATABASE_URL": settings.url,
        "AUTOTUNER_DATA_DIR": str(settings.data_dir),
    }


def die_with_parent(nice: int = 0, parent: int | None = None) -> None:
    """Linux: get SIGTERM when the parent dies (PR_SET_PDEATHSIG); optionally lower our priority.
    Studies are background work: the processes that answer job starts come first.

    `parent`: the pid the parent had. One that died before we asked would never send the signal
    (a uvicorn worker still importing the app when its supervisor is killed): exit now instead."""
    if nice:
        os.nice(nice)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: a child outlives a SIGKILLed parent; the study lease still protects studies
    if parent is not None and os.getppid() != parent:
        os._exit(0)  # orphaned already: nothing of ours to clean up yet


def main() -> None:
    """Child entry point: settings from the same AUTOTUNER_* environment as the service."""
    from api.settings import Settings
    from autotuner.executors import make_executor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    scheduler = Scheduler(Store(settings.url), make_executor)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # launches live on; the next scheduler re-attaches
    log.info("scheduler %s running studies from %s", scheduler.owner, settings.url)
    scheduler.start()
    assert scheduler._thread is not None
    scheduler._thread.join()


if __name__ == "__main__":
    main()
