"""A failed re-validation of the served version, where older versions' rows are unreadable (a hand on
the SQLite file), where publishing fails, and where the version published again came from another
study: the version that failed never stays served unflagged, and evidence names what was measured."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from autotuner.store import Store, ValidationState
from autotuner.tuning import StudyDriver, StudySettings, create_study
from tests.autotuner.test_driver import RECORDED, SPACE
from tests.tuning.test_revalidate import OLD_STACK, landscape, make_executor, revalidate


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'at.db'}")
    yield s
    s.dispose()


def run_study(store, tmp_path, **settings):
    recorded = landscape(tmp_path / "landscape.json", OLD_STACK)
    options = StudySettings(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=3, seed=7,
                            workdir=str(tmp_path / "runs"), executor_options={"landscape": str(recorded)}, **settings)  # fmt: skip
    study = create_study(
        store, cluster="cpu-box", workload=RECORDED["workload"], space=SPACE, settings=options
    )
    final = StudyDriver(store, study.id, make_executor(options), poll_s=0.01).run()
    assert final.state == "done", final.error
    return study


def losing_version(store, v1, study_id):
    """A later version whose setting gains nothing: the job's own point at another (inert) env, published
    with a gain (3x) that a re-validation's interval shows gone."""
    return store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                                fwd_precision="fp32", bwd_precision="fp32", batch_size=64, sharding=v1.sharding,
                                pipeline=v1.pipeline, evidence={"speedup": 3.0, "study_id": study_id},
                                study_id=study_id)  # fmt: skip


def overwrite(store, table, column, row_id):
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {table} SET {column} = '{{broken' WHERE id = :i"), {"i": row_id})


@pytest.fixture
def v1(store, tmp_path):
    run_study(store, tmp_path)
    v1 = store.served_config("cpu-box", "small")
    assert v1.batch_size == 256
    return v1


def test_an_older_version_whose_env_is_unreadable_is_skipped_and_the_baseline_replaces_the_failed_one(
    store, v1, caplog
):
    v2 = losing_version(store, v1, v1.study_id)
    overwrite(store, "at_configs", "env", v1.id)
    with caplog.at_level(logging.WARNING, logger="autotuner.tuning"):
        done = revalidate(store, v2)
    assert done.state == ValidationState.FAILED, (done.error, done.result)
    served = store.served_config("cpu-box", "small")
    assert served.version == 3
    assert done.new_config_id == served.id
    assert served.evidence["no_changes"]
    assert (served.batch_size, served.env) == (64, {})
    assert "cpu-box/small/1n/v2: v1 is not published again: its stored env (not JSON" in caplog.text
    assert store.validation_views([v2])[v2.id]["flagged"].startswith(f"re-validation {done.id} failed")


def test_an_older_version_whose_holding_revalidation_is_unreadable_is_not_published_again(store, v1, caplog):
    held = revalidate(store, v1)
    assert held.state == ValidationState.HELD
    v2 = losing_version(store, v1, v1.study_id)
    overwrite(store, "at_config_validations", "fingerprint", held.id)  # on which stack it held: unknown
    with caplog.at_level(logging.WARNING, logger="autotuner.tuning"):
        done = revalidate(store, v2)
    assert done.state == ValidationState.FAILED, (done.error, done.result)
    served = store.served_config("cpu-box", "small")
    assert (served.version, served.evidence.get("no_changes")) == (3, True)
    assert f"v1 is not published again: its re-validation {held.id} has unreadable fingerprint" in caplog.text


def test_a_failed_version_that_cannot_be_replaced_stays_flagged(store, v1, monkeypatch):
    v2 = losing_version(store, v1, v1.study_id)

    def refused(**fields):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(store, "publish_config", refused)
    done = revalidate(store, v2)
    assert done.state == ValidationState.FAILED, (done.error, done.result)
    assert done.action == "flagged, not replaced: RuntimeError: the disk is full"
    served = store.served_config("cpu-box", "small")
    assert served.id == v2.id
    flagged = store.public_config(served)["flagged"]
    assert flagged.startswith(f"re-validation {done.id} failed: ")
    assert flagged.endswith("flagged, not replaced: RuntimeError: the disk is full")


def test_a_version_published_again_carries_its_own_study(store, v1, tmp_path):
    s1 = v1.study_id
    held = revalidate(store, v1)
    assert held.state == ValidationState.HELD
    s2 = run_study(store, tmp_path, publish=False).id  # a later study of the same job, which publishes v2
    v2 = losing_version(store, v1, s2)
    done = revalidate(store, v2)
    assert done.state == ValidationState.FAILED, (done.error, done.result)
    v3 = store.served_config("cpu-box", "small")
    assert (v3.version, v3.batch_size, v3.evidence["republished_version"]) == (3, 256, 1)
    ev = v3.evidence
    # v1's study measured the setting, its candidate, ladder and decision: the row and evidence say so
    assert (v3.study_id, ev["study_id"]) == (s1, s1)
    assert store.candidate(ev["candidate_id"]).study_id == s1
    assert {
        store.candidate(step["candidate"]).study_id for step in ev["ladder"] if step.get("candidate")
    } == {s1}
    assert ev["measured_on"] == held.result["measured_on"]
    assert ev["speedup"] == held.result["speedup"]
    # the failure that asked for it stays recorded
    assert ev["replaces_version"] == 2
    assert ev["revalidation"]["id"] == done.id
    assert (ev["revalidation"]["of_version"], ev["revalidation"]["study_id"]) == (2, s2)
    # and v3 is re-validated against v1's study: its launches are study 1's
    again = revalidate(store, v3)
    assert again.study_id == s1
    tags = {la.spec["extra"]["tag"] for la in store.launches(s1) if la.kind == "revalidate"}
    assert f"revalidate-{again.id}" in tags
    assert not [
        la for la in store.launches(s2) if la.spec.get("extra", {}).get("tag") == f"revalidate-{again.id}"
    ]
