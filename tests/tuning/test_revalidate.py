"""Re-validation on the replay executor, where the recorded landscape changes between the study and
the re-validation (an upgrade under a published config): the gain disappears, holds, or the version
is pinned; an older version that still holds; the job's own settings; the schedule; a resumed run."""

from __future__ import annotations

import copy
import errno
import json
import logging
import os
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.store import NotFound, ValidationState, ValidationTrigger
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.lease import FullDisks
from autotuner.tuning.revalidate import (
    CannotRevalidate,
    Revalidation,
    claimed_low,
    config_to_revalidate,
    parse_every,
    request,
    run_pending,
    schedule_due,
    staleness,
    verdict,
)
from autotuner.tuning.stats import Speedup
from tests.autotuner.test_driver import RECORDED, SPACE
from tests.helpers import at_rate

OLD_STACK = {"driver_version": "550.54.15", "nccl": "2.21.5"}
NEW_STACK = {"driver_version": "570.86.15", "nccl": "2.23.4"}


def landscape(path: Path, stack: dict, *, gain: bool = True) -> Path:
    """The recorded small landscape on a given stack; `gain=False`: every batch-256 point measures
    what the job's batch 64 measures at its env and precision (the tuned batch gains nothing)."""
    data = copy.deepcopy(RECORDED)
    data["driver_version"] = stack["driver_version"]
    data["versions"] = {**data["versions"], "nccl": stack["nccl"]}
    if not gain:
        at64 = {(json.dumps(p["env"], sort_keys=True), p["candidate"]["fwd_precision"], p["candidate"]["bwd_precision"]): p
                for p in data["points"] if p["candidate"]["batch_size"] == 64}  # fmt: skip
        for point in data["points"]:
            c = point["candidate"]
            if c["batch_size"] != 256:
                continue
            base = at64[(json.dumps(point["env"], sort_keys=True), c["fwd_precision"], c["bwd_precision"])]
            point["results"] = [at_rate(r, b["samples_per_s"] * f, data["world_size"])
                                for r, b, f in zip(point["results"], base["results"], (1.03, 0.97), strict=False)]  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def make_executor(settings: StudySettings) -> ReplayExecutor:
    return ReplayExecutor(Landscape.load(settings.executor_options["landscape"]), seed=settings.seed)


@pytest.fixture
def published(store, tmp_path):
    """A study on the old stack that published batch 256 (about 3.7x the job's batch 64)."""
    recorded = landscape(tmp_path / "landscape.json", OLD_STACK)
    settings = StudySettings(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=3, seed=7,
                             workdir=str(tmp_path / "runs"), executor_options={"landscape": str(recorded)})  # fmt: skip
    study = create_study(
        store, cluster="cpu-box", workload=RECORDED["workload"], space=SPACE, settings=settings
    )
    final = StudyDriver(store, study.id, make_executor(settings), poll_s=0.01).run()
    assert final.state == "done", final.error
    config = store.served_config("cpu-box", "small")
    assert config.batch_size == 256
    assert config.evidence["significant"]
    assert config.fingerprint["driver"] == "550.54.15"
    return recorded, config


def revalidate(store, config, **kwargs):
    row, created = request(store, config, **kwargs)
    assert created
    settings = StudySettings.model_validate(store.study(config.study_id).settings)
    return Revalidation(store, row.id, make_executor(settings), poll_s=0.01).run()


