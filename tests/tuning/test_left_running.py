"""A launch whose cancel was not confirmed (a scancel that did not reach the controller) keeps what may
still run on its row, and the study queue cancels it again until its backend says it ended. Before, the
sentence in its error was all: the job could hold GPU nodes until its time limit."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.store import Store, StudyState
from autotuner.tuning import StudyDriver, left_running
from autotuner.tuning.queue import StudyQueue
from tests.autotuner.test_driver import study_with
from tests.tuning.test_interrupted_launch import LEFT, Queued, Recording, StoppedAt


class Answers(Recording):
    """A replay executor whose cancels answer, in turn, what `answers` says (None: seen ended)."""

    def __init__(self, *answers: str | None | Exception) -> None:
        super().__init__()
        self.answers = list(answers)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self.cancelled.append((backend_id, launch.name))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def left_by_a_cancelled_study(store: Store, tmp_path, name: str = "left", backend_id: str = "12"):
    """A launch the queue stopped for its cancelled study, its cancel not confirmed."""
    study = study_with(store, tmp_path, name=name)
    launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": [{}]},
                              executor="replay")  # fmt: skip
    store.update_launch(launch.id, state="running", backend_id=backend_id)
    store.move_study(study.id, StudyState.CANCELLED)
    return study, launch


def test_a_cancel_not_confirmed_is_sent_again_until_the_job_is_seen_ended(store: Store, tmp_path):
    study, launch = left_by_a_cancelled_study(store, tmp_path)
    still = (
        "Slurm job 12 may still run: Slurm still says COMPLETING 30 s after scancel; check `squeue --jobs 12`"
    )
    executor = Answers(LEFT, still, None)
    queue = StudyQueue(store, lambda settings: executor, poll_s=0.01)
    queue.run_once()  # the leftover stopped, unconfirmed: then, in the same tick, the first pass
    row = store.launch(launch.id)
    assert (row.state, row.left_running) == ("cancelled", still)
    assert executor.cancelled == [("12", f"s{study.id}-l1")] * 2
    queue.run_once()  # a pass at most every CHECK_S: none yet
    assert len(executor.cancelled) == 2
    assert queue.left_running.check(force=True) == 1
    row = store.launch(launch.id)
    assert row.left_running is None
    assert row.error == (f"its study ended while no runner followed it: cancelled; {LEFT}; "
                         "later seen ended (12, cancelled again by the study queue)")  # fmt: skip
    assert queue.left_running.check(force=True) == 0
    assert len(executor.cancelled) == 3  # not again once seen ended


def test_a_cancel_that_raises_is_tried_again_and_the_others_meanwhile(store: Store, tmp_path):
    _, first = left_by_a_cancelled_study(store, tmp_path, "first", "11")
    _, second = left_by_a_cancelled_study(store, tmp_path, "second", "12")
    for launch in (first, second):
        store.update_launch(launch.id, state="cancelled", left_running=LEFT)
    executor = Answers(RuntimeError("the controller answered something new"), None, None)
    sweep = left_running.LeftRunning(store, lambda settings: executor)
    assert sweep.check(force=True) == 1
    assert store.launch(first.id).left_running == LEFT  # as it was: the failed cancel confirmed nothing
    assert store.launch(second.id).left_running is None
    assert sweep.check(force=True) == 1
    assert store.launch(first.id).left_running is None


def test_an_id_that_names_another_job_by_now_is_not_cancelled(store: Store, tmp_path):
    """Slurm gives the ids of jobs a crashed controller forgot to new ones: a cancel sent by id a minute
    later would stop another job. Where the backend cannot say, nothing is sent and nothing changes."""
    _, launch = left_by_a_cancelled_study(store, tmp_path)
    store.update_launch(launch.id, state="cancelled", error=LEFT, left_running=LEFT)
    executor = Answers()
    executor.owns = lambda backend_id, request: None  # the controller does not answer
    sweep = left_running.LeftRunning(store, lambda settings: executor)
    assert sweep.check(force=True) == 0
    assert (executor.cancelled, store.launch(launch.id).left_running) == ([], LEFT)
    executor.owns = lambda backend_id, request: request.name != f"s{launch.study_id}-l1"
    assert sweep.check(force=True) == 1
    assert executor.cancelled == []
    row = store.launch(launch.id)
    assert (row.left_running, row.error) == (
        None,
        f"{LEFT}; later seen ended (12 no longer names a live job of this launch)",
    )


def test_a_row_it_cannot_use_holds_up_no_other_and_stops_no_pass(store: Store, tmp_path, caplog):
    """Stored settings that no longer load (a landscape deleted, a row edited), a study row gone: the
    pass raised on the first such row, every minute, and the rows after it were never cancelled again
    (the queue's tick logged a traceback instead, and ran no study)."""
    _, broken = left_by_a_cancelled_study(store, tmp_path, "broken", "11")
    _, fine = left_by_a_cancelled_study(store, tmp_path, "fine", "12")
    for launch in (broken, fine):
        store.update_launch(launch.id, state="cancelled", left_running=LEFT)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE at_studies SET settings = '{\"trials\": \"many\"}' WHERE id = :id"),
                     {"id": broken.study_id})  # fmt: skip
    executor = Answers(None)
    sweep = left_running.LeftRunning(store, lambda settings: executor)
    with caplog.at_level(logging.WARNING, "autotuner.queue"):
        assert sweep.check(force=True) == 1
        assert sweep.check(force=True) == 0
    assert [backend for backend, _ in executor.cancelled] == ["12"]
    assert store.launch(broken.id).left_running == LEFT  # kept as it was: nothing was asked
    assert store.launch(fine.id).left_running is None
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(
        f"study {broken.study_id}: launch 1: could not be cancelled again (ValidationError: "
    )
    assert said.endswith("; tried again")


