"""A launch the cluster refuses for now (SubmitLater: a submit limit such as Slurm's
QOSMaxSubmitJobPerUserLimit, which clears as the user's other jobs end) waits its turn in the engine, its
study's lease renewed meanwhile, and runs and is measured once the limit clears. Before, the Slurm
executor waited inside schedule() (where nothing renews the lease) for at most 45 s, and a limit that
took longer failed the whole study. One that never clears ends the launch cancelled at queue_timeout_s,
saying the limit and how long it waited; no env config is quarantined.

The lease here is shortened to LEASE_S so that a refusal outlasts it in a second or two."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest

from autotuner.executors import AppDryrun
from autotuner.executors.base import SubmitLater
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.store import Store, StudyState, utcnow
from autotuner.tuning import StudyDriver
from autotuner.tuning.lease import Lease, StudyBusy
from tests.autotuner.test_driver import LANDSCAPE, study_with

LEASE_S = 1.5
LIMIT = ("sbatch: error: QOSMaxSubmitJobPerUserLimit sbatch: error: Batch job submission failed: Job violates "
         "accounting/QOS policy (job submit limit, user's size and/or time limits)")  # fmt: skip


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    monkeypatch.setattr("autotuner.tuning.lease.LEASE_S", LEASE_S)
    monkeypatch.setattr("autotuner.tuning.lease.HEARTBEAT_EVERY_S", 0.1)


class Limited(ReplayExecutor):
    """A replay executor behind a submit limit: the launches `refused` picks are refused (SubmitLater,
    nothing sent) until `clears_at` (monotonic; None: never). At each refusal it records the launch's row
    and whether another runner could take the study over (its lease lapsed)."""

    def __init__(self, store: Store, study_id: int, clears_at: float | None, refused=lambda name: True,
                 **kwargs) -> None:  # fmt: skip
        super().__init__(Landscape.load(LANDSCAPE), seed=7, **kwargs)
        self.store, self.study_id, self.clears_at, self.refused = store, study_id, clears_at, refused
        self.refusals: list[str] = []
        self.rows: list[tuple[str, str | None]] = []
        self.taken_over = False
        self.on_refusal = lambda: None
        self.abandoned: list[str] = []

    def abandon(self, launch) -> None:  # what a refused submit may have queued is the executor's to undo
        self.abandoned.append(launch.name)

    def schedule(self, dryrun: AppDryrun) -> str:
        name = dryrun.launch.name
        if self.refused(name) and (self.clears_at is None or time.monotonic() < self.clears_at):
            self.refusals.append(name)
            row = self.store.launches(self.study_id)[-1]
            self.rows.append((row.state, row.waiting_on))
            self._try_to_take_over()
            self.on_refusal()
            raise SubmitLater(
                f"sbatch refused launch {name} for now, at a submit limit (exit 1): {LIMIT}", 0.05
            )
        return super().schedule(dryrun)

    def _try_to_take_over(self) -> None:
        try:
            Lease(self.store, self.study_id, owner="other-host:1:x:").acquire()
        except StudyBusy:
            return
        self.taken_over = True


def test_a_submit_limit_that_outlasts_the_lease_is_waited_out_and_the_launch_measured(
    store: Store, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="autotuner.tuning")
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, launch_timeout_s=0.5)
    refusal_s = 2 * LEASE_S  # and longer than the launch's timeout: waiting its turn is no run time
    executor = Limited(store, study.id, clears_at=time.monotonic() + refusal_s, delay_s=0.1)
    started = time.monotonic()
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert final.state == StudyState.DONE, final.error
    assert time.monotonic() - started >= refusal_s
    assert len(executor.refusals) >= 10
    assert set(executor.refusals) == {f"s{study.id}-l1"}  # the baseline
    assert not executor.taken_over, "the lease lapsed while the launch waited its turn"
    # meanwhile its row said so, in sbatch's words; once submitted, it ran and was measured
    assert executor.rows[0] == ("running", None)  # the first refusal: nothing said yet
    assert set(executor.rows[1:]) == {("pending", f"not submitted yet: sbatch refused launch s{study.id}-l1 for "
                                                  f"now, at a submit limit (exit 1): {LIMIT}")}  # fmt: skip
    launches = store.launches(study.id)
    assert [(x.state, x.waiting_on, x.error) for x in launches] == [("succeeded", None, None)] * len(launches)
    assert launches[0].backend_id == f"replay:s{study.id}-l1"
    assert executor.abandoned == []  # submitted in the end: nothing to undo
    assert store.quarantined(launches[0].study_id) == {}
    # The first wait is a warning that says it may never end and how to stop it (the log said only
    # "asking again in 2 s", then 4, 8, ... without end); later ones are info.
    waits = [r for r in caplog.records if "asking again" in r.getMessage()]
    assert [r.levelno for r in waits] == [logging.WARNING] + [logging.INFO] * (len(waits) - 1)
    assert (
        waits[0]
        .getMessage()
        .endswith(
            "for as long as it takes (the executor's queue_timeout_s is not set; a cancel, or Ctrl-C for "
            "`autotuner tune`, stops the study)"
        )
    )


def test_a_submit_limit_that_never_clears_ends_the_launch_at_queue_timeout_s_naming_it(
    store: Store, tmp_path, caplog
):
    """Search launches refused for good: each ends cancelled at queue_timeout_s, with the limit and the
    time waited, and quarantines nothing; the study goes on, as after a launch given up in the queue."""
    study = study_with(store, tmp_path, trials=2, confirm_rounds=0, ladder_rounds=0)
    executor = Limited(store, study.id, clears_at=None, refused=lambda name: not name.endswith("-l1"))
    executor.queue_timeout_s = 1.0
    with caplog.at_level(logging.WARNING, logger="autotuner.tuning"):
        final = StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert final.state == StudyState.DONE, final.error
    assert (
        "asking again in 0 s, for at most 1 s from its first try (the executor's queue_timeout_s)"
        in caplog.text
    )
    assert not executor.taken_over
    baseline, *searched = store.launches(study.id)
    assert baseline.state == "succeeded"
    assert [x.kind for x in searched] == ["search", "search"]
    assert executor.abandoned == [f"s{study.id}-l{launch.seq}" for launch in searched]
    for launch in searched:
        assert (launch.state, launch.backend_id, launch.waiting_on) == ("cancelled", None, None)
        assert launch.error == (f"not submitted after 1 s (queue_timeout_s 1 s): sbatch refused launch "
                                f"s{study.id}-l{launch.seq} for now, at a submit limit (exit 1): {LIMIT}")  # fmt: skip
        assert launch.finished_at - launch.started_at >= timedelta(seconds=1.0)
    assert store.quarantined(final.cluster_id) == {}


def test_a_baseline_that_never_gets_its_turn_fails_the_study_saying_where_to_look(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Limited(store, study.id, clears_at=None)
    executor.queue_timeout_s = 1.0
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert final.state == StudyState.FAILED
    assert "the baseline (the job's own settings) was not measured" in final.error
    [launch] = store.launches(study.id)
    assert launch.state == "cancelled"
    assert launch.error == (f"not submitted after 1 s (queue_timeout_s 1 s): sbatch refused launch s{study.id}-l1 "
                            f"for now, at a submit limit (exit 1): {LIMIT}")  # fmt: skip
    assert store.quarantined(final.cluster_id) == {}


def test_a_study_cancelled_while_its_launch_waits_its_turn_stops_waiting(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Limited(store, study.id, clears_at=None)
    executor.on_refusal = lambda: (
        len(executor.refusals) == 3 and store.move_study(study.id, StudyState.CANCELLED, finished_at=utcnow())
    )
    started = time.monotonic()
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert time.monotonic() - started < 10
    assert final.state == StudyState.CANCELLED
    assert len(executor.refusals) == 3  # not asked again once the cancel was seen
    assert executor.abandoned == [f"s{study.id}-l1"]
    [launch] = store.launches(study.id)
    assert (launch.state, launch.backend_id) == ("cancelled", None)
