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
import threading
import time
from pathlib import Path
from typing import Any

from autotuner.store import Store
from autotuner.store.db import shown_url
from autotuner.tuning import StudyQueue

log = logging.getLogger("autotuner.scheduler")
RESTART_DELAYS_S = (1.0, 60.0)  # after the first death, then doubling up to the second
STOPPED_RESTART_S = 15.0  # after an end a stop signal gives: longer than the service takes to stop


class SchedulerProcess:
    """The scheduler as a child process that dies with its parent (PR_SET_PDEATHSIG on Linux), and is
    started again when it dies on its own (killed for memory, say): studies and re-validations must not
    stop for good while the API keeps answering. Its pid goes to `pid_file` and the restarts so far to
    `restarts_file(pid_file)`, where workers look (readiness, and /metrics: a scheduler in a crash loop
    shows there, not only in the log)."""

    def __init__(self, env: dict[str, str], pid_file: Path | None = None) -> None:
        self.env = env
        self.pid_file = pid_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started = 0.0
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self._spawn()
        threading.Thread(target=self._supervise, name="scheduler-supervisor", daemon=True).start()

    def _spawn(self) -> None:
        parent = os.getpid()
        with self._lock:
            if self._stopping.is_set():  # stop() came between the supervisor's check and here
                return
            self.proc = subprocess.Popen([sys.executable, "-m", "api.scheduler"], env=self.env,
                                         preexec_fn=lambda: _scheduler_child(parent))  # fmt: skip
            self._started = time.monotonic()
            if self.pid_file is not None:
                self._write_pid_file()

    def _write_pid_file(self) -> None:
        """The pid alone, as every tool reads a pid file (`kill -9 $(cat scheduler.pid)` killed the
        operator's own process group with a count of 0 on a second line); the count first, so a reader
        never pairs the new pid with the old count. Each whole or not at all (a reader never sees half
        a pid); a full disk is logged, never raised: the supervisor must outlive it (its thread's end
        would take the child with it, PDEATHSIG)."""
        assert self.pid_file is not None and self.proc is not None
        try:
            _replace(restarts_file(self.pid_file), f"{self.restarts}\n")
            _replace(self.pid_file, f"{self.proc.pid}\n")
        except OSError as exc:
            log.error(
                "could not write the scheduler's pid to %s: %s (readiness will say stopped)",
                self.pid_file,
                exc,
            )

    def _supervise(self) -> None:
        """Reap the child when it dies and start another, waiting longer each time it dies young."""
        delay = RESTART_DELAYS_S[0]
        while True:
            assert self.proc is not None
            code = self.proc.wait()  # reaped: never left a zombie that looks alive
            if time.monotonic() - self._started > RESTART_DELAYS_S[-1]:
                delay = RESTART_DELAYS_S[0]  # it had lived a while: not a crash loop
            if self._stopping.is_set():
                return
            # A stop signal's end (its SIGTERM handler exits 0) is no crash: sent to the whole process group
            # (systemd's control-group stop, GNU timeout) it reaches the scheduler as the service stops,
            # whose workers may take seconds to drain: none is started meanwhile.
            stopped = _stop_signal(code)
            wait = max(delay, STOPPED_RESTART_S) if stopped else delay
            log.log(logging.INFO if stopped else logging.WARNING,
                    "the scheduler process %s ended (%s): starting another in %.0f s%s", self.proc.pid, _how(code),
                    wait, " unless the service is stopping" if stopped else "")  # fmt: skip
            if self._stopping.wait(wait):
                return
            self.restarts += 1  # before the spawn, which writes it beside the new pid
            delay = min(delay * 2, RESTART_DELAYS_S[-1])
            while True:
                try:
                    self._spawn()
                    break
                except (
                    OSError,
                    subprocess.SubprocessError,
                ) as exc:  # no memory or pids left after an OOM kill
                    log.error(
                        "could not start the scheduler process (%s): trying again in %.0f s", exc, delay
                    )
                    if self._stopping.wait(delay):
                        return
                    delay = min(delay * 2, RESTART_DELAYS_S[-1])
            if self._stopping.is_set():
                return
            log.warning("the scheduler process %s started (restart %d)", self.proc.pid, self.restarts)

    def stop(self, timeout_s: float = 10) -> None:
        self._stopping.set()
        with self._lock:
            if self.alive:
                assert self.proc is not None
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()


def restarts_file(pid_file: Path) -> Path:
    """Where the supervisor keeps its restart count: beside the pid file (scheduler.restarts)."""
    return pid_file.with_name(f"{pid_file.stem}.restarts")


def _replace(path: Path, text: str) -> None:
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(text)
    os.replace(part, path)


def _stop_signal(code: int) -> bool:
    """Whether a child's end is what a stop signal gives: its SIGTERM handler's exit 0, or the signal
    itself (before the handler was set)."""
    return code in (0, -signal.SIGTERM, -signal.SIGHUP, -signal.SIGQUIT)


def _how(code: int) -> str:
    """A child's end in words: its exit code, or the signal that killed it (one Python has no name for
    too: the supervisor must not die of its own log line)."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


class RunningScheduler:
    """A scheduler started by someone else (`autotuner serve`), seen from a worker: alive or not, and
    how often it was started again. Read from the files each time: the supervisor writes a new pid when
    it starts another. A pid file of a version before the count's own file (the pid, then the count on
    a second line) is read too: a worker started again after an upgrade may find one."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file

    def _lines(self, path: Path) -> list[int]:
        try:
            return [int(x) for x in path.read_text().split()]
        except (OSError, ValueError):  # no file yet, or a torn write
            return []

    @property
    def alive(self) -> bool:
        lines = self._lines(self.pid_file)
        if not lines or lines[0] <= 1:  # never signal a process group (0) or init
            return False
        try:
            os.kill(lines[0], 0)
        except OSError:  # no such process
            return False
        return not _zombie(lines[0])

    @property
    def restarts(self) -> int:
        count = self._lines(restarts_file(self.pid_file))
        if count:
            return count[0]
        lines = self._lines(self.pid_file)  # an older supervisor's: the count on the second line
        return lines[1] if len(lines) > 1 else 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _zombie(pid: int) -> bool:
    """Dead but not yet reaped (for an instant, before the supervisor's wait returns): os.kill(pid, 0)
    still finds such a process. From /proc (Linux); elsewhere os.kill's answer stands."""
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


def _scheduler_child(parent: int) -> None:
    """In the scheduler's process before it runs: deaf to the terminal's Ctrl-C (the service stops it
    with SIGTERM when it stops; a SIGINT to the whole group killed it mid-shutdown, and the supervisor
    started another), a lower priority, and death with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec: Python keeps it ignored
    die_with_parent(nice=10, parent=parent)


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
    from api.settings import Settings, log_to_stderr

    log_to_stderr()
    settings = Settings()
    queue = StudyQueue(Store(settings.url), revalidate_every_s=settings.revalidate_every_s,
                       revalidate_every=settings.revalidate_every, prune_after_s=settings.prune_runs_after_s,
                       executors=settings.allowed_executors)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # launches live on; the next scheduler re-attaches
    log.info("scheduler %s running studies from %s", queue.owner, shown_url(settings.url))  # no password
    queue.start()
    queue.join()


if __name__ == "__main__":
    main()
