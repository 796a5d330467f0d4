"""The study queue: runs queued studies (and resumes interrupted ones), one at a time, then queued
re-validations of published configs, and asks for the re-validations the schedule says are due.

It also cancels again the launches whose cancel was not confirmed (left_running.py), between studies
and, once started, in a thread of its own beside them.
When idle, it also removes the launch directories of ended studies that are old enough, if the
operator said after how long (the service's AUTOTUNER_PRUNE_RUNS_AFTER).

The service's scheduler process and `autotuner tune` both go through it. Studies are taken through
the store's lease, so several replicas on one PostgreSQL never run the same study twice, and a
runner that dies (SIGKILL) loses its lease: another one, or itself restarted, resumes the study. A
re-validation runs under its study's lease the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Any

from autotuner.executors import Executor, make_executor
from autotuner.store import ACTIVE, Store
from autotuner.text import printable
from autotuner.tuning.driver import UNRUNNABLE, cannot_run, driver_for
from autotuner.tuning.lease import (
    FullDisks,
    StoreUnavailable,
    StudyBusy,
    WorkdirFull,
    owner_id,
    owner_is_dead,
    store_unavailable,
)
from autotuner.tuning.left_running import LeftRunning
from autotuner.tuning.prune import prune
from autotuner.tuning.revalidate import run_pending, schedule_due
from autotuner.tuning.settings import StudySettings, executor_of

log = logging.getLogger("autotuner.queue")
SCHEDULE_CHECK_S = 60.0  # how often (at most) the schedule looks for versions due for re-validation
PRUNE_CHECK_S = 3600.0  # how often (at most) old launch directories are looked for


class StudyQueue:
    def __init__(
        self,
        store: Store,
        make_executor: Callable[[StudySettings], Executor] = make_executor,
        *,
        poll_s: float = 1.0,
        on_study_end: Callable[[], None] = lambda: None,
        revalidate_every_s: float | None = None,
        revalidate_every: str = "",
        prune_after_s: float | None = None,
        executors: Collection[str] | None = None,
    ) -> None:
        self.store = store
        # The executors this queue runs (None: any). A service runs only those it enables: a study that an
        # `autotuner tune --executor local` left (interrupted, killed) ran torchrun on the service's host.
        self.executors = executors
        self._not_here: set[int] = set()  # studies said to use an executor not run here (said once)
        self.prune_after_s = prune_after_s  # None: launch directories are kept
        self._pruned_at = float("-inf")
        self.revalidate_every_s = revalidate_every_s  # None: no schedule
        self.revalidate_every = revalidate_every  # as the operator wrote it, for the reason it gives
        self._schedule_checked = float("-inf")
        self.make_executor = make_executor
        self.poll_s = poll_s
        self.on_study_end = on_study_end
        self.owner = owner_id()
        self.current: int | None = None
        self._unstoppable: set[int] = set()  # cancelled studies whose leftovers could not be stopped: said
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._away_since: float | None = None  # since when the store has not answered a tick
        self.full_disks = FullDisks()  # studies and re-validations a full disk stopped: tried again later
        self.left_running = LeftRunning(store, make_executor)  # launches whose cancel was not confirmed

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.loop, name="study-queue", daemon=True)
        self._thread.start()
        # beside a study that runs for hours: a launch it gave up on may start meanwhile
        threading.Thread(
            target=self.left_running.loop, args=(self._stop,), name="left-running", daemon=True
        ).start()

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def runnable(self) -> list[Any]:
        """Studies nobody live is running: free or expired lease, a holder that died on this host, or
        this queue itself (between two studies it runs none: a lease of its own is one the store's
        outage kept it from letting go of, and the study waited that lease out, while later ones ran)."""
        claimable = {s.id: s for s in self.store.claimable_studies()}
        for study in self.store.studies(states=ACTIVE, limit=1000):
            if study.id not in claimable and (study.owner == self.owner or owner_is_dead(study.owner)):
                claimable[study.id] = study
        return sorted((s for s in claimable.values() if self.runs(s)), key=lambda s: s.id)

    def runs(self, study: Any) -> bool:
        """Whether this queue runs `study`'s executor (one it does not is said once, and left alone)."""
        executor = executor_of(study)
        if self.executors is None or executor in self.executors:
            return True
        if study.id not in self._not_here:
            self._not_here.add(study.id)
            log.warning("study %s (%s) runs on executor %s, which this service does not run (AUTOTUNER_EXECUTORS: "
                        "%s): neither it nor its configs' re-validations run here; run them where %s runs "
                        "(`autotuner tune --study %s`, `autotuner revalidate`)", study.id, printable(study.name),
                        printable(str(executor)), ", ".join(self.executors), printable(str(executor)),
                        printable(study.name))  # fmt: skip
        return False

    def run_once(self) -> bool:
        self.stop_leftovers()
        self.left_running.check()
        for study in self.runnable():
            if self.full_disks.waiting(("study", study.id)):
                continue
            try:
                driver = driver_for(self.store, study, self.make_executor, owner=self.owner)
            except UNRUNNABLE as exc:  # its rows say no study: it fails with why, the others run
                log.error("study %s: %s", study.id, cannot_run(self.store, study.id, exc))
                continue
            except Exception:  # e.g. the store did not answer: tried again next tick, the others meanwhile
                log.exception("study %s: could not load it", study.id)
                continue
            self.current = study.id
            try:
                driver.run()
            except StudyBusy:
                continue
            except StoreUnavailable as exc:  # the study stays running: resumed at a later tick, after a pause
                log.warning("%s", exc)
                return False
            except WorkdirFull as exc:  # not failed: tried again after a pause, the others meanwhile
                self.full_disks.full(("study", study.id), exc, "the study")
                continue
            except Exception:  # a broken study must not stop the queue
                log.exception("study %s crashed the driver", study.id)
            finally:
                self.current = None
                self.on_study_end()
            self.full_disks.cleared(("study", study.id))
            return True
        self.check_schedule()
        worked = run_pending(self.store, self.make_executor, owner=self.owner, full_disks=self.full_disks,
                             runs=self.runs)  # fmt: skip
        if not worked:
            self.check_prune()
        return worked

    def stop_leftovers(self) -> None:
        """Cancel what cancelled studies left running: a study cancelled while no runner followed it (the
        service down, or a replica without a scheduler) kept its launch running, or queued for hours."""
        for study in self.store.cancelled_with_live_launches():
            try:
                stopped = driver_for(self.store, study, self.make_executor, owner=self.owner).stop_leftovers()
            except StudyBusy:
                continue
            except Exception:  # tried again next tick; the other studies meanwhile (said once a process)
                if study.id not in self._unstoppable:
                    self._unstoppable.add(study.id)
                    log.exception("study %s: could not stop the launches it left", study.id)
                continue
            log.info("study %s (cancelled): cancelled %d launch(es) it left running", study.id, stopped)

    def check_schedule(self, force: bool = False) -> None:
        """Ask for the re-validations due (at most every SCHEDULE_CHECK_S)."""
        if self.revalidate_every_s is None:
            return
        now = time.monotonic()
        every_check = min(SCHEDULE_CHECK_S, max(1.0, self.revalidate_every_s / 4))
        if not force and now - self._schedule_checked < every_check:
            return
        self._schedule_checked = now
        for row in schedule_due(
            self.store, self.revalidate_every_s, text=self.revalidate_every, runs=self.runs
        ):
            log.info("config %s: re-validation %s queued: %s", row.config_id, row.id, row.reason)

    def check_prune(self) -> None:
        """Remove the launch directories old enough (at most every PRUNE_CHECK_S, when idle)."""
        now = time.monotonic()
        if self.prune_after_s is None or now - self._pruned_at < PRUNE_CHECK_S:
            return
        self._pruned_at = now
        try:
            pruned = prune(self.store, timedelta(seconds=self.prune_after_s))
        except Exception:  # a full disk or a store that did not answer: tried again next time
            log.exception("pruning launch directories failed")
            return
        done = [p for p in pruned if p.launches]
        if done:
            launches, size = sum(p.launches for p in done), sum(p.bytes for p in done)
            log.info("removed %d launch directories (%d bytes) of studies %s", launches, size,
                     ", ".join(str(p.study_id) for p in done))  # fmt: skip
        for failed in (f for p in pruned for f in p.failed):
            log.warning("could not remove launch directory %s", failed)

    def loop(self) -> None:
        while not self._stop.is_set():
            if not self.tick():
                self._stop.wait(self.poll_s)

    def tick(self) -> bool:
        """One turn of the loop: whether it did anything. A store that does not answer is said once, in a
        line, and again when it answers (a traceback a second for a restarting PostgreSQL buried the log)."""
        try:
            worked = self.run_once()
        except Exception as exc:
            if not store_unavailable(exc):
                log.exception("queue tick failed")
            elif self._away_since is None:
                self._away_since = time.monotonic()
                log.warning("the store does not answer (%s: %s); the queue waits for it",
                            type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")  # fmt: skip
            return False
        if self._away_since is not None:
            log.warning("the store answers again, after %.0f s", time.monotonic() - self._away_since)
            self._away_since = None
        return worked
