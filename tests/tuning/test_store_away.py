"""A store that does not answer for a while (SQLite locked past its busy timeout, a database
restarting, a full disk) delays a study, never ends it: the heartbeat is tried again, a write that
fails leaves the study running for its runner to resume, with its launch still followed. And the
lease's judgement of who is gone: a process of another PID namespace (a container sharing the host
name) is never taken for dead from this one's pid table."""

from __future__ import annotations

import os
import socket

import pytest
from sqlalchemy.exc import OperationalError

from autotuner.store import Store
from autotuner.tuning import StoreUnavailable, StudyDriver
from autotuner.tuning.lease import Lease, StudyCancelled, owner_id, owner_is_dead, store_unavailable
from autotuner.tuning.queue import StudyQueue
from tests.autotuner.test_driver import replay, study_with


def locked(*_args, **_kwargs):
    raise OperationalError("UPDATE at_launches ...", {}, Exception("database is locked"))


def test_a_write_the_store_refuses_for_now_leaves_the_study_running_to_resume(
    store: Store, tmp_path, monkeypatch
):
    study = study_with(store, tmp_path)
    real = Store.finish_launch
    calls = {"n": 0}

    def refused_once(self, launch_id, rows, **fields):
        calls["n"] += 1
        return (
            locked() if calls["n"] == 2 else real(self, launch_id, rows, **fields)
        )  # the first search launch's

    monkeypatch.setattr(Store, "finish_launch", refused_once)
    with pytest.raises(StoreUnavailable, match="the store did not answer"):
        StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    row = store.study(study.id)
    assert row.state == "running"
    assert row.error is None
    launches = store.launches(study.id)
    assert launches[-1].state == "running"  # still the cluster's: followed again on resume
    assert launches[-1].error is None

    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert all(launch.state != "running" for launch in store.launches(study.id))


def test_a_heartbeat_the_store_refuses_for_now_delays_nothing(store: Store, tmp_path, monkeypatch):
    study = study_with(store, tmp_path)
    real = Store.update_launch
    refused = {"n": 0}

    def heartbeat_refused(self, launch_id, **fields):
        if set(fields) == {"heartbeat_at"} and refused["n"] < 3:  # the poll's, not the start's
            refused["n"] += 1
            locked()
        return real(self, launch_id, **fields)

    monkeypatch.setattr(Store, "update_launch", heartbeat_refused)
    monkeypatch.setattr(Lease, "due", lambda self: True)  # a heartbeat at every poll
    executor = replay()
    executor.delay_s = 0.2  # launches that poll a few times
    final = StudyDriver(store, study.id, executor, poll_s=0.02).run()
    assert refused["n"] == 3
    assert final.state == "done", final.error


def test_a_holder_in_another_pid_namespace_is_never_taken_for_dead():
    host = socket.gethostname()
    mine = owner_id().split(":")[3]
    gone = 2**22 + 7  # above any pid_max: no such process here
    assert owner_is_dead(f"{host}:{gone}:abcd1234:{mine}")
    assert not owner_is_dead(f"{host}:{gone}:abcd1234:{int(mine) + 1}")  # its pid says nothing here
    assert owner_is_dead(f"{host}:{gone}:abcd1234")  # written before namespaces were: as before
    assert not owner_is_dead(f"{host}:{os.getpid()}:abcd1234:{mine}")  # alive
    assert not owner_is_dead(f"other-host:{gone}:abcd1234:{mine}")


def test_a_revalidations_lease_ignores_its_studys_cancel(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    store.move_study(study.id, "cancelled")
    owner = owner_id()
    lease = Lease(store, study.id, owner, cancellable=False)
    lease.acquire()
    lease.beat(force=True)  # its published version stays re-validatable
    with pytest.raises(StudyCancelled):
        Lease(store, study.id, owner).beat(force=True)


class _Orig(Exception):
    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("orig", "away"),
    [
        (_Orig("database is locked"), True),
        (_Orig("database or disk is full"), True),
        (_Orig("connection failed", "08006"), True),
        (_Orig("terminating connection due to administrator command", "57P01"), True),
        (_Orig("no such column: at_studies.nope"), False),  # SQLite's OperationalError for a bad query
        (_Orig("canceling statement due to statement timeout", "57014"), False),
        (_Orig("syntax error", "42601"), False),
    ],
)
def test_only_what_says_the_store_is_away_is_taken_for_it(orig, away):
    error = OperationalError("SELECT ...", {}, orig)
    assert store_unavailable(error) is away
    wrapped = RuntimeError("optuna storage")  # as Optuna wraps it (StorageInternalError from SQLAlchemy's)
    wrapped.__cause__ = error
    assert store_unavailable(wrapped) is away


