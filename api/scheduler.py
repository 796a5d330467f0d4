"""The service's scheduler: the engine's study queue (autotuner.tuning.StudyQueue) in a child process:
studies, then re-validations of published configs (asked over REST, by the AUTOTUNER_REVALIDATE_EVERY
schedule, or by jobs reporting another stack).

It runs beside `autotuner serve`'s workers (`python -m api.scheduler`), so study work (Optuna,
writes, polling launches) never holds the interpreter lock of a process that answers config
fetches. The queue takes studies through the store's lease, so several replicas on one PostgreSQL
never run the same study twice, and a scheduler that dies (SIGKILL) loses its lease.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotuner.store import Store
from autotuner.tuning import StudyQueue

log = logging.getLogger("autotuner.scheduler")


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
        return not _zombie(self.pid)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _zombie(pid: int) -> bool:
    """Dead but not reaped: `autotuner serve` never waits for its scheduler, and os.kill(pid, 0) still
    finds such a process. From /proc (Linux); elsewhere os.kill's answer stands."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"  # the state follows "(comm)", which may hold ")"


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

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    queue = StudyQueue(Store(settings.url), revalidate_every_s=settings.revalidate_every_s,
                       revalidate_every=settings.revalidate_every, prune_after_s=settings.prune_runs_after_s)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # launches live on; the next scheduler re-attaches
    log.info("scheduler %s running studies from %s", queue.owner, settings.url)
    queue.start()
    queue.join()


if __name__ == "__main__":
    main()
