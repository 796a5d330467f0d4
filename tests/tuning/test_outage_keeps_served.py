"""A phase after the confirmation that could not be measured (the ladder, the re-confirmation, the
quality launch: an outage) publishes nothing, as an unmeasured confirmation does: the config served
before, shown to help, stays served. Found by a review: each outage replaced a confirmed config with
the baseline, under a reason that said its knobs were measured and did not help."""

from __future__ import annotations

from types import SimpleNamespace

from autotuner.tuning.claim import NOTHING_HELPED
from autotuner.tuning.confirm import KEPT_SERVED
from autotuner.tuning.quality import unjudged
from tests.tuning.synthetic import RECORDED, Outage, replay, run, study, synth

# fp16 comms 1.3x, batch 256 a further 6x: the search finds both, the confirmation shows them
SPACE = {
    "precisions": [["fp32", "fp32"], ["fp16", "fp16"]],
    "batch_sizes": [64, 256],
    "allow_batch_change": True,
}


def rate(env, c):
    return 10000.0 * (1.3 if c["fwd_precision"] == "fp16" else 1.0) * (6.0 if c["batch_size"] == 256 else 1.0)


def served(store):
    config = store.served_config("cpu-box", "small")
    return config.version, config.fwd_precision, config.batch_size


def test_a_ladder_that_could_not_be_measured_publishes_nothing(store, tmp_path):
    landscape = synth(tmp_path / "land.json", rate)
    first = run(
        store,
        study(store, tmp_path, SPACE, landscape, name="a").id,
        replay(landscape),
    )
    assert first.outcome["published_version"] == 1
    assert served(store) == (1, "fp16", 256)
    later = study(store, tmp_path, SPACE, landscape, name="b")
    final = run(store, later.id, Outage(landscape, lambda tag: tag.startswith("ladder")))
    outcome = final.outcome
    assert outcome["finalist"]["significant"]  # confirmed, and then the ladder could not say why
    assert outcome["decision"].endswith(KEPT_SERVED)
    assert "the ladder's precision step could not be measured" in outcome["decision"]
    assert "published_version" not in outcome
    assert served(store) == (1, "fp16", 256)  # not replaced by the baseline
    # the ladder stopped at the step it could not measure: no launches for what could never be published
    assert [(s["step"], s["kept"], s["verdict"]) for s in outcome["ladder"]] == [
        ("precision", False, "not measured (see the launch logs)")
    ]
    tags = {
        (launch.spec.get("extra") or {}).get("tag")
        for launch in store.launches(later.id)
        if launch.kind == "ladder"
    }
    assert tags == {"ladder-0-precision"}


def test_a_ladder_that_measured_no_gain_still_publishes_the_baseline(store, tmp_path):
    # Measured and not helping is not "not measured": fp16 helps only at batch 256 and batch 256 only
    # with fp16, so each step alone, measured, gains nothing, and the baseline is published.
    together = synth(tmp_path / "land.json", lambda env, c: 10000.0 * (3.0 if (c["fwd_precision"], c["batch_size"]) == ("fp16", 256) else 1.0))  # fmt: skip
    final = run(store, study(store, tmp_path, SPACE, together).id, replay(together))
    assert [(s["step"], s["verdict"]) for s in final.outcome["ladder"]] == [
        ("precision", "no measurable gain"), ("batch", "no measurable gain")
    ]  # fmt: skip
    assert final.outcome["decision"] == NOTHING_HELPED
    assert final.outcome["published_version"] == 1
    assert served(store) == (1, "fp32", 64)