def test_the_gain_disappears_after_an_upgrade_a_baseline_version_is_published_with_the_reason(
    store, published
):
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=False)
    done = revalidate(store, v1, reason="after the NCCL upgrade")
    assert done.state == ValidationState.FAILED
    assert done.result["why"].startswith("its gain is gone: "), done.result
    assert done.result["rounds"] == 3
    assert done.result["ci_low"] <= 1.0 <= done.result["ci_high"]
    assert done.fingerprint == {"driver": "570.86.15", "nccl": "2.23.4", "nodes": "1"}
    # the published config and the baseline, interleaved in ABBA order, in the study: 3 rounds each
    launches = [la for la in store.launches(v1.study_id) if la.kind == "revalidate"]
    assert {la.spec["extra"]["tag"] for la in launches} == {f"revalidate-{done.id}"}
    points = [(c["batch_size"]) for la in launches for c in la.spec["candidates"]]
    assert points == [256, 64, 64, 256, 256, 64]
    # a new version: the baseline, with the reason; v1 untouched
    v2 = store.served_config("cpu-box", "small")
    assert v2.version == 2
    assert done.new_config_id == v2.id
    assert done.action.startswith("replaced: published v2")
    assert (v2.batch_size, v2.fwd_precision, v2.env, v2.pipeline) == (64, "fp32", {}, "none")
    assert v2.evidence["speedup"] == 1.0
    assert v2.evidence["replaces_version"] == 1
    assert v2.evidence["decision"].startswith(
        f"re-validation {done.id} of v1 failed on driver 570.86.15, NCCL 2.23.4"
    )
    assert v2.evidence["decision"].endswith("published the baseline (no changes)")
    assert v2.fingerprint["driver"] == "570.86.15"
    history = store.config_history("cpu-box", "small")
    assert [(c.version, c.batch_size) for c in history] == [(2, 64), (1, 256)]
    assert history[1].evidence == v1.evidence
    assert history[1].env == v1.env  # never edited in place
    # what the versions say of themselves
    views = store.validation_views(history)
    assert views[v1.id]["flagged"].startswith(f"re-validation {done.id} failed: its gain is gone")
    assert views[v2.id]["validated_on"]["driver"] == "570.86.15"
    assert views[v2.id]["flagged"] is None


def test_the_gain_holds_the_same_version_gains_a_validation_entry_on_the_new_stack(store, published):
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=True)
    before = store.config_generation()
    done = revalidate(store, v1)
    assert done.state == ValidationState.HELD, done.result
    assert done.result["significant"], done.result
    assert done.result["why"].startswith("still faster with 95% confidence")
    assert done.action == "kept v1: validated on driver 570.86.15, NCCL 2.23.4, 1 node"
    assert done.new_config_id is None
    assert [c.version for c in store.config_history("cpu-box", "small")] == [1]
    view = store.validation_views([v1])[v1.id]
    assert view["validated_on"] == {"driver": "570.86.15", "nccl": "2.23.4", "nodes": "1"}
    assert view["validated_at"] == done.finished_at
    assert view["last_validation"]["id"] == done.id
    assert store.config_generation() > before  # services render the version again
    public = store.public_config(store.served_config("cpu-box", "small"))
    assert public["validated_on"]["driver"] == "570.86.15"
    assert public["last_validation"]["state"] == "held"


def test_a_pinned_version_is_flagged_not_replaced(store, published):
    recorded, v1 = published
    store.pin_config("cpu-box", "small", 1, 1)
    landscape(recorded, NEW_STACK, gain=False)
    done = revalidate(store, store.served_config("cpu-box", "small"))
    assert done.state == ValidationState.FAILED
    assert done.new_config_id is None
    assert done.action.startswith("v1 is pinned by an operator: flagged, not replaced")
    served = store.served_config("cpu-box", "small")
    assert (served.version, served.pinned) == (1, True)
    assert len(store.config_history("cpu-box", "small")) == 1
    public = store.public_config(served)
    assert "pinned by an operator" in public["flagged"]
    assert "its gain is gone" in public["flagged"]
    assert staleness(public, [], None)["reasons"]["failed"] == public["flagged"]


def test_the_last_older_version_that_still_holds_on_this_stack_is_published_again(store, published):
    recorded, v1 = published
    with store.engine.begin() as conn:  # v1's batch was validated under a learning-rate rule
        conn.execute(sa.text("UPDATE at_configs SET lr_scale = 1.5 WHERE id = :id"), {"id": v1.id})
    # v2: another setting (fp16 at batch 256), published later by hand in the same study's name
    store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, fwd_precision="fp16",
                         bwd_precision="fp16", batch_size=256, sharding="table_wise", pipeline="none",
                         evidence={"speedup": 3.0}, study_id=v1.study_id)  # fmt: skip
    v2 = store.served_config("cpu-box", "small")
    landscape(recorded, NEW_STACK, gain=True)
    checked = revalidate(store, v1, reason="re-check the older one first")  # v1 holds on the new stack
    assert checked.state == ValidationState.HELD
    assert checked.action.endswith("recorded only") is False
    landscape(recorded, NEW_STACK, gain=False)
    # only fp32 batch 256 still gains: make fp16 at 256 lose it too, and v1's point keep it
    data = json.loads(recorded.read_text())
    good = json.loads(json.dumps(RECORDED))
    for point, old in zip(data["points"], good["points"], strict=True):
        if point["candidate"]["batch_size"] == 256 and point["candidate"]["fwd_precision"] == "fp32":
            point["results"] = old["results"]
    recorded.write_text(json.dumps(data))
    done = revalidate(store, v2)
    assert done.state == ValidationState.FAILED, done.result
    v3 = store.served_config("cpu-box", "small")
    assert v3.version == 3
    assert (v3.fwd_precision, v3.batch_size) == ("fp32", 256)
    assert v3.evidence["republished_version"] == 1
    assert v3.lr_scale == 1.5  # its batch goes out again with the rate it was validated under
    assert "published v1's setting again" in v3.evidence["decision"]
    assert done.action == "replaced: published v3, v1's setting, which still holds"


