"""A study's and a launch's time is written and judged by the database's clock, as leases are
(tests/store/test_lease_clock.py). Each replica used its own: a study resumed by a replica whose clock
ran 10 minutes ahead of the one that started it had its 5-minute time budget spent at once (no search
at all), and a queued launch it re-attached to was given up at its first poll (queue_timeout_s).

The replica ahead is this process with the engine's clock set off (`utcnow` where the engine reads it);
the database runs on this host, so the real clock here is the database's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.store import Store, StudyState, models
from autotuner.tuning import StudyDriver
from tests.autotuner.test_driver import LANDSCAPE, study_with

SKEW_S = 600.0


def skew(monkeypatch) -> None:
    """The engine's clock SKEW_S ahead, wherever it reads it."""
    real = models.utcnow

    def skewed():
        return real() + timedelta(seconds=SKEW_S)

    for module in ("driver", "launch", "recover", "revalidate", "ingest"):
        monkeypatch.setattr(f"autotuner.tuning.{module}.utcnow", skewed, raising=False)


@pytest.fixture
def ahead(monkeypatch):
    skew(monkeypatch)


def test_a_study_resumed_by_a_replica_whose_clock_is_ahead_searches_its_budget(store: Store, tmp_path, ahead):
    study = study_with(store, tmp_path, trials=2, time_budget_s=300, confirm_rounds=0, ladder_rounds=0)
    store.move_study(
        study.id, StudyState.RUNNING, started_at=store.now()
    )  # started by a replica whose clock is right
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    kinds = [launch.kind for launch in store.launches(study.id)]
    assert kinds.count("search") == 2  # was 0: 15 minutes "spent" of 5


class Stopped(BaseException):
    """The runner's process stopping mid-launch: no `except Exception` sees it, the launch runs on."""


class QueuedReplay(ReplayExecutor):
    """Replay whose launches read pending (queued) for their first `polls` polls, within a 300 s
    queue_timeout_s; `stop_at`: the poll that stops the runner (Stopped)."""

    def __init__(self, polls: int = 3, stop_at: int | None = None) -> None:
        super().__init__(Landscape.load(LANDSCAPE), seed=7)
        self.polls, self.stop_at, self.seen = polls, stop_at, 0
        self.queue_timeout_s = 300.0

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        self.seen += 1
        if self.seen == self.stop_at:
            raise Stopped
        return Description(LaunchState.PENDING if self.seen <= self.polls else LaunchState.SUCCEEDED, 0)


def test_a_queued_launch_re_attached_by_a_replica_whose_clock_is_ahead_waits_its_queue_time(
    store: Store, tmp_path, monkeypatch
):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, launch_timeout_s=120)
    with pytest.raises(Stopped):  # a replica whose clock is right starts the baseline, then stops
        StudyDriver(store, study.id, QueuedReplay(stop_at=2), poll_s=0.01).run()
    [left] = store.launches(study.id)
    assert (left.state, left.backend_id) == ("pending", f"replay:s{study.id}-l1")
    store.release_study(study.id, store.study(study.id).owner)
    skew(monkeypatch)
    final = StudyDriver(store, study.id, QueuedReplay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    baseline = store.launch(left.id)
    assert (baseline.state, baseline.error) == ("succeeded", None)  # was: cancelled, 600 s "queued" of 300


def test_what_a_replica_ahead_writes_ends_after_it_starts(store: Store, tmp_path, ahead):
    """Starts were the database's clock, ends and heartbeats the replica's: every launch it ran read 10
    minutes long on the dashboard, and the study's end came before nothing it could be compared with."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=2, ladder_rounds=0)
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    ended = store.study(study.id)
    assert timedelta(0) <= ended.finished_at - ended.started_at < timedelta(seconds=SKEW_S / 2)
    launches = store.launches(study.id)
    assert len(launches) >= 3
    for launch in launches:
        took = launch.finished_at - launch.started_at
        assert timedelta(0) <= took < timedelta(seconds=SKEW_S / 2), (launch.kind, took)
        assert launch.heartbeat_at - launch.started_at < timedelta(seconds=SKEW_S / 2)
