"""The store under a reviewer's hostile rows and races: a re-validation whose date is no date, a
second runner's finish, a publish whose precondition no longer holds, and two replicas counting one
stack's jobs at once. Races are injected where the other side would run: no sleeps."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import autotuner.store.validations as validations
from autotuner.store import FingerprintReport, Store, ValidationState

FIELDS = {
    "env": {},
    "fwd_precision": "fp16",
    "bwd_precision": "fp16",
    "batch_size": 512,
    "sharding": "table_wise",
}


@pytest.fixture
def sqlite_store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'at.db'}")
    yield s
    s.dispose()


def publish(store, workload="w", **fields):
    """A version of (c, workload, 1 node) published by a study of its own."""
    study = store.create_study(name=f"s-{workload}-{len(store.config_history())}", cluster="c", workload_name=workload,
                               workload_spec={"name": workload, "tables": []}, space={}, settings={}, state="done")  # fmt: skip
    return store.publish_config(
        cluster="c", workload=workload, nodes=1, study_id=study.id, **{**FIELDS, **fields}
    )


def failed(store, config, why="slower"):
    row, _ = store.request_validation(config.id, "manual", "test")
    return store.finish_validation(row.id, ValidationState.FAILED, result={"why": why}, action="flagged")


# ---------------------------------------------------------------------------- 1: one unreadable row


def test_a_revalidation_whose_date_is_no_date_leaves_every_version_flagged(sqlite_store):
    store = sqlite_store
    c1, c2 = publish(store, "w1"), publish(store, "w2")
    f1, f2 = failed(store, c1), failed(store, c2)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE at_config_validations SET created_at = 'garbage' WHERE id = :i"), {"i": f2.id}
        )
    views = store.validation_views([c1, c2])
    assert views[c1.id]["flagged"] == f"re-validation {f1.id} failed: slower; flagged"
    assert views[c2.id]["flagged"] == f"re-validation {f2.id} failed: slower; flagged"
    assert views[c2.id]["last_validation"]["requested_at"] is None  # not known: never made up
    assert views[c1.id]["last_validation"]["requested_at"] is not None
    assert [p["flagged"] is not None for p in store.public_configs([c1, c2])] == [True, True]


def test_a_view_that_cannot_be_made_is_logged_and_the_others_are_made(store, monkeypatch, caplog):
    c1, c2 = publish(store, "w1"), publish(store, "w2")
    f1, f2 = failed(store, c1), failed(store, c2)
    real = validations.validation_view

    def hostile(row, finished, **kwargs):
        if row.id == c2.id:
            raise TypeError("a row nobody foresaw")
        return real(row, finished, **kwargs)

    monkeypatch.setattr(validations, "validation_view", hostile)
    with caplog.at_level(logging.ERROR, logger="autotuner.store"):
        views = store.validation_views([c1, c2])
    assert views[c1.id] == real(c1, [f1], store=store.url)
    assert views[c2.id]["flagged"] == f"re-validation {f2.id} failed: slower; flagged"  # what can be read
    assert views[c2.id]["last_validation"] is None
    assert f"config {c2.id}: its re-validations cannot all be read" in caplog.text


# ---------------------------------------------------------------------------- 2: a verdict stands


def test_a_second_finish_does_not_overwrite_the_recorded_verdict(store):
    config = publish(store)
    row, _ = store.request_validation(config.id, "manual", "asked")
    store.update_validation(row.id, state=ValidationState.RUNNING)
    first = store.finish_validation(row.id, ValidationState.FAILED, result={"why": "slower"},
                                    action="replaced: published v2", new_config_id=None)  # fmt: skip
    generation = store.config_generation()
    again = store.finish_validation(row.id, ValidationState.HELD, result={"why": "faster"}, action="kept v1")
    assert (again.state, again.action, again.result) == (
        "failed",
        "replaced: published v2",
        {"why": "slower"},
    )
    assert again.finished_at == first.finished_at
    assert store.config_generation() == generation  # nothing changed: nothing to re-render
    assert not store.start_validation(row.id, row.created_at)  # nor set back to running
    assert store.validation(row.id).state == ValidationState.FAILED


# ---------------------------------------------------------------------------- 3: publish's precondition


def test_a_publish_that_replaces_a_version_no_longer_served_publishes_nothing(store):
    from autotuner.store.configs import NotServed

    v1 = publish(store)
    v2 = publish(store, env={"NCCL_ALGO": "Tree"})
    with pytest.raises(NotServed, match="v1 is no longer the served version"):
        store.publish_config(cluster="c", workload="w", nodes=1, replaces=v1.id, **FIELDS)
    assert [c.version for c in store.config_history("c", "w", 1)] == [2, 1]
    store.pin_config("c", "w", 1, 2)
    with pytest.raises(NotServed, match="v2 is pinned"):
        store.publish_config(cluster="c", workload="w", nodes=1, replaces=v2.id, **FIELDS)
    store.pin_config("c", "w", 1, None)
    v3 = store.publish_config(cluster="c", workload="w", nodes=1, replaces=v2.id, **FIELDS)
    assert v3.version == 3
    assert store.served_config("c", "w", 1).id == v3.id


# ---------------------------------------------------------------------------- 4: jobs counted in SQL


def report_of(config, jobs=1):
    return {"config_id": config.id, "fingerprint": {"driver": "550", "nccl": "2.21.5"},
            "diff": {"nccl": ["2.20", "2.21.5"]}, "jobs": jobs}  # fmt: skip


def test_two_replicas_counting_one_stack_at_once_lose_no_jobs(store):
    config = publish(store)
    store.record_reports([report_of(config)])
    replica = Store(store.url, migrate_schema=False)
    ran = []

    def other_replica_counts(*_args):  # right after this replica read the row, if it reads it
        if not ran:
            ran.append(1)
            replica.record_reports([report_of(config, 2)])

    event.listen(FingerprintReport, "load", other_replica_counts)
    try:
        store.record_reports([report_of(config, 4)])
    finally:
        event.remove(FingerprintReport, "load", other_replica_counts)
    if not ran:
        replica.record_reports([report_of(config, 2)])
    replica.dispose()
    assert [r.jobs for r in store.fingerprint_reports([config.id])[config.id]] == [1 + 4 + 2]


def test_a_stack_another_replica_records_first_is_counted_on_its_row(store):
    if store.url.startswith("sqlite"):
        pytest.skip(
            "SQLite: the first replica's write lock keeps the other's insert waiting until it commits"
        )
    config = publish(store)
    replica = Store(store.url, migrate_schema=False)
    real = store._stacks

    def other_replica_first(s, counted, config_id):
        replica.record_reports([report_of(config, 2)])
        return real(s, counted, config_id)

    store._stacks = other_replica_first
    new = store.record_reports([report_of(config, 3)])
    replica.dispose()
    assert new == []  # the other replica's row: it asks for what a new stack asks
    assert [r.jobs for r in store.fingerprint_reports([config.id])[config.id]] == [5]