def test_a_version_that_is_the_baseline_holds_after_one_launch_on_the_stack(store, published):
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=False)
    failed = revalidate(store, v1)
    v2 = store.served_config("cpu-box", "small")
    assert failed.state == ValidationState.FAILED
    assert v2.evidence["no_changes"]
    done = revalidate(store, v2)
    assert done.state == ValidationState.HELD
    assert "the job's own settings" in done.result["why"]
    launches = [
        la
        for la in store.launches(v1.study_id)
        if la.spec.get("extra", {}).get("tag") == f"revalidate-{done.id}"
    ]
    assert len(launches) == 1
    assert len(launches[0].spec["candidates"]) == 1


def test_one_pending_revalidation_per_version_and_none_without_a_study(store, published):
    _, v1 = published
    first, created = request(store, v1, ValidationTrigger.FINGERPRINT, "jobs report driver 550 -> 570")
    again, created_again = request(store, v1)
    assert created
    assert not created_again
    assert again.id == first.id
    store.upsert_workload("other", {"name": "other", "tables": []})
    store.publish_config(cluster="cpu-box", workload="other", nodes=1, env={}, fwd_precision="fp32",
                         bwd_precision="fp32", batch_size=64, sharding="table_wise")  # fmt: skip
    with pytest.raises(CannotRevalidate, match="not published by a study"):
        request(store, store.served_config("cpu-box", "other"))
    with pytest.raises(NotFound, match="at 4 nodes"):
        config_to_revalidate(store, "cpu-box", "small", nodes=4)
    with pytest.raises(NotFound, match="no version 9"):
        config_to_revalidate(store, "cpu-box", "small", version=9)


def test_the_queue_runs_pending_revalidations_and_a_resumed_one_keeps_its_rounds(store, published):
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=True)
    row, _ = request(store, v1)
    settings = StudySettings.model_validate(store.study(v1.study_id).settings)
    # a runner that died after measuring two launches of its rounds
    reval = Revalidation(store, row.id, make_executor(settings), poll_s=0.01)
    launched = []
    reval.progress.on_launch_end = lambda launch, rows: launched.append(launch.id)
    store.update_validation(row.id, state=ValidationState.RUNNING)
    from autotuner.tuning import revalidate as module

    real = module.compare_settings

    def dies_after_one_launch(ctx, a, b, rounds, kind, tag, **_):
        from autotuner.tuning.pairs import measure

        measure(ctx, a, b, 1, kind, tag)
        raise KeyboardInterrupt  # as if killed

    module.compare_settings = dies_after_one_launch
    try:
        with pytest.raises(KeyboardInterrupt):
            reval.run()
    finally:
        module.compare_settings = real
    assert store.validation(row.id).state == ValidationState.RUNNING
    assert run_pending(store, make_executor, poll_s=0.01)
    done = store.validation(row.id)
    assert done.state == ValidationState.HELD
    launches = [la for la in store.launches(v1.study_id) if la.kind == "revalidate"]
    assert sum(len(la.spec["candidates"]) for la in launches) == 6  # the first round was kept
    assert not run_pending(store, make_executor, poll_s=0.01)


def test_a_store_that_does_not_answer_as_the_queue_takes_a_revalidation_up_leaves_it_pending(
    store, published, monkeypatch
):
    """A connection lost as the queue took a re-validation up (PostgreSQL restarting or out of connection
    slots, a connection killed) ended it for good: "error: it cannot run: OperationalError", written as
    soon as the store answered again, and the version waited for the schedule's next turn."""
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=True)
    row, _ = request(store, v1)
    real, calls = type(store).configs_by_id, {"n": 0}

    def away_once(self, ids):
        calls["n"] += 1
        if calls["n"] == 1:
            raise sa.exc.OperationalError("SELECT ...", {}, Exception("database is locked"))
        return real(self, ids)

    monkeypatch.setattr(type(store), "configs_by_id", away_once)
    assert not run_pending(store, make_executor, poll_s=0.01)  # nothing done: the queue pauses a tick
    assert store.validation(row.id).state == ValidationState.QUEUED
    assert run_pending(store, make_executor, poll_s=0.01)
    assert store.validation(row.id).state == ValidationState.HELD


