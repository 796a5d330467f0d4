"""The study driver, on recorded real measurements (replay) so every run is deterministic."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import optuna
import pytest

from autotuner.executors import Landscape, LaunchState, ReplayExecutor
from autotuner.executors.base import Description
from autotuner.store import Store, env_hash
from autotuner.tuning import StudyDriver, StudySettings, create_study, optuna_storage
from tests.helpers import LANDSCAPE, at_rate

RECORDED = json.loads(LANDSCAPE.read_text())
SPACE = {
    "env": {"NCCL_NSOCKS_PERTHREAD": [None, 4]},
    "precisions": [["fp32", "fp32"], ["fp16", "fp16"], ["fp8", "bf16"], ["int8", "int8"]],
    "batch_sizes": [64, 256],
    "allow_batch_change": True,
    # recorded on gloo, where NCCL variables are inert: searched anyway to exercise the search
    "force_inert": ["NCCL_NSOCKS_PERTHREAD"],
}


def study_with(store: Store, tmp_path: Path, space=None, name=None, **settings):
    defaults = dict(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=2, seed=7,
                    workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    defaults.update(settings)
    return create_study(store, cluster="cpu-box", workload=RECORDED["workload"], space=space or SPACE,
                        settings=StudySettings(**defaults), name=name)  # fmt: skip


def replay(seed: int = 7) -> ReplayExecutor:
    return ReplayExecutor(Landscape.load(LANDSCAPE), seed=seed)


def measured(store: Store, study_id: int) -> list[tuple[str, str]]:
    return [(json.dumps(c.env, sort_keys=True), f"{c.fwd_precision}/{c.bwd_precision}/{c.batch_size}")
            for c in store.candidates(study_id)]  # fmt: skip


def test_study_runs_baseline_search_confirm_and_publishes(store, tmp_path):
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    launches = store.launches(study.id)
    assert [launch.kind for launch in launches[:4]] == ["baseline", "search", "search", "search"]
    # confirmed first, then the ladder from the baseline to the finalist
    assert launches[4].kind == "confirm"
    assert {launch.kind for launch in launches[4:]} <= {"confirm", "ladder"}
    assert launches[0].env == {}
    assert launches[0].spec["candidates"] == [
        {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64, "sharding": "table_wise",
         "pipeline": "none"}  # the job's own: a sparse-only workload runs a plain loop
    ]  # fmt: skip
    assert all(1 <= len(launch.spec["candidates"]) <= 3 for launch in launches[1:4])
    # every searched candidate is an Optuna trial with the measured value
    ostudy = optuna.load_study(study_name=f"autotuner-study-{study.id}", storage=optuna_storage(store.url))
    values = {t.number: t.value for t in ostudy.trials if t.state == optuna.trial.TrialState.COMPLETE}
    searched = store.candidates(study.id, kinds=["search"])
    assert searched
    assert all(c.optuna_number is None or values[c.optuna_number] == c.samples_per_s for c in searched)
    assert len([c for c in searched if c.optuna_number is not None]) >= 3
    outcome = final.outcome
    assert outcome["rounds"] == 2
    assert outcome["ci_low"] <= outcome["speedup"] <= outcome["ci_high"]
    config = store.served_config("cpu-box", "small")
    assert config is not None
    assert config.version == outcome["published_version"]
    assert config.evidence["study_id"] == study.id


def test_same_seed_same_study(store, tmp_path):
    a = study_with(store, tmp_path, name="a")
    b = study_with(store, tmp_path, name="b")
    StudyDriver(store, a.id, replay(), poll_s=0.01).run()
    StudyDriver(store, b.id, replay(), poll_s=0.01).run()
    assert len(measured(store, a.id)) >= 4  # baseline and searched points: an empty study proves nothing
    assert measured(store, a.id) == measured(store, b.id)


def test_accuracy_guardrail_makes_fp8_infeasible_and_unpublishable(store, tmp_path):
    study = study_with(
        store, tmp_path, space={**SPACE, "max_quant_error": 0.01}, trials=4, candidates_per_launch=4
    )
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    fp8 = [c for c in store.candidates(study.id) if c.fwd_precision == "fp8"]
    assert fp8
    assert all(c.state == "infeasible" and "tolerance 0.01" in c.error for c in fp8)
    config = store.served_config("cpu-box", "small")
    assert config.fwd_precision != "fp8"
    assert store.candidate(final.best_candidate_id).state == "ok"


class CrashingReplay(ReplayExecutor):
    """Launches whose env sets NCCL_NSOCKS_PERTHREAD=4 die without a result (a bad NCCL config)."""

    def describe(self, backend_id, launch):
        if launch.env.get("NCCL_NSOCKS_PERTHREAD") == "4":
            launch.result_path.unlink(missing_ok=True)
            return Description(LaunchState.FAILED, 134, "killed by signal 6")
        return super().describe(backend_id, launch)


def test_failed_launch_is_recorded_quarantined_and_the_study_goes_on(store, tmp_path):
    study = study_with(store, tmp_path, trials=4)
    final = StudyDriver(store, study.id, CrashingReplay(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done"
    bad = [launch for launch in store.launches(study.id) if launch.env.get("NCCL_NSOCKS_PERTHREAD") == "4"]
    assert len(bad) == 1, "a quarantined env config must not be launched again"
    assert bad[0].state == "failed"
    assert "signal 6" in bad[0].error
    assert all(c.state == "failed" for c in store.candidates(study.id, launch_id=bad[0].id))
    assert env_hash(bad[0].env) in store.quarantined(study.cluster_id)
    assert store.served_config("cpu-box", "small").env.get("NCCL_NSOCKS_PERTHREAD") != "4"


def test_time_budget_stops_new_launches(store, tmp_path):
    study = study_with(store, tmp_path, trials=None, time_budget_s=0.001, confirm_rounds=0)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done"
    assert [launch.kind for launch in store.launches(study.id)] == ["baseline"]


def test_cancel_from_another_process_stops_the_study(store, tmp_path, monkeypatch):
    monkeypatch.setattr("autotuner.tuning.lease.HEARTBEAT_EVERY_S", 0.5)  # the driver looks at each renewal
    study = study_with(store, tmp_path, trials=50)

    class SlowReplay(ReplayExecutor):
        def describe(self, backend_id, launch):
            if launch.name.endswith("-l3"):
                store.update_study(study.id, state="cancelled")  # someone pressed cancel
                return Description(LaunchState.RUNNING)
            return super().describe(backend_id, launch)

    final = StudyDriver(store, study.id, SlowReplay(Landscape.load(LANDSCAPE)), poll_s=0.01).run()
    assert final.state == "cancelled"
    assert len(store.launches(study.id)) == 3
    assert store.launches(study.id)[-1].state == "cancelled"


def test_a_second_driver_cannot_run_a_leased_study(store, tmp_path):
    from autotuner.tuning import StudyBusy

    study = study_with(store, tmp_path)
    assert store.acquire_study(study.id, "someone-else", lease_s=60)
    with pytest.raises(StudyBusy):
        StudyDriver(store, study.id, replay()).run()


def test_settings_reject_inconsistent_budgets():
    with pytest.raises(ValueError, match="budget"):
        StudySettings(trials=None, time_budget_s=None)
    with pytest.raises(ValueError, match="at least 2"):
        StudySettings(confirm_rounds=1)
    with pytest.raises(ValueError, match="landscape"):
        StudySettings(executor="replay")
    with pytest.raises(ValueError, match="fabric"):
        StudySettings(executor="replay", fabric="1gbit", executor_options={"landscape": "x"})


def test_lease_runs_concurrently_only_once(store, tmp_path):
    """Two drivers started at once on one study: exactly one runs it."""
    from autotuner.tuning import StudyBusy

    study = study_with(store, tmp_path)
    outcomes = []

    def go():
        try:
            outcomes.append(StudyDriver(store, study.id, replay(), poll_s=0.01).run().state)
        except StudyBusy:
            outcomes.append("busy")

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) in (
        ["busy", "done"],
        ["done", "done"],
    )  # the second may start after the first ends
    assert len(store.candidates(study.id, kinds=["baseline"])) == 1


class NodeCountingReplay(ReplayExecutor):
    """Replays the landscape, scaling throughput with the node count as a fabric would (sub-linearly)."""

    def dryrun(self, launch):
        dryrun = super().dryrun(launch)
        for cand in dryrun.request.result["candidates"]:
            if cand.get("status") == "ok":
                cand.update(
                    at_rate(
                        cand, cand["samples_per_s"] * launch.nnodes**0.8, dryrun.request.result["world_size"]
                    )
                )
        return dryrun


def test_scaling_curve_measures_each_node_count_and_reports_factors(store, tmp_path):
    study = study_with(store, tmp_path, scaling_nodes=[1, 2, 4])
    final = StudyDriver(
        store, study.id, NodeCountingReplay(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01
    ).run()
    assert final.state == "done", final.error
    scaling = [launch for launch in store.launches(study.id) if launch.kind == "scaling"]
    assert sorted({launch.nnodes for launch in scaling}) == [1, 2, 4]
    curve = final.outcome["scaling"]
    assert [p["nodes"] for p in curve] == [1, 2, 4]
    assert curve[0]["tuned_scaling"] == 1.0
    assert curve[2]["baseline_scaling"] == pytest.approx(4**0.8, rel=0.25)  # replay picks among repeats
    # resuming a finished study neither re-measures nor re-publishes
    versions = len(store.config_history("cpu-box", "small"))
    store.update_study(study.id, state="running")
    StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert len(store.config_history("cpu-box", "small")) == versions
    assert len([x for x in store.launches(study.id) if x.kind == "scaling"]) == len(scaling)


def test_pipelines_are_searched_in_process_like_precisions(store, tmp_path):
    import random

    from autotuner.tuning.launch import spec_of
    from autotuner.tuning.plan import plan_launch
    from autotuner.tuning.search import Search

    space = {**SPACE, "pipelines": [None, "base"]}  # null: the job's own (a plain loop for this workload)
    study = study_with(store, tmp_path, space=space, candidates_per_launch=32)
    ctx = StudyDriver(store, study.id, replay(), poll_s=0.01).ctx
    assert {p.pipeline for p in ctx.points} == {"none", "base"}
    assert len(ctx.points) == 4 * 2 * 2
    assert ctx.baseline_point.pipeline == "none"
    plan = plan_launch(ctx, Search(ctx), random.Random(0))
    assert plan is not None
    assert {p.pipeline for p in plan.points} == {"none", "base"}
    assert len({p.key() for p in plan.points}) == len(plan.points)  # one launch, each point once
    assert {c["pipeline"] for c in spec_of(ctx, plan)["candidates"]} == {"none", "base"}


def test_a_front_end_callback_that_raises_never_fails_the_study(store, tmp_path, caplog):
    from autotuner.tuning import Progress

    def broken(*args):
        raise TypeError("a progress bar bug")

    study = study_with(store, tmp_path)
    progress = Progress(on_launch_start=broken, on_launch_end=broken, on_phase=broken)
    final = StudyDriver(store, study.id, replay(), progress=progress, poll_s=0.01).run()
    assert final.state == "done", final.error
    assert "progress callback on_launch_end failed" in caplog.text


def test_a_wide_launch_asks_the_sampler_a_bounded_number_of_times_and_fills_the_rest(store, tmp_path):
    """Each proposal reads every trial so far: a launch of k = 1,000 that asked the sampler for each point
    held the queue minutes per launch (bench/planning.py wide). Past SAMPLER_PROPOSALS, unmeasured
    points fill the launch."""
    import random

    from autotuner.tuning import plan as planner
    from autotuner.tuning.search import Search

    space = {**SPACE, "batch_sizes": list(range(64, 164))}  # 4 precisions x 100 batches
    study = study_with(store, tmp_path, space=space, candidates_per_launch=300)
    ctx = StudyDriver(store, study.id, replay(), poll_s=0.01).ctx
    search, asked = Search(ctx), []
    ask = search.ask
    search.ask = lambda *a: asked.append(1) or ask(*a)  # count every proposal
    plan = planner.plan_launch(ctx, search, random.Random(0))
    assert plan is not None
    assert len(plan.points) == len(set(plan.points)) == 300
    proposed = [t for t in plan.trials if t is not None]
    assert 0 < len(proposed) <= planner.SAMPLER_PROPOSALS  # the sampler's picks lead, unmeasured ones fill
    assert len(asked) < 2 * planner.SAMPLER_PROPOSALS  # before: 300 and more (echoes), each slower


def test_a_search_that_measured_every_point_ends_and_says_so(store, tmp_path, caplog):
    # before: "50 proposals in a row were invalid, quarantined or exhausted", a warning, after every
    # point of a small space (the demo's on CPU) was measured
    study = study_with(store, tmp_path, trials=10, candidates_per_launch=4, confirm_rounds=0)
    with caplog.at_level("INFO", logger="autotuner.tuning"):
        final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert final.launches_done < 10
    assert len(set(measured(store, study.id))) == 16  # 2 env points x 8 in-process points
    said = [r for r in caplog.records if "proposals in a row" in r.message or "is measured" in r.message]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("INFO", f"study {study.id}: every runnable point of its space is measured: the search ends")
    ]


@pytest.mark.parametrize("phase", ["confirm", "ladder"])
def test_a_cancel_between_heartbeats_stands_and_nothing_is_published(store, tmp_path, phase):
    """The runner looks for a cancel at heartbeats; one that came after the last search launch was
    written over (CONFIRMING, then DONE) and the study published: the cancel the API had answered
    with 200 'cancelled' was lost."""
    from autotuner.tuning import Progress

    study = study_with(store, tmp_path)

    def cancel_now(name: str) -> None:
        if name == phase:
            assert store.move_study(study.id, "cancelled") is not None  # as POST .../cancel does

    final = StudyDriver(store, study.id, replay(), progress=Progress(on_phase=cancel_now), poll_s=0.01).run()
    assert final.state == "cancelled"
    assert final.finished_at is not None
    assert store.served_configs("cpu-box", RECORDED["workload"]["name"]) == []
    assert store.move_study(study.id, "done") is None  # ended: no state moves it again


def test_a_baseline_that_ran_but_measured_nothing_says_why(store, tmp_path):
    """Its launch succeeded and its one candidate failed (an OOM, a refused pipeline; here a point the
    recording lacks): the study said "did not run: see its launch log", whose log said nothing of it."""
    workload = {**RECORDED["workload"], "batch_size": 32}
    study = create_study(store, cluster="cpu-box", workload=workload, space=SPACE, name="unmeasured",
                         settings=StudySettings(executor="replay", trials=1, workdir=str(tmp_path / "runs"),
                                                executor_options={"landscape": str(LANDSCAPE)}))  # fmt: skip
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    [launch] = store.launches(study.id)
    assert (final.state, launch.state) == ("failed", "succeeded")
    assert final.error == ("the baseline (the job's own settings) was not measured: launch 1 ran but measured nothing: "
                           f"point not in the recorded landscape (its log: {launch.log_path})")  # fmt: skip
