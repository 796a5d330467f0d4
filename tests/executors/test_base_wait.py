"""Executor.wait on scripted answers, on a clock that sleeping moves on (nothing waits): when a launch is
timed out (its env config then quarantined), when it is given up as the cluster's trouble (cancelled,
nothing quarantined), and how an ended launch whose files are not visible yet is collected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import autotuner.executors.base as base
from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.executors.base import AppDryrun, Executor
from tests.helpers import WaitClock

UNREAD = Description(LaunchState.UNKNOWN, None, "slurm_load_jobs error: Unable to contact slurm controller")
QUEUED = Description(LaunchState.PENDING, None, "Slurm PENDING: Priority")
RUNS = Description(LaunchState.RUNNING)
DONE = Description(LaunchState.SUCCEEDED, 0)
RESULT = {"status": "ok", "candidates": []}


class Scripted(Executor):
    """Answers `script(seconds since the wait began)`; the result is there once `result_at` has passed."""

    name = "scripted"

    def __init__(
        self, clock: WaitClock, script: Callable[[float], Description], result_at: float = 0.0
    ) -> None:
        self.clock, self.script, self.result_at = clock, script, result_at
        self.began = clock.now
        self.cancelled: list[str] = []
        self.left: str | None = None  # what cancel says may still run

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[Any]:
        raise AssertionError("not sent")

    def schedule(self, dryrun: AppDryrun[Any]) -> str:
        raise AssertionError("not sent")

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        return self.script(self.clock.now - self.began)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self.cancelled.append(backend_id)
        return self.left

    def logs(self, backend_id: str, launch: LaunchRequest, tail_lines: int = 60) -> str:
        return ""

    def fetch_result(self, backend_id: str, launch: LaunchRequest) -> dict[str, Any] | None:
        return RESULT if self.clock.now - self.began >= self.result_at else None


@pytest.fixture
def clock(monkeypatch) -> WaitClock:
    fake = WaitClock()
    monkeypatch.setattr(base, "time", fake)
    return fake


def follow(ex: Scripted, tmp_path: Path, *, timeout_s: float = 600, **kw: Any) -> tuple[base.Outcome, float]:
    launch = LaunchRequest(name="s1-l7", spec={}, env={}, workdir=tmp_path, timeout_s=timeout_s)
    outcome = ex.wait("7", launch, started=ex.began, poll_s=10, **kw)
    return outcome, ex.clock.now - ex.began


def after(*steps: tuple[float, Description]) -> Callable[[float], Description]:
    """The answer of the last step whose start (seconds into the wait) has passed."""
    return lambda elapsed: [desc for start, desc in steps if elapsed >= start][-1]


# ------------------------------------------------------------------------------ unreadable states


def test_a_launch_unreadable_from_its_first_poll_is_cancelled_not_timed_out(clock, tmp_path):
    """The controller (or the API server) down from the submission on: the run clock ran from the
    submission, so the launch was timed out and its env config quarantined, though nothing said it ran."""
    ex = Scripted(clock, after((0, UNREAD)))
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.state == LaunchState.CANCELLED, outcome.reason
    assert outcome.reason == f"its state could not be read for 600 s: {UNREAD.reason}"
    assert 600 < elapsed <= 620
    assert ex.cancelled == ["7"]


def test_run_time_counts_from_the_first_running_answer_after_unreadable_ones(clock, tmp_path):
    """500 s unreadable (it may have queued all along), then 590 s running: not a timeout."""
    ex = Scripted(clock, after((0, UNREAD), (500, RUNS), (1090, DONE)))
    outcome, elapsed = follow(ex, tmp_path)
    assert (outcome.state, outcome.result) == (LaunchState.SUCCEEDED, RESULT), outcome.reason
    assert ex.cancelled == []
    assert 1090 <= elapsed <= 1100


def test_a_launch_running_from_its_first_poll_counts_from_its_submission(clock, tmp_path):
    ex = Scripted(clock, after((0, RUNS)))
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.state == LaunchState.TIMEOUT
    assert "killed after the 600 s timeout (cancelled 7)" in outcome.reason
    assert 600 < elapsed <= 610


def test_a_launch_seen_running_then_unreadable_is_not_timed_out_on_an_unread_answer(clock, tmp_path):
    """Seen running, then the controller went away: past its timeout nothing said it still ran (a trial
    that ended meanwhile is only known when Slurm or the API answers again)."""
    ex = Scripted(clock, after((0, RUNS), (100, UNREAD)))
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.state == LaunchState.CANCELLED, outcome.reason
    assert outcome.reason.startswith("its state could not be read for 600 s")
    assert 700 < elapsed <= 720


@pytest.mark.parametrize(("answer", "state"), [(RUNS, LaunchState.TIMEOUT), (DONE, LaunchState.SUCCEEDED)])
def test_the_first_readable_answer_past_the_timeout_decides(clock, tmp_path, answer, state):
    ex = Scripted(clock, after((0, RUNS), (100, UNREAD), (650, answer)))
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.state == state, outcome.reason
    assert 650 <= elapsed <= 660


def test_queue_time_is_not_run_time_and_an_unread_poll_keeps_it_queued(clock, tmp_path):
    ex = Scripted(clock, after((0, QUEUED), (300, UNREAD), (310, QUEUED), (2000, RUNS), (2590, DONE)))
    outcome, _ = follow(ex, tmp_path)
    assert outcome.state == LaunchState.SUCCEEDED, outcome.reason


def test_a_launch_still_queued_at_queue_timeout_s_is_given_up(clock, tmp_path):
    ex = Scripted(clock, after((0, QUEUED)))
    ex.queue_timeout_s = 300
    outcome, elapsed = follow(ex, tmp_path)
    assert (outcome.state, outcome.given_up) == (LaunchState.CANCELLED, True)
    assert outcome.reason == "still queued after 300 s (queue_timeout_s): Slurm PENDING: Priority"
    assert 300 < elapsed <= 310
    assert ex.cancelled == ["7"]


def test_a_job_that_started_while_its_state_was_unreadable_is_not_cancelled_as_queued(clock, tmp_path):
    """Queued, then the controller down past queue_timeout_s, and the job ran meanwhile: it was cancelled
    as "not seen running" at 300 s (scancel failing too, with the controller down: a job left to run on,
    unfollowed), though nothing said it still waited."""
    ex = Scripted(clock, after((0, QUEUED), (100, UNREAD), (500, RUNS), (700, DONE)), result_at=700)
    ex.queue_timeout_s = 300
    outcome, elapsed = follow(ex, tmp_path)
    assert (outcome.state, outcome.result) == (LaunchState.SUCCEEDED, RESULT), outcome.reason
    assert ex.cancelled == []
    assert 700 <= elapsed <= 710


def test_queue_timeout_s_is_called_on_the_first_answer_that_says_it_still_waits(clock, tmp_path):
    ex = Scripted(clock, after((0, QUEUED), (100, UNREAD), (500, QUEUED)))
    ex.queue_timeout_s = 300
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.reason.startswith("still queued after 300 s (queue_timeout_s)"), outcome.reason
    assert 500 <= elapsed <= 510


def test_a_launch_whose_state_is_never_readable_is_given_up_after_its_timeout_not_its_queues(clock, tmp_path):
    ex = Scripted(clock, after((0, UNREAD)))
    ex.queue_timeout_s = 300
    outcome, elapsed = follow(ex, tmp_path)
    assert (outcome.state, outcome.given_up) == (LaunchState.CANCELLED, True)
    assert outcome.reason.startswith("its state could not be read for 600 s: slurm_load_jobs")
    assert 600 < elapsed <= 610


def test_a_launch_given_up_whose_end_is_not_confirmed_says_what_may_still_run(clock, tmp_path):
    """Its cancel could not reach the scheduler: the launch read "cancelled", and nobody was told a job
    may still hold GPU nodes."""
    ex = Scripted(clock, after((0, QUEUED)))
    ex.queue_timeout_s = 300
    ex.left = "Slurm job 7 may still run: scancel did not reach the controller: run `scancel 7` by hand"
    outcome, _ = follow(ex, tmp_path)
    assert (outcome.state, outcome.given_up) == (LaunchState.CANCELLED, True)
    assert outcome.reason == (
        "still queued after 300 s (queue_timeout_s): Slurm PENDING: Priority; Slurm job 7 may still run: "
        "scancel did not reach the controller: run `scancel 7` by hand"
    )


# ------------------------------------------------------------------------------ ended, files not seen yet


def settling(code: int = 0) -> Description:
    return Description(LaunchState.SUCCEEDED, code, "its exit_code file is not visible here", settling=True)


def test_an_ended_launch_whose_files_are_not_visible_yet_is_polled_until_they_are(clock, tmp_path):
    """Ended near its timeout, its files seen 50 s later: collected then, with its result (no timeout:
    the run is over), and heartbeats went on meanwhile."""
    ex = Scripted(clock, after((0, RUNS), (590, settling()), (640, DONE)), result_at=640)
    ex.settle_s = 90
    polls: list[Description] = []
    outcome, elapsed = follow(ex, tmp_path, on_poll=polls.append)
    assert (outcome.state, outcome.result, outcome.reason) == (LaunchState.SUCCEEDED, RESULT, "")
    assert 640 <= elapsed <= 650
    assert ex.cancelled == []
    assert sum(desc.settling for desc in polls) == 5


def test_an_ended_launch_whose_files_never_show_is_collected_as_it_stands_after_settle_s(clock, tmp_path):
    ex = Scripted(clock, after((0, RUNS), (100, settling())), result_at=10**9)
    ex.settle_s = 90
    outcome, elapsed = follow(ex, tmp_path)
    assert outcome.state == LaunchState.FAILED
    assert outcome.reason == "its exit_code file is not visible here"
    assert 190 <= elapsed <= 200


def test_an_executor_without_settle_s_collects_at_once(clock, tmp_path):
    ex = Scripted(clock, after((0, settling(3))), result_at=10**9)
    outcome, elapsed = follow(ex, tmp_path)
    assert (outcome.state, elapsed) == (LaunchState.FAILED, 0)


def test_a_launch_its_scheduler_timed_out_stays_a_timeout_in_the_schedulers_words(clock):
    """Slurm's time limit SIGTERMs the trial, which writes an error result ("the launcher stopped the
    launch (SIGTERM)"): the launch read `failed` in the trial's words, Slurm's TIMEOUT lost."""
    said = "Slurm killed the job at its time limit (Slurm TIMEOUT, TimeLimit)"
    ex = Scripted(clock, lambda t: RUNS if t < 5 else Description(LaunchState.TIMEOUT, None, said))
    ex.fetch_result = lambda *_: {"status": "error", "error": "the launcher stopped the launch (SIGTERM)",
                                  "candidates": []}  # fmt: skip
    launch = LaunchRequest(name="t", spec={}, env={}, workdir=Path("/nonexistent"), timeout_s=600)
    outcome = ex.wait("1", launch, started=clock.now, poll_s=1.0)
    assert outcome.state == LaunchState.TIMEOUT
    assert outcome.reason.startswith(said)
    assert "the launcher stopped the launch (SIGTERM)" in outcome.reason