def test_a_full_disk_at_a_revalidation_launch_leaves_it_running_and_the_queue_tries_it_again_later(
    store, published, caplog
):
    """A full disk under the workdir as a re-validation submitted a launch ended it for good ("error",
    the version left unvalidated until the schedule's next turn): it stays running, its rounds so far kept,
    tried again after a pause (each try records a cancelled launch), said once."""
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=True)
    row, _ = request(store, v1)
    disk = {"full": True}

    def on_full_disk(settings: StudySettings) -> ReplayExecutor:
        executor = make_executor(settings)
        submit = executor.submit

        def refused(launch):
            if disk["full"]:  # what the local executor's first write under the workdir raises
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(launch.workdir / "spec.json"))
            return submit(launch)

        executor.submit = refused  # type: ignore[method-assign]
        return executor

    now = [0.0]
    disks = FullDisks(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="autotuner")

    def tries() -> list[str]:
        return [la.state for la in store.launches(v1.study_id) if la.kind == "revalidate"]

    assert not run_pending(store, on_full_disk, poll_s=0.01, full_disks=disks)  # nothing concluded
    assert store.validation(row.id).state == ValidationState.RUNNING  # was "error", for good
    assert tries() == ["cancelled"]
    assert not run_pending(store, on_full_disk, poll_s=0.01, full_disks=disks)  # within its pause
    assert tries() == ["cancelled"]
    now[0] += FullDisks.FIRST_S  # the pause passed, the disk still full: tried again, not said again
    assert not run_pending(store, on_full_disk, poll_s=0.01, full_disks=disks)
    assert tries() == ["cancelled", "cancelled"]
    said = [r.getMessage() for r in caplog.records if "no space left on device" in r.getMessage()]
    assert len(said) == 1, said
    assert f"re-validation {row.id} stays running" in said[0]

    disk["full"] = False
    now[0] += FullDisks.FIRST_S  # the second pause is twice the first: still waiting
    assert not run_pending(store, on_full_disk, poll_s=0.01, full_disks=disks)
    now[0] += FullDisks.FIRST_S
    assert run_pending(store, on_full_disk, poll_s=0.01, full_disks=disks)
    assert store.validation(row.id).state == ValidationState.HELD


def test_the_schedule_asks_for_versions_validated_too_long_ago(store, published):
    _, v1 = published
    assert parse_every("7d") == 7 * 86400
    assert parse_every("12h") == 43200
    assert parse_every("off") is None
    assert parse_every("90") == 90
    with pytest.raises(ValueError, match="not a duration"):
        parse_every("weekly")
    now = v1.created_at + timedelta(days=3)
    assert schedule_due(store, 7 * 86400, now, "7d") == []
    later = v1.created_at + timedelta(days=8)
    asked = schedule_due(store, 7 * 86400, later, "7d")
    assert [(a.config_id, a.trigger) for a in asked] == [(v1.id, "schedule")]
    assert asked[0].reason == "last validated 8 d ago (AUTOTUNER_REVALIDATE_EVERY=7d)"
    assert schedule_due(store, 7 * 86400, later, "7d") == []  # asked already
    public = store.public_config(v1)
    assert staleness(public, [], 7 * 86400, later)["reasons"] == {
        "overdue": "validated 8 d ago, every 7 d asked"
    }