def test_leftovers_of_a_study_cancelled_long_ago_are_cancelled_only_if_still_theirs(store: Store, tmp_path):
    """stop_leftovers (the queue, `autotuner cancel`) runs days after the cancel: it sent scancel by the
    stored id, which Slurm may have given another job since."""
    from autotuner.tuning.queue import StudyQueue

    study, launch = left_by_a_cancelled_study(store, tmp_path)
    executor = Answers()
    executor.owns = lambda backend_id, request: False
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    row = store.launch(launch.id)
    assert executor.cancelled == []
    assert (row.state, row.left_running, row.error) == (
        "cancelled", None,
        "its study ended while no runner followed it: cancelled (12 no longer names a live job of this launch)",
    )  # fmt: skip
    _, unsure = left_by_a_cancelled_study(store, tmp_path, "unsure", "13")
    executor.owns = lambda backend_id, request: None  # the controller does not answer: nothing sent
    StudyQueue(store, lambda settings: executor, poll_s=0.01).run_once()
    row = store.launch(unsure.id)
    assert executor.cancelled == []
    assert row.left_running == ("13 may still run: its backend could not say whether it is still this launch's "
                                "job, so it was not stopped (by hand: `cancelled 13`)")  # fmt: skip


def test_a_job_that_never_ends_does_not_hold_up_the_others(store: Store, tmp_path, monkeypatch):
    """Each cancel may wait out its grace window: a pass starts no cancel past PASS_S, and the next pass
    starts after the last one tried (else the first row alone was ever tried)."""
    monkeypatch.setattr(left_running, "PASS_S", 0.0)
    launches = [left_by_a_cancelled_study(store, tmp_path, f"s{i}", str(10 + i))[1] for i in range(3)]
    for launch in launches:
        store.update_launch(launch.id, state="cancelled", left_running=LEFT)
    executor = Answers(LEFT, None, None, LEFT)
    sweep = left_running.LeftRunning(store, lambda settings: executor)
    for _ in range(4):
        sweep.check(force=True)
    assert [backend for backend, _ in executor.cancelled] == ["10", "11", "12", "10"]
    assert [store.launch(x.id).left_running for x in launches] == [LEFT, None, None]


