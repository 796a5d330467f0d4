"""Launches that may still run: their cancel was not confirmed (a scancel that did not reach the
controller, a Slurm that did not say the job ended within the grace window), so their row keeps what
may still run (`Launch.left_running`). The study queue cancels each again, a pass at most every
CHECK_S, until its backend says it ended; the row's error then says so. Before, the sentence in the
error was all: the job could hold GPU nodes until its time limit unless an operator read it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

from autotuner.executors import Executor
from autotuner.executors.results import MAX_TEXT, clip
from autotuner.store import Launch, Store
from autotuner.tuning.launch import cancel_if_ours, launch_request
from autotuner.tuning.settings import StudySettings

log = logging.getLogger("autotuner.queue")
CHECK_S = 60.0  # how often (at most) a pass cancels them again
PASS_S = 60.0  # no further cancel starts after this long in one pass (each may wait out its grace window)
BATCH = 100  # launches read at a time


class LeftRunning:
    """The passes of one queue: which launch the next pass starts after (round robin, so one job that
    never ends does not hold up the others), and the launches already said to still run (said once).
    A pass runs between studies and, with `loop`, beside a study that runs for hours (its own launch
    given up at its queue timeout may start meanwhile, beside the study's next)."""

    def __init__(self, store: Store, make_executor: Callable[[StudySettings], Executor],
                 by: str = "the study queue") -> None:  # fmt: skip
        self.store, self.make_executor, self.by = store, make_executor, by  # by: who cancels, in the row
        self._checked = float("-inf")
        self._after = 0
        self._said: set[int] = set()
        self._busy = threading.Lock()  # one pass at a time: the loop's and the queue's

    def loop(self, stop: threading.Event) -> None:
        """A pass every CHECK_S until `stop`; passes that fail (the store away) are said once, and tried
        again."""
        failing = False
        while not stop.wait(CHECK_S):
            try:
                self.check()
            except Exception as exc:
                if not failing:
                    log.warning("launches left running: a pass failed (%s: %s); tried again every %.0f s",
                                type(exc).__name__, exc, CHECK_S)  # fmt: skip
                failing = True
            else:
                failing = False

    def check(self, force: bool = False) -> int:
        """A pass, when due (or `force`) and none runs: how many launches it saw ended."""
        if not self._busy.acquire(blocking=False):
            return 0
        try:
            return self._pass(force)
        finally:
            self._busy.release()

    def _pass(self, force: bool) -> int:
        now = time.monotonic()
        if not force and now - self._checked < CHECK_S:
            return 0
        self._checked, deadline, ended = now, now + PASS_S, 0
        rows = self.store.left_running(after_id=self._after, limit=BATCH)
        if not rows and self._after:  # the end of the list: the next pass starts from the first
            self._after = 0
            rows = self.store.left_running(limit=BATCH)
        for launch in rows:
            self._after = launch.id  # first: a row that fails holds up no later one
            ended += self._cancel_again(launch)
            if time.monotonic() > deadline:
                break
        else:
            if len(rows) < BATCH:  # all seen: the next pass starts from the first
                self._after = 0
        return ended

    def _cancel_again(self, launch: Launch) -> int:
        """1: it is seen ended (or no job of its runs under its id); 0: it may still run (or could not be
        asked: a row or an executor it cannot use), said once."""
        outcome, what = self.cancel_again(launch)
        if outcome == "ended":
            log.info("study %s: launch %s: %s", launch.study_id, launch.seq, what)
            self._said.discard(launch.id)
            return 1
        self._say(launch, f"{what}; tried again" if outcome == "unasked" else
                  f"{what} (cancelled again every {CHECK_S:.0f} s until it is seen ended)")  # fmt: skip
        return 0

    def cancel_again(self, launch: Launch) -> tuple[Literal["ended", "left", "unasked"], str]:
        """Cancel `launch` (its backend id set) again: "ended" and how, its row cleared, once it is seen
        ended; "left" and what may still run; "unasked" and why (a row or an executor it cannot use)."""
        assert launch.backend_id is not None  # the query's
        try:
            study = self.store.study(launch.study_id)
            if study is None:
                raise LookupError(f"its study {launch.study_id} is gone")
            settings = StudySettings.model_validate(study.settings)
            request = launch_request(study.id, settings, launch)
            left, how = cancel_if_ours(self.make_executor(settings), launch.backend_id, request)
        except Exception as exc:
            return "unasked", f"could not be cancelled again ({type(exc).__name__}: {exc})"
        if left is None:
            how = f"{launch.backend_id}, cancelled again by {self.by}" if how == "cancelled" else how
            ended = f"later seen ended ({how})"
            error = f"{clip(launch.error, MAX_TEXT - len(ended) - 2)}; {ended}" if launch.error else ended
            self.store.update_launch(launch.id, left_running=None, error=error)
            return "ended", ended
        if how and left != launch.left_running:  # an unanswered question changes nothing stored
            self.store.update_launch(launch.id, left_running=clip(left))
        return "left", left

    def _say(self, launch: Launch, what: str) -> None:
        if launch.id not in self._said:
            self._said.add(launch.id)
            log.warning("study %s: launch %s: %s", launch.study_id, launch.seq, what)
