"""A study's lease is judged by one clock, the database's. Each replica wrote `its now + lease` and a rival
compared the lease with its own now: on PostgreSQL with replicas whose clocks disagree by more than the
lease (60 s by default), a replica ahead took a study whose holder was alive (two runners on one study),
one behind wrote leases already lapsed for the others, and a holder ahead that died left its study waiting
for as long as its clock was ahead.

Two replicas are played by one process whose clock, as the store reads it, is set off by minutes in
turn. The database runs on this host, so the real clock here is the database's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from autotuner.store import Store, StudyState, models, studies
from autotuner.tuning.lease import Lease, StudyBusy
from tests.store.test_store import make_study

SKEW_S = 600.0  # ten minutes: far more than the lease


@pytest.fixture
def clock(monkeypatch) -> Callable[[float], AbstractContextManager[None]]:
    """`with clock(s):` the store reads this process's clock `s` seconds off (a replica whose clock is
    wrong); outside, the clock is right."""
    real = models.utcnow

    @contextmanager
    def off_by(seconds: float) -> Iterator[None]:
        with monkeypatch.context() as m:
            m.setattr(studies, "utcnow", lambda: real() + timedelta(seconds=seconds))
            yield

    return off_by


def test_a_replica_whose_clock_is_ahead_does_not_take_a_live_study(store: Store, clock):
    study = make_study(store)
    holder = Lease(store, study.id, owner="replica-a")
    holder.acquire()
    holder.beat(force=True)  # renewed a moment ago, by a replica whose clock is right
    with clock(SKEW_S):
        assert not store.acquire_study(study.id, "replica-b", 60)
        assert [s.id for s in store.claimable_studies()] == []
        with pytest.raises(StudyBusy):
            Lease(store, study.id, owner="replica-b").acquire()
    assert store.study(study.id).owner == "replica-a"
    holder.beat(force=True)  # still its own


def test_a_holder_whose_clock_is_behind_keeps_its_live_study(store: Store, clock):
    study = make_study(store)
    holder = Lease(store, study.id, owner="replica-a")
    with clock(-SKEW_S):
        holder.acquire()
        holder.beat(force=True)
    assert not store.acquire_study(study.id, "replica-b", 60)
    assert [s.id for s in store.claimable_studies()] == []
    with pytest.raises(StudyBusy):
        Lease(store, study.id, owner="replica-b").acquire()
    with clock(-SKEW_S):
        holder.beat(force=True)
    assert store.study(study.id).owner == "replica-a"


def test_a_holder_whose_clock_is_ahead_loses_its_lease_when_it_expires_by_the_database(store: Store, clock):
    study = make_study(store)
    with clock(SKEW_S):
        assert store.acquire_study(study.id, "replica-a", 2.0)  # then it dies: no more renewals
    written = datetime.now(UTC)
    lease_until = store.study(study.id).lease_expires_at
    assert lease_until.tzinfo is not None  # shown as before: an aware UTC time
    assert abs((lease_until - written).total_seconds() - 2.0) < 5.0  # not ten minutes on
    assert not store.acquire_study(study.id, "replica-b", 60)  # not yet lapsed
    time.sleep(2.3)
    assert [s.id for s in store.claimable_studies()] == [study.id]
    assert store.acquire_study(study.id, "replica-b", 60)
    assert store.study(study.id).owner == "replica-b"


def test_a_replica_ahead_leaves_a_cancelled_studys_launches_to_its_live_runner(store: Store, clock):
    study = make_study(store)
    assert store.acquire_study(study.id, "replica-a", 60)  # its runner stops its launch itself
    store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": []}, executor="slurm")
    store.update_study(study.id, state=StudyState.CANCELLED)
    with clock(SKEW_S):
        assert store.cancelled_with_live_launches() == []
    store.release_study(study.id, "replica-a")
    assert [s.id for s in store.cancelled_with_live_launches()] == [study.id]
