"""A re-validation row whose stored result or fingerprint is not JSON (a hand on the SQLite file): it
reads as empty and is said so; the schedule, the queue and the listing go on for every version."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.store import Store, ValidationState, ValidationTrigger
from autotuner.tuning import StudyQueue
from autotuner.tuning.revalidate import request, schedule_due
from tests.autotuner.test_driver import RECORDED, study_with
from tests.helpers import LANDSCAPE

WEEK_S = 7 * 86400


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'at.db'}")
    yield s
    s.dispose()


@pytest.fixture
def served(store, tmp_path):
    """Two served versions (two workloads) of one study, published by hand: nothing here measures."""
    study = study_with(store, tmp_path)
    store.update_study(study.id, state="done")  # not run: the queue has no study to run first
    store.upsert_workload("small2", {**RECORDED["workload"], "name": "small2"})
    for workload in ("small", "small2"):
        store.publish_config(cluster="cpu-box", workload=workload, nodes=1, env={}, fwd_precision="fp32",
                             bwd_precision="fp32", batch_size=256, sharding="table_wise", pipeline="none",
                             evidence={"speedup": 3.0}, study_id=study.id)  # fmt: skip
    return store.served_config("cpu-box", "small"), store.served_config("cpu-box", "small2")


def finished(store, config, state, column, **fields):
    """A finished re-validation of `config` whose stored `column` is then overwritten with text that is
    not JSON."""
    row, _ = request(store, config)
    store.finish_validation(row.id, state, **fields)
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE at_config_validations SET {column} = '{{not json' WHERE id = :i"),
                     {"i": row.id})  # fmt: skip
    return store.validation(row.id)


def test_a_failed_revalidation_whose_result_is_not_json_still_flags_its_version(store, served, caplog):
    c1, c2 = served
    bad = finished(store, c1, ValidationState.FAILED, "result", result={"why": "slower"}, action="recorded")
    with caplog.at_level(logging.WARNING, logger="autotuner.store"):
        public = store.public_configs([c1, c2])
    assert [p["workload"] for p in public] == ["small", "small2"]
    assert (
        public[0]["flagged"] == f"re-validation {bad.id} failed: its stored result cannot be read; recorded"
    )
    last = public[0]["last_validation"]
    assert (last["id"], last["state"], last["speedup"]) == (bad.id, "failed", None)
    assert last["why"] == "its stored result cannot be read"
    assert public[1]["flagged"] is None
    assert f"re-validation {bad.id} (config {c1.id}): its stored result cannot be read" in caplog.text


def test_a_held_revalidation_whose_fingerprint_is_not_json_reads_as_validated_on_nothing_known(store, served):
    c1, _ = served
    bad = finished(store, c1, ValidationState.HELD, "fingerprint", result={"why": "still faster"},
                   fingerprint={"driver": "570.86.15", "nodes": "1"})  # fmt: skip
    view = store.validation_views([c1])[c1.id]
    assert view["validated_at"] == bad.finished_at
    assert view["validated_on"] == {"nodes": "1"}  # on what it held is no longer known
    assert view["last_validation"]["fingerprint"] == {}
    assert view["last_validation"]["why"] == "still faster"
    assert view["flagged"] is None


def test_the_schedule_and_the_queue_go_on_past_a_row_that_is_not_json(store, served):
    c1, c2 = served
    finished(store, c1, ValidationState.FAILED, "result", result={"why": "slower"}, action="recorded")
    later = c2.created_at + timedelta(days=8)
    asked = schedule_due(store, WEEK_S, later, "7d")
    assert sorted(a.config_id for a in asked) == [c1.id, c2.id]
    # the service's queue: its schedule check runs first at every tick, then the pending ones
    for row in asked:
        store.finish_validation(row.id, ValidationState.ERROR, error="cleared for the queue's own")
    queue = StudyQueue(store, lambda settings: ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01,
                       revalidate_every_s=1e-6, revalidate_every="1us")  # fmt: skip
    assert queue.run_once()  # one re-validation run (it ends in error: the study measured no baseline)
    scheduled = [v for v in store.validations(config_ids=[c2.id]) if v.trigger == ValidationTrigger.SCHEDULE]
    assert len(scheduled) == 2  # the schedule asked for c2 again past c1's row