def test_every_way_a_launch_is_cancelled_keeps_what_may_still_run(store: Store, tmp_path):
    """Its queue timeout (the executor's own give-up), a study cancelled while it ran (the heartbeat), an
    error while following it."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    with pytest.raises(KeyboardInterrupt):  # the runner stopped at the first search launch
        StudyDriver(store, study.id, StoppedAt(2, KeyboardInterrupt()), poll_s=0.01).run()  # type: ignore[arg-type]
    [search] = [x for x in store.launches(study.id) if x.kind == "search"]
    store.update_launch(search.id, state="running", backend_id="queued", error=None)
    queued = Queued()
    queued.inner.cancel = lambda backend_id, launch: LEFT  # what wait()'s give-up calls
    StudyDriver(store, study.id, queued, poll_s=0.01).run()  # type: ignore[arg-type]
    row = store.launch(search.id)
    assert "queue_timeout_s" in (row.error or "")
    assert row.left_running == LEFT

    cancelled = study_with(store, tmp_path, name="cancelled", trials=1, confirm_rounds=0, ladder_rounds=0)

    class CancelledWhileRunning(Recording):
        def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
            store.move_study(cancelled.id, StudyState.CANCELLED)
            return Description(LaunchState.RUNNING)

        def wait(self, *args, **kwargs):
            return type(self.inner).wait(self, *args, **kwargs)

    executor = CancelledWhileRunning()
    executor.left = LEFT
    StudyDriver(store, cancelled.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    [launch] = store.launches(cancelled.id)
    assert (launch.state, launch.error, launch.left_running) == ("cancelled", LEFT, LEFT)

    unfollowed = study_with(store, tmp_path, name="unfollowed", trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = StoppedAt(1, RuntimeError("the scheduler answered something new"))
    executor.left = LEFT
    assert StudyDriver(store, unfollowed.id, executor, poll_s=0.01).run().state == "failed"  # type: ignore[arg-type]
    [launch] = store.launches(unfollowed.id)
    assert (launch.state, launch.left_running) == ("failed", LEFT)
    assert (
        launch.error
        == f"it could not be followed: RuntimeError: the scheduler answered something new; {LEFT}"
    )


def test_the_service_counts_the_launches_that_may_still_run(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    _, launch = left_by_a_cancelled_study(store, tmp_path)
    store.update_launch(launch.id, state="cancelled", left_running=LEFT)
    settings = Settings(data_dir=tmp_path, scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        assert "\nautotuner_launches_left_running 1.0\n" in client.get("/metrics").text
    store.dispose()


def test_the_loop_cancels_again_beside_a_running_study_and_says_a_failing_store_once(
    store: Store, tmp_path, monkeypatch, caplog
):
    """The queue ran the pass between studies only: a launch its running study gave up on waited for
    the study's end, which can be hours."""
    import threading
    import time

    monkeypatch.setattr(left_running, "CHECK_S", 0.01)
    _, launch = left_by_a_cancelled_study(store, tmp_path)
    store.update_launch(launch.id, state="cancelled", left_running=LEFT)
    sweep = left_running.LeftRunning(store, lambda settings: Answers(None))
    real, calls = store.left_running, []

    def away_at_first(**kwargs):
        calls.append(kwargs)
        if len(calls) <= 3:
            raise ConnectionError("the store is away")
        return real(**kwargs)

    monkeypatch.setattr(store, "left_running", away_at_first)
    stop = threading.Event()
    thread = threading.Thread(target=sweep.loop, args=(stop,))
    with caplog.at_level(logging.WARNING, "autotuner.queue"):
        thread.start()
        deadline = time.monotonic() + 30
        while store.launch(launch.id).left_running is not None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stop.set()
        thread.join(timeout=30)
    assert [r.getMessage() for r in caplog.records] == [
        "launches left running: a pass failed (ConnectionError: the store is away); tried again every 0 s"
    ]