def test_jobs_ask_for_at_most_one_revalidation_of_a_version_in_six_hours(store, published, caplog):
    """Each new stack jobs reported asked for a re-validation as soon as the last one ended: made-up
    headers (any read token) or a fleet half-way through an upgrade ran one after another."""
    from api.fingerprints import REASK_AFTER, FingerprintReports
    from autotuner.store import ValidationState

    _, v1 = published
    reports = FingerprintReports(store)

    def new_stack(i: int) -> None:
        reports.note(v1.id, f"driver=999.{i}&nodes=1".encode(), {"driver": ["550.54.15", f"999.{i}"]})
        reports.flush()

    def asked() -> list:
        return [v for v in store.validations(config_ids=[v1.id]) if v.trigger == "fingerprint"]

    with caplog.at_level("INFO", logger="autotuner.api.fingerprints"):
        for i in range(4):
            new_stack(i)
            for v in asked():  # each one ends at once, as the scheduler would run it
                if v.state in ("queued", "running"):
                    store.finish_validation(v.id, ValidationState.HELD)
    assert len(asked()) == 1
    assert "not re-validated: jobs asked for one at" in caplog.text
    assert len(store.fingerprint_reports([v1.id])[v1.id]) == 4  # every stack is still recorded
    (first,) = asked()
    store.update_validation(first.id, created_at=first.created_at - REASK_AFTER)  # six hours on
    new_stack(9)
    assert len(asked()) == 2


@pytest.mark.parametrize(
    ("interval", "evidence", "state", "said"),
    [
        ((1.05, 1.20), {"ci_low": 1.2}, ValidationState.HELD, "still faster with 95% confidence"),
        ((0.80, 0.95), {"ci_low": 1.2}, ValidationState.FAILED, "now slower than the baseline"),
        ((0.95, 1.15), {"ci_low": 1.2}, ValidationState.FAILED, "its gain is gone"),
        ((0.95, 1.15), {"speedup": 1.3}, ValidationState.FAILED, "its gain is gone"),  # by hand: its figure
        # the rounds cannot tell: it was "no longer faster with 95% confidence", failed, and replaced
        ((0.95, 1.30), {"ci_low": 1.2}, ValidationState.UNRESOLVED, "not shown faster with 95% confidence"),
        ((0.95, 1.15), {}, ValidationState.UNRESOLVED, "not shown faster with 95% confidence"),
        ((0.95, 1.15), {"ci_low": float("nan"), "speedup": True}, ValidationState.UNRESOLVED, "not shown"),
        (
            (0.95, 1.15),
            {"ci_low": None, "speedup": 1.3},
            ValidationState.UNRESOLVED,
            "not shown",
        ),  # no interval
    ],
)
def test_a_revalidation_fails_a_version_only_on_evidence_against_it(interval, evidence, state, said):
    """A real, unchanged 1.10x at 5% launch noise is shown faster in 3 rounds about one time in four:
    failing whatever was not shown faster replaced good versions most of the time."""
    low, high = interval
    speedup = Speedup(ratio=(low * high) ** 0.5, ci_low=low, ci_high=high, rounds=3, tuned=1.0, baseline=1.0)
    got, result = verdict(speedup, [], [], claimed=claimed_low(evidence))
    assert got == state
    assert said in result["why"]
    assert (result["ci_low"], result["ci_high"]) == interval


def test_an_unresolved_revalidation_keeps_the_version_served_unflagged_and_unvalidated(store, published):
    _, v1 = published
    row, _ = request(store, v1)
    done = store.finish_validation(row.id, ValidationState.UNRESOLVED, result={"why": "the rounds cannot tell"},
                                   action="kept v1: nothing concluded", only_from=(ValidationState.QUEUED,
                                   ValidationState.RUNNING))  # fmt: skip
    assert done.state == ValidationState.UNRESOLVED
    view = store.validation_views([v1])[v1.id]
    assert view["flagged"] is None
    assert view["validated_at"] == v1.created_at  # not validated by it: the schedule's clock runs on
    assert view["last_validation"]["state"] == "unresolved"
    assert store.served_config("cpu-box", "small").id == v1.id


def test_a_baseline_version_that_measures_nothing_says_why(store, published):
    """Its launch ran and its one candidate failed (here: a stack whose recording lacks the point):
    the re-validation said "see the launch log", whose log said nothing of it."""
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=False)
    revalidate(store, v1)
    v2 = store.served_config("cpu-box", "small")
    assert v2.evidence["no_changes"]
    data = json.loads(recorded.read_text())
    data["points"] = [p for p in data["points"] if p["candidate"]["batch_size"] != 64]
    recorded.write_text(json.dumps(data))
    done = revalidate(store, v2)
    assert done.state == ValidationState.ERROR
    launch = [la for la in store.launches(v1.study_id) if la.kind == "revalidate"][-1]
    assert done.result["why"] == (f"the baseline (the job's own settings) was not measured: launch {launch.seq} ran but measured "
                                  f"nothing: point not in the recorded landscape (its log: {launch.log_path})")  # fmt: skip
