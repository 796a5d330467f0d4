"""Ctrl-C of `autotuner tune` while a launch runs: the launch is cancelled with its launcher (its trial
ran on, in its own session, unfollowed, beside whatever ran next on the same CPUs or GPUs), its row
says so, and the study stays resumable. And a study cancelled while nobody followed it: its launches are
stopped by the next scheduler that looks."""

from __future__ import annotations

import pytest

from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.store import Store, StudyState
from autotuner.tuning import Progress, StudyDriver
from autotuner.tuning.launch import CTRL_C, unspent
from autotuner.tuning.queue import StudyQueue
from tests.autotuner.test_driver import replay, study_with


class Interrupted:
    """A replay executor whose first launch is interrupted (Ctrl-C) at its second poll."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.inner, self.polls, self.cancelled = replay(), 0, []
        self.left: str | None = None  # what cancel says may still run
        self.error = error or KeyboardInterrupt()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        self.polls += 1
        if self.polls == 2:
            raise self.error
        return Description(LaunchState.RUNNING)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self.cancelled.append(backend_id)
        return self.left

    def wait(self, *args, **kwargs):  # the base class's loop, with this describe
        return type(self.inner).wait(self, *args, **kwargs)


def test_ctrl_c_cancels_the_running_launch_and_leaves_the_study_resumable(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    [launch] = store.launches(study.id)
    assert executor.cancelled == [launch.backend_id]  # was: never cancelled, the trial ran on
    assert (launch.state, launch.error) == ("cancelled", "interrupted (Ctrl-C): cancelled with its launcher")
    assert store.study(study.id).state == "running"  # resumable: `autotuner tune --study` goes on
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error


class Recording:
    """A replay executor that records what it was asked to cancel, and to abandon."""

    def __init__(self) -> None:
        self.inner, self.cancelled, self.abandoned = replay(), [], []
        self.left: str | None = None  # what cancel says may still run

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self.cancelled.append((backend_id, launch.name))
        return self.left

    def abandon(self, launch: LaunchRequest) -> None:
        self.abandoned.append(launch.name)


def test_a_study_cancelled_while_no_runner_followed_it_has_its_launches_stopped(store: Store, tmp_path):
    """The service down (or a replica with no scheduler) when the cancel came: before, nothing ever
    stopped the launch it left (a queued Kubernetes Job could start a day later and hold GPUs)."""
    left = study_with(store, tmp_path, name="left")
    followed = study_with(store, tmp_path, name="followed")
    launches = {}
    for study in (left, followed):
        launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": [{}]},
                                  executor="replay")  # fmt: skip
        store.update_launch(launch.id, state="running", backend_id=f"job-{study.id}")
        store.move_study(study.id, StudyState.CANCELLED)
        launches[study.name] = launch
    # a re-validation's launch of the cancelled study: its own runner follows it again, not swept
    revalidation = store.add_launch(study_id=left.id, kind="revalidate", env={}, spec={"candidates": [{}]},
                                    executor="replay")  # fmt: skip
    store.update_launch(revalidation.id, state="running", backend_id="job-revalidation")
    assert store.acquire_study(followed.id, "a-live-runner", 600)  # its runner stops its launch itself
    executor = Recording()
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    assert executor.cancelled == [(f"job-{left.id}", f"s{left.id}-l1")]
    stopped = store.launch(launches["left"].id)
    assert (stopped.state, stopped.error) == (
        "cancelled",
        "its study ended while no runner followed it: cancelled",
    )
    assert store.launch(launches["followed"].id).state == "running"
    assert store.launch(revalidation.id).state == "running"
    assert store.study(left.id).owner is None  # its lease given back
    executor.cancelled.clear()
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    assert executor.cancelled == []  # once


LEFT = "Slurm job 12 may still run: scancel did not reach the controller: run `scancel 12` by hand"


def test_a_leftover_whose_cancel_is_not_confirmed_says_so_in_its_error(store: Store, tmp_path):
    """The executor could not confirm the job ended: its row said "cancelled" and nothing more."""
    study = study_with(store, tmp_path, name="left")
    launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": [{}]},
                              executor="replay")  # fmt: skip
    store.update_launch(launch.id, state="running", backend_id="12")
    store.move_study(study.id, StudyState.CANCELLED)
    executor = Recording()
    executor.left = LEFT
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    stopped = store.launch(launch.id)
    assert (stopped.state, stopped.error) == (
        "cancelled",
        f"its study ended while no runner followed it: cancelled; {LEFT}",
    )


def test_a_launch_interrupted_whose_cancel_is_not_confirmed_says_so_in_its_error(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Interrupted()
    executor.left = LEFT
    with pytest.raises(KeyboardInterrupt):
        StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    [launch] = store.launches(study.id)
    assert (launch.state, launch.error) == ("cancelled", f"{CTRL_C}; {LEFT}")


def test_a_ctrl_c_whose_cancel_is_not_confirmed_spends_no_search_launch_either(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": [{}]},
                              executor="replay")  # fmt: skip
    store.update_launch(launch.id, state="cancelled", error=f"{CTRL_C}; {LEFT}")
    assert unspent(store.launch(launch.id))


def test_a_launch_that_cannot_be_followed_is_cancelled_before_the_study_fails(store: Store, tmp_path):
    """An error while following it (a bug, an API answer not understood): before, the launch was marked
    failed and left running, unfollowed, beside the next study's."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Interrupted(RuntimeError("the scheduler answered something new"))
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "failed"
    [launch] = store.launches(study.id)
    assert executor.cancelled == [launch.backend_id]
    assert launch.state == "failed"
    assert launch.error == "it could not be followed: RuntimeError: the scheduler answered something new"


