"""Launches that may still run: their cancel was not confirmed (a scancel that did not reach the
controller, a Slurm that did not say the job ended within the grace window), so their row keeps what
may still run (`Launch.left_running`). The study queue cancels each again, a pass at most every
CHECK_S, until its backend says it ended; the row's error then says so. Before, the sentence in the
error was all: the job could hold GPU nodes until its time limit unless an operator read it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from autotuner.executors import Executor
from autotuner.executors.results import clip
from autotuner.store import Launch, Store
from autotuner.tuning.launch import launch_request
from autotuner.tuning.settings import StudySettings

log = logging.getLogger("autotuner.queue")
CHECK_S = 60.0  # how often (at most) a pass cancels them again
PASS_S = 60.0  # no further cancel starts after this long in one pass (each may wait out its grace window)
BATCH = 100  # launches read at a time


class LeftRunning:
    """The passes of one queue: which launch the next pass starts after (round robin, so one job that
    never ends does not hold up the others), and the launches already said to still run (said once)."""

    def __init__(self, store: Store, make_executor: Callable[[StudySettings], Executor]) -> None:
        self.store, self.make_executor = store, make_executor
        self._checked = float("-inf")
        self._after = 0
        self._said: set[int] = set()

    def check(self, force: bool = False) -> int:
        """A pass, when due (or `force`): how many launches it saw ended."""
        now = time.monotonic()
        if not force and now - self._checked < CHECK_S:
            return 0
        self._checked, deadline, ended = now, now + PASS_S, 0
        rows = self.store.left_running(after_id=self._after, limit=BATCH)
        if not rows and self._after:  # the end of the list: the next pass starts from the first
            self._after = 0
            rows = self.store.left_running(limit=BATCH)
        for launch in rows:
            ended += self._cancel_again(launch)
            self._after = launch.id
            if time.monotonic() > deadline:
                break
        else:
            if len(rows) < BATCH:  # all seen: the next pass starts from the first
                self._after = 0
        return ended

    def _cancel_again(self, launch: Launch) -> int:
        """1: its backend now says it ended, and its row says so; 0: it may still run."""
        study = self.store.study(launch.study_id)
        assert launch.backend_id is not None and study is not None  # the query's, and a foreign key's
        backend_id, ended = (
            launch.backend_id,
            f"later seen ended ({launch.backend_id}, cancelled again by the study queue)",
        )
        try:
            settings = StudySettings.model_validate(study.settings)
            request, executor = launch_request(study.id, settings, launch), self.make_executor(settings)
            # Asked first: its id may name another job by now, which this cancel must not stop.
            owned = executor.owns(backend_id, request)
            if owned is None:
                left = f"{launch.left_running} (its backend cannot say now whether {backend_id} is still its job)"
            elif not owned:
                left, ended = None, f"later seen ended ({backend_id} is no longer this launch's job)"
            else:
                left = executor.cancel(backend_id, request)
        except Exception as exc:  # a row or an executor it cannot use: the others meanwhile
            left = clip(f"{backend_id} may still run: its cancel failed ({type(exc).__name__}: {exc})")
        if left is None:
            self.store.update_launch(
                launch.id,
                left_running=None,
                error=clip(f"{launch.error}; {ended}" if launch.error else ended),
            )
            log.info("study %s: launch %s: %s", study.id, launch.seq, ended)
            self._said.discard(launch.id)
            return 1
        if launch.id not in self._said:
            self._said.add(launch.id)
            log.warning("study %s: launch %s: %s (cancelled again every %.0f s until it is seen ended)",
                        study.id, launch.seq, left, CHECK_S)  # fmt: skip
        if owned is not None and left != launch.left_running:  # an unanswered check changes nothing
            self.store.update_launch(launch.id, left_running=clip(left))
        return 0