def test_a_study_whose_store_is_away_pauses_the_queue_never_spins_it(store: Store, tmp_path, monkeypatch):
    study_with(store, tmp_path)
    calls = {"n": 0}

    def away(self):
        calls["n"] += 1
        raise StoreUnavailable("the store did not answer")

    monkeypatch.setattr(StudyDriver, "run", away)
    queue = StudyQueue(store, lambda settings: replay(), poll_s=0.05)
    assert queue.run_once() is False  # no work done: the loop waits its tick before the next try
    assert calls["n"] == 1


def test_a_study_the_queue_held_when_the_store_went_away_is_resumed_at_its_next_tick(
    store: Store, tmp_path, monkeypatch
):
    """The store went away mid-study (PostgreSQL restarted): the queue's lease could not be let go of
    either. Its own study waited out that lease (AUTOTUNER_LEASE_S) while the queue ran later ones."""
    study = study_with(store, tmp_path)
    real, calls = StudyDriver.run, {"n": 0}

    def away_once(self):
        calls["n"] += 1
        if calls["n"] == 1:
            self.lease.acquire()  # held; then the store went away, its release with it
            raise StoreUnavailable("the store did not answer")
        return real(self)

    monkeypatch.setattr(StudyDriver, "run", away_once)
    queue = StudyQueue(store, lambda settings: replay(), poll_s=0.01)
    assert queue.run_once() is False
    assert store.study(study.id).owner == queue.owner  # its lease, still running
    assert queue.run_once() is True  # the store answers again: resumed now
    assert store.study(study.id).state == "done"


def test_a_launch_whose_id_the_store_does_not_take_is_cancelled_not_left_unfollowed(
    store: Store, tmp_path, monkeypatch
):
    study = study_with(store, tmp_path)
    real = Store.update_launch
    cancelled = []

    def refuse_the_id(self, launch_id, **fields):
        if "backend_id" in fields:
            locked()
        return real(self, launch_id, **fields)

    monkeypatch.setattr(Store, "update_launch", refuse_the_id)
    executor = replay()
    monkeypatch.setattr(executor, "cancel", lambda backend_id, request: cancelled.append(backend_id))
    with pytest.raises(StoreUnavailable):
        StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert cancelled == ["replay:s1-l1"]


def _refused() -> OperationalError:
    """What SQLAlchemy raises when PostgreSQL refuses the connection (nothing listens on the port)."""
    import sqlalchemy as sa

    engine = sa.create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 2}
    )
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("something listens on port 1")


def test_a_postgresql_that_refuses_the_connection_is_away_for_now(store: Store, tmp_path, monkeypatch):
    """psycopg's own "connection failed" carries no SQLSTATE (no server answered): it was taken for a
    bad request and failed the study for good while PostgreSQL restarted."""
    refused = _refused()
    assert refused.orig.sqlstate is None
    assert store_unavailable(refused)
    study = study_with(store, tmp_path)
    real, calls = Store.renew_study, {"n": 0}

    def renew_refused_once(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise refused
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "renew_study", renew_refused_once)
    with pytest.raises(StoreUnavailable, match="the store did not answer"):
        StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert (store.study(study.id).state, store.study(study.id).error) == ("running", None)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error


@pytest.mark.postgres
def test_a_wrong_database_name_is_no_outage():
    """A database or role that does not exist is said by the server while connecting, with no SQLSTATE
    either: taken for an outage, a wrong URL was retried forever (and answered 503 "try again")."""
    import os

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    from tests.helpers import skip_or_fail

    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    wrong = make_url(base).set(database="no_such_database_here")
    engine = sa.create_engine(wrong)
    try:
        with pytest.raises(OperationalError) as caught, engine.connect():
            pass
    finally:
        engine.dispose()
    assert "does not exist" in str(caught.value)
    assert not store_unavailable(caught.value)


def test_a_store_away_for_many_ticks_is_said_once_and_again_when_it_answers(
    store: Store, caplog, monkeypatch
):
    """A restarting PostgreSQL: the scheduler logged a full traceback every second ("queue tick failed"),
    burying what the operator needs, where one line says the store is away and one that it is back."""
    queue = StudyQueue(store, lambda settings: replay(), poll_s=0.01)
    answers = iter([locked, locked, locked, lambda: False, lambda: 1 / 0])

    monkeypatch.setattr(queue, "run_once", lambda: next(answers)())
    with caplog.at_level("INFO", logger="autotuner.queue"):
        ticks = [queue.tick() for _ in range(5)]
    assert ticks == [False] * 5
    said = [
        (r.levelname, r.getMessage().split(";")[0].split(",")[0], r.exc_info is not None)
        for r in caplog.records
    ]
    assert said == [
        (
            "WARNING",
            "the store does not answer (OperationalError: (builtins.Exception) database is locked)",
            False,
        ),
        ("WARNING", "the store answers again", False),
        ("ERROR", "queue tick failed", True),  # anything else keeps its traceback
    ]