def test_ctrl_c_after_a_launch_ended_leaves_its_row_as_it_ended(store: Store, tmp_path):
    """Interrupted while its result was being recorded: the launch had succeeded, and a row rewritten
    "cancelled" beside its ok candidates had a quality launch run again in full on resume."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Recording()

    def interrupted(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        StudyDriver(
            store, study.id, executor, poll_s=0.01, progress=Progress(on_launch_end=interrupted)
        ).run()  # type: ignore[arg-type]
    [launch] = store.launches(study.id)
    assert launch.state == "succeeded"
    assert executor.cancelled == []


def never_submitted(store: Store, study_id: int):
    """A launch row a runner left while it waited its turn (SubmitLater): running, no backend id (its
    last attempt: not run again)."""
    candidate = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}
    launch = store.add_launch(study_id=study_id, kind="search", env={}, spec={"candidates": [candidate]},
                              executor="replay", attempt=99)  # fmt: skip
    store.update_launch(launch.id, state="running")
    return launch


def test_a_launch_left_waiting_its_turn_is_abandoned_when_its_study_ends_or_resumes(store: Store, tmp_path):
    """What its refused submits may have queued (an sbatch whose reply was lost) is the executor's to
    undo: nothing else knows of it."""
    cancelled = study_with(store, tmp_path, name="cancelled")
    left = never_submitted(store, cancelled.id)
    store.move_study(cancelled.id, StudyState.CANCELLED)
    executor = Recording()
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    assert (executor.cancelled, executor.abandoned) == ([], [f"s{cancelled.id}-l{left.seq}"])
    assert store.launch(left.id).state == "cancelled"

    resumed = study_with(store, tmp_path, name="resumed", trials=1, confirm_rounds=0, ladder_rounds=0)
    left = never_submitted(store, resumed.id)
    executor = Recording()
    final = StudyDriver(store, resumed.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    assert executor.abandoned == [f"s{resumed.id}-l{left.seq}"]
    assert store.launch(left.id).state == "cancelled"


def test_ctrl_c_while_a_resumed_study_follows_its_old_launch_cancels_it_too(store: Store, tmp_path):
    """`autotuner tune --study` re-attaches to the job a killed runner left; Ctrl-C (or SIGTERM) then said
    "the running launch was cancelled" but left the job queued or running, its row "running"."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    left = store.add_launch(study_id=study.id, kind="baseline", env={}, executor="replay",
                            spec={"candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}]})  # fmt: skip
    store.update_launch(left.id, state="running", backend_id="job-left")
    executor = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert executor.cancelled == ["job-left"]
    launch = store.launch(left.id)
    assert (launch.state, launch.error) == ("cancelled", "interrupted (Ctrl-C): cancelled with its launcher")
    assert store.study(study.id).state == "running"


class StoppedAt:
    """A replay executor that raises `error` at the first poll of launch `seq` (its result already
    written: the launch ran on)."""

    def __init__(self, seq: int, error: BaseException) -> None:
        self.inner, self.seq, self.error, self.cancelled = replay(), seq, error, []
        self.left: str | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if launch.name.endswith(f"-l{self.seq}") and self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.inner.describe(backend_id, launch)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self.cancelled.append(backend_id)
        return self.left

    def wait(self, *args, **kwargs):
        return type(self.inner).wait(self, *args, **kwargs)


def searched(store: Store, study_id: int) -> int:
    return sum(1 for x in store.launches(study_id) if x.kind == "search" and x.state == "succeeded")


def test_a_search_launch_cancelled_by_ctrl_c_does_not_spend_the_budget(store: Store, tmp_path):
    """Killed (SIGKILL), a runner's search launch is retried on resume; stopped by Ctrl-C or SIGTERM, it
    was cancelled and counted as one of `trials`: the resumed study measured one search launch less."""
    study = study_with(store, tmp_path, trials=2, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(KeyboardInterrupt):  # launch 1 is the baseline, 2 the first search launch
        StudyDriver(store, study.id, StoppedAt(2, KeyboardInterrupt()), poll_s=0.01).run()  # type: ignore[arg-type]
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert searched(store, study.id) == 2
    assert final.launches_done == 2


class Killed(BaseException):
    """SIGKILL of the runner: nothing of the driver sees it."""


def test_a_retry_cancelled_by_ctrl_c_does_not_spend_the_budget_either(store: Store, tmp_path):
    """A search launch left by a killed runner is retried on resume (attempt 2); Ctrl-C stopped that retry.
    Its first attempt still counted as one of `trials`, and neither is run again: the resumed study
    measured one search launch less, as a Ctrl-C of a first attempt did before."""
    study = study_with(store, tmp_path, trials=2, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(Killed):  # launch 2, the first search launch, left running in the store
        StudyDriver(store, study.id, StoppedAt(2, Killed()), poll_s=0.01).run()  # type: ignore[arg-type]
    [killed] = [x for x in store.launches(study.id) if x.kind == "search"]
    store.update_launch(killed.id, backend_id=None)  # not followed again: cancelled, retried as launch 3
    with pytest.raises(KeyboardInterrupt):
        StudyDriver(store, study.id, StoppedAt(3, KeyboardInterrupt()), poll_s=0.01).run()  # type: ignore[arg-type]
    [retry] = [x for x in store.launches(study.id) if x.kind == "search" and x.attempt == 2]
    assert (retry.state, retry.error) == ("cancelled", CTRL_C)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert searched(store, study.id) == 2
    assert final.launches_done == 2


def test_a_study_resumed_after_its_last_search_launch_counts_it(store: Store, tmp_path):
    """The last search launch, left running by a killed runner, is followed to its end on resume: the
    study's launches_done (`autotuner studies`, the dashboard) read one short for good."""
    study = study_with(store, tmp_path, trials=2, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(Killed):
        StudyDriver(store, study.id, StoppedAt(3, Killed()), poll_s=0.01).run()  # type: ignore[arg-type]
    assert store.study(study.id).launches_done == 1
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert searched(store, study.id) == 2
    assert final.launches_done == 2


class Gone(StoppedAt):
    """A replay executor to which a launch left running reads as cancelled (its process killed with the
    runner's, no exit code written), as the local executor answers after a reboot or a unit's cgroup kill."""

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if backend_id == "gone":
            return Description(LaunchState.CANCELLED, None, "launch process is gone without an exit code")
        return self.inner.describe(backend_id, launch)


def test_a_launch_killed_with_its_runner_is_retried_when_the_study_resumes(store: Store, tmp_path):
    """Re-attached and found cancelled, it was recorded so and never run again: its points read tried
    and failed, and the search ended with them unmeasured and a launch of its budget spent."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(Killed):  # at launch 2, the first search launch: left running in the store
        StudyDriver(store, study.id, StoppedAt(2, Killed()), poll_s=0.01).run()  # type: ignore[arg-type]
    [killed] = [x for x in store.launches(study.id) if x.kind == "search"]
    store.update_launch(killed.id, backend_id="gone")
    final = StudyDriver(store, study.id, Gone(0, None), poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    assert store.launch(killed.id).state == "cancelled"
    [retry] = [x for x in store.launches(study.id) if x.kind == "search" and x.attempt == 2]
    assert (retry.state, retry.spec["candidates"]) == ("succeeded", killed.spec["candidates"])


class Queued(StoppedAt):
    """A replay executor to which a launch left behind reads as still queued, past its queue_timeout_s."""

    def __init__(self) -> None:
        super().__init__(0, None)
        self.inner.queue_timeout_s = 0.0  # what wait() reads: its helpers are the inner executor's

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if backend_id == "queued":
            return Description(LaunchState.PENDING, None, "Priority")
        return self.inner.describe(backend_id, launch)


def test_a_launch_its_queue_timeout_gave_up_on_when_the_study_resumes_is_not_run_again(
    store: Store, tmp_path
):
    """Cancelled on resume because it waited past queue_timeout_s, it is not queued again: no launch the
    runner itself started is retried after its queue timeout either."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(Killed):
        StudyDriver(store, study.id, StoppedAt(2, Killed()), poll_s=0.01).run()  # type: ignore[arg-type]
    [left] = [x for x in store.launches(study.id) if x.kind == "search"]
    store.update_launch(left.id, backend_id="queued")
    StudyDriver(store, study.id, Queued(), poll_s=0.01).run()  # type: ignore[arg-type]
    assert "queue_timeout_s" in (store.launch(left.id).error or "")
    assert not [x for x in store.launches(study.id) if x.kind == "search" and x.attempt == 2]


class Reused(Recording):
    """A replay executor to which the id a killed runner left reads as running, under another job's name
    (a Slurm controller that lost its state gave the lost job's id to the next)."""

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if backend_id == "reused":
            return Description(LaunchState.RUNNING)
        return self.inner.describe(backend_id, launch)

    def owns(self, backend_id: str, launch: LaunchRequest) -> bool | None:
        return backend_id != "reused"

    def wait(self, *args, **kwargs):
        return type(self.inner).wait(self, *args, **kwargs)


def test_a_resumed_study_does_not_follow_an_id_that_names_another_job_now(store: Store, tmp_path):
    """Followed, the other job was timed as this launch, and cancelled at this launch's timeout."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, launch_timeout_s=5)
    with pytest.raises(Killed):  # at launch 2, the first search launch: left running in the store
        StudyDriver(store, study.id, StoppedAt(2, Killed()), poll_s=0.01).run()  # type: ignore[arg-type]
    [left] = [x for x in store.launches(study.id) if x.kind == "search"]
    store.update_launch(left.id, backend_id="reused")
    executor = Reused()
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    assert "reused" not in [backend for backend, _ in executor.cancelled]
    assert (store.launch(left.id).state, store.launch(left.id).error) == (
        "cancelled", "interrupted: the process running the study stopped before this launch finished"
    )  # fmt: skip
    [retry] = [x for x in store.launches(study.id) if x.kind == "search" and x.attempt == 2]
    assert retry.state == "succeeded"