def test_a_launch_its_scheduler_timed_out_before_any_result_stays_a_timeout(clock):
    """Killed at its time limit before the trial wrote a result: it read `failed`, the timeout lost."""
    said = "Slurm killed the job at its time limit (Slurm TIMEOUT, TimeLimit)"
    ex = Scripted(clock, lambda t: RUNS if t < 5 else Description(LaunchState.TIMEOUT, None, said))
    ex.fetch_result = lambda *_: None
    launch = LaunchRequest(name="t", spec={}, env={}, workdir=Path("/nonexistent"), timeout_s=600)
    outcome = ex.wait("1", launch, started=clock.now, poll_s=1.0)
    assert (outcome.state, outcome.reason) == (LaunchState.TIMEOUT, said)


def test_a_launch_whose_result_could_not_be_written_is_cancelled_not_failed(clock):
    """A full disk under the launch directory: the trial measured, printed that it could not write its
    result and exited 3 (torchrun's 1). Failed, its env config was quarantined on the cluster (the
    baseline's own, fixed env: the search ended after one launch)."""
    ex = Scripted(clock, lambda t: RUNS if t < 5 else Description(LaunchState.FAILED, 1))
    ex.fetch_result = lambda *_: None
    said = "trials.run: cannot write the result to /w/result.json: [Errno 28] No space left on device"
    ex.logs = lambda *_, **__: f"[rank0]: measuring\n{said}\nChildFailedError: trials.run FAILED\n"
    launch = LaunchRequest(name="t", spec={}, env={}, workdir=Path("/nonexistent"), timeout_s=600)
    outcome = ex.wait("1", launch, started=clock.now, poll_s=1.0)
    assert (outcome.state, outcome.reason) == (
        LaunchState.CANCELLED,
        f"its result could not be written: {said}",
    )
    ex.logs = lambda *_, **__: "Segmentation fault\n"  # a crash stays the config's failure
    assert ex.wait("1", launch, started=clock.now, poll_s=1.0).state == LaunchState.FAILED