def test_a_reconfirmation_that_could_not_be_measured_publishes_nothing(store, tmp_path):
    # Only the batch is credited: what is left (the batch alone) is confirmed again, and that fails.
    landscape = synth(tmp_path / "land.json", rate)
    space = {**SPACE, "ladder": ["batch"]}
    first = run(
        store,
        study(store, tmp_path, space, landscape, name="a").id,
        replay(landscape),
    )
    assert first.outcome["reconfirmed"]["significant"]
    assert served(store) == (1, "fp32", 256)
    later = study(store, tmp_path, space, landscape, name="b")
    final = run(store, later.id, Outage(landscape, lambda tag: tag == "reconfirm"))
    outcome = final.outcome
    assert outcome["decision"].startswith("not confirmed again: fewer than 2 of 3 rounds")
    assert outcome["decision"].endswith(KEPT_SERVED)
    assert "reconfirmed" not in outcome
    assert "published_version" not in outcome
    assert served(store) == (1, "fp32", 256)


def test_a_quality_launch_that_failed_publishes_nothing(store, tmp_path):
    # A workload with a dense part, checked for quality (the executor replays: the study's settings are
    # a local one's, so the check runs); the quality launch dies.
    landscape = synth(tmp_path / "land.json", rate, pipeline="sparse_dist")
    workload = {**RECORDED["workload"], "dense": {"in_features": 13, "arch": [64], "over_arch": [16, 1]}}
    space = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64]}
    local = {"executor": "local", "executor_options": {}, "quality_samples": 16384, "workload": workload}
    first = study(store, tmp_path, space, landscape, name="a", **local)  # a config served before, by hand
    store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, fwd_precision="fp16",
                         bwd_precision="fp16", batch_size=64, sharding="table_wise", num_threads=None,
                         pipeline="sparse_dist", lr_scale=None, evidence={"speedup": 1.3}, study_id=first.id)  # fmt: skip
    before = served(store)
    later = study(store, tmp_path, space, landscape, name="b", **local)
    final = run(store, later.id, Outage(landscape, lambda tag: tag == "quality"))
    outcome = final.outcome
    assert [launch.state for launch in store.launches(later.id) if launch.kind == "quality"] == ["failed"]
    assert outcome["decision"] == (
        "not checked for quality (precision): the convergence check did not run: node unreachable (see the "
        f"launch log): {KEPT_SERVED}"
    )
    assert "published_version" not in outcome
    assert served(store) == before
    assert outcome["quality"]["failed"] is True


def test_a_model_that_failed_is_not_measured_one_that_diverged_is():
    launch = SimpleNamespace(error=None, state="succeeded")
    nan = "result unusable: candidate 3: quality.logloss is NaN, expected a finite number"
    diverged = unjudged(launch, [("only_batch", 0, nan)], ["precision", "batch"], 9)  # type: ignore[arg-type]
    assert diverged.failed is None  # a verdict: batch costs quality (refused), measured
    crashed = unjudged(launch, [("only_batch", 0, nan), ("only_precision", 1, "no result")], ["precision", "batch"], 9)  # type: ignore[arg-type]  # fmt: skip
    assert crashed.failed is True  # precision was never measured: the study publishes nothing
    assert crashed.refused == ["batch"]


def test_a_quality_launch_whose_rows_carry_no_scores_publishes_nothing(store, tmp_path):
    """Rows "ok" without a quality score (a result that timed the step and trained nothing: here the
    replay's): each model was not measured. Before, the first was read as a score: KeyError, the study
    failed."""
    landscape = synth(tmp_path / "land.json", rate, pipeline="sparse_dist")
    workload = {**RECORDED["workload"], "dense": {"in_features": 13, "arch": [64], "over_arch": [16, 1]}}
    space = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64]}
    local = {"executor": "local", "executor_options": {}, "quality_samples": 16384, "workload": workload}
    later = study(store, tmp_path, space, landscape, name="b", **local)
    final = run(store, later.id, replay(landscape))  # run() asserts it ended done
    outcome = final.outcome
    assert outcome["quality"]["failed"] is True
    assert (
        "the launch asked for a convergence check's scores, the result has none"
        in outcome["quality"]["skipped"]
    )
    assert outcome["decision"].endswith(KEPT_SERVED)
    assert "published_version" not in outcome
