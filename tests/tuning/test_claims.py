"""What a published config claims, on recorded real measurements (replay: deterministic)."""

from __future__ import annotations

import json

import pytest

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.space import SpaceError
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.confirm import baseline_published
from autotuner.tuning.outcome import Outcome, Quality
from autotuner.tuning.quality import Variant, judge
from tests.helpers import LANDSCAPE

RECORDED = json.loads(LANDSCAPE.read_text())  # recorded on 2 CPU ranks: gloo
SPACE = {"env": {"NCCL_NSOCKS_PERTHREAD": [None, 4]}, "precisions": [["fp32", "fp32"], ["fp16", "fp16"]],
         "batch_sizes": [64, 256], "allow_batch_change": True}  # fmt: skip


def run(store, tmp_path, space, **settings):
    options = {"executor": "replay", "trials": 3, "candidates_per_launch": 3, "confirm_rounds": 3, "seed": 7,
               "workdir": str(tmp_path / "runs"), "executor_options": {"landscape": str(LANDSCAPE)}, **settings}  # fmt: skip
    study = create_study(store, cluster="cpu-box", workload=RECORDED["workload"], space=space,
                         settings=StudySettings(**options))  # fmt: skip
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    return study, final


def test_nccl_variables_are_not_searched_or_exported_on_gloo_and_the_study_says_why(store, tmp_path):
    study, final = run(store, tmp_path, SPACE)
    assert "gloo" in study.inert["NCCL_NSOCKS_PERTHREAD"]  # said when created, before any launch
    assert set(final.inert) == {"NCCL_NSOCKS_PERTHREAD"}
    searched = [launch for launch in store.launches(study.id) if launch.kind == "search"]
    assert searched
    assert all("NCCL_NSOCKS_PERTHREAD" not in launch.env for launch in searched)
    config = store.served_config("cpu-box", "small")
    assert config.env == {}
    assert "NCCL_NSOCKS_PERTHREAD" in config.evidence["inert"]


def test_the_ladder_keeps_only_steps_shown_to_help(store, tmp_path):
    # Forced in on gloo (and always set), the socket variable cannot act: its step is never measured or
    # credited (whatever its rows would read), and dropped.
    space = {**SPACE, "env": {"NCCL_NSOCKS_PERTHREAD": [4]}, "force_inert": ["NCCL_NSOCKS_PERTHREAD"]}
    study, final = run(store, tmp_path, space)
    ladder = final.outcome["ladder"]
    steps = [s["step"] for s in ladder]
    assert steps[-2:] == ["batch", "env"]
    assert set(steps) <= {"precision", "batch", "env"}
    for step in ladder[:-1]:
        assert step["ci_low"] <= step["speedup_vs_previous"] <= step["ci_high"]
        assert step["rounds"] == 5
        assert step["kept"] == (step["ci_low"] > 1)  # the drop rule: an interval that includes 1
    batch, env = ladder[-2:]
    assert batch["kept"]
    assert batch["changed"] == {"batch": [64, 256]}
    assert not env["kept"]
    assert env["verdict"] == "inert here: not credited"
    assert "ci_low" not in env
    assert not [
        la for la in store.launches(study.id) if la.kind == "ladder" and "env" in la.spec["extra"]["tag"]
    ]
    assert env["cumulative"] == batch["cumulative"]  # a dropped step adds nothing to the total
    config = store.served_config("cpu-box", "small")
    assert config.batch_size == 256
    assert config.env == {}
    # What was published is what was re-confirmed against the baseline, not the finalist
    assert final.outcome["reconfirmed"]["significant"]
    assert config.evidence["speedup"] == final.outcome["speedup"]
    assert store.candidate(final.outcome["chosen_candidate"]).env == {}
    assert config.evidence["ladder"] == ladder
    # ... and the finalist's own confirmation is kept beside it, not overwritten
    finalist = final.outcome["finalist"]
    assert finalist["candidate"] == final.outcome["best_candidate"] != final.outcome["chosen_candidate"]
    assert finalist["significant"]
    assert config.evidence["finalist"] == finalist
    assert Outcome.load(final.outcome).dump() == final.outcome  # stored as the type writes it
    assert (
        final.outcome["inert"]
        == config.evidence["inert"]
        == {"NCCL_NSOCKS_PERTHREAD": final.inert["NCCL_NSOCKS_PERTHREAD"]}
    )


def test_a_published_baseline_claims_no_speedup_and_keeps_the_finalists_figures_apart():
    # The finalist was confirmed faster, but no ladder step was shown to help: the baseline is published.
    confirmed = {"speedup": 1.36, "ci_low": 1.28, "ci_high": 1.45, "confidence": 0.95, "rounds": 3,
                 "significant": True, "tuned_samples_per_s": 21.0, "baseline_samples_per_s": 15.4}  # fmt: skip
    outcome = Outcome(best_candidate=7, baseline_candidate=1, chosen_candidate=1, ladder=[], **confirmed)
    published = baseline_published(outcome).dump()
    assert published["speedup"] == 1.0
    assert not {"ci_low", "ci_high", "significant"} & set(published)
    assert published["finalist"] == {**confirmed, "candidate": 7}
    assert published["ladder"] == []
    assert published["chosen_candidate"] == 1


def test_a_batch_above_the_jobs_needs_allow_batch_change(store, tmp_path):
    with pytest.raises(SpaceError, match="above the job's batch 64.*allow_batch_change: true") as err:
        run(store, tmp_path, {**SPACE, "allow_batch_change": False})
    assert err.value.problems[0].rule == "batch-change"
    assert err.value.problems[0].variable == "batch_sizes"
    assert store.count_studies() == 0  # refused before a study exists


def test_a_space_that_names_no_batch_searches_the_jobs_own(store, tmp_path):
    """The space's default batch list (512) is not the job's: a job at 64 was refused as a batch change."""
    space = {k: v for k, v in SPACE.items() if k not in ("batch_sizes", "allow_batch_change")}
    study = create_study(store, cluster="cpu-box", workload={**RECORDED["workload"], "batch_size": 64}, space=space,
                         settings=StudySettings(executor="replay", executor_options={"landscape": str(LANDSCAPE)},
                                                workdir=str(tmp_path / "runs")))  # fmt: skip
    assert study.space["batch_sizes"] == [64]


def test_quality_refuses_the_knob_that_costs_it():
    # Three paired seeds: precision alone costs nothing, batch alone costs 0.006 +- 0.0003 (no ladder
    # gain known, so it is judged at equal samples), together as much.
    def scores(*losses):
        return [{"logloss": loss, "auc": 0.8, "train_samples": 1000, "eval_samples": 100, "model_seed": i}
                for i, loss in enumerate(losses)]  # fmt: skip

    base = (0.500, 0.503, 0.498)
    variants = [Variant("baseline", None), Variant("tuned", None, True), Variant("only_precision", None),
                Variant("only_batch", None, True)]  # fmt: skip
    measured = {"baseline": scores(*base), "tuned": scores(0.5062, 0.5087, 0.5041),
                "only_precision": scores(0.5001, 0.5029, 0.4981), "only_batch": scores(0.5058, 0.5093, 0.5040)}  # fmt: skip
    evidence = judge(measured, ["precision", "batch"], variants, 0.002, None, cost_s=42.0)
    assert evidence.refused == ["batch"]
    assert evidence.unresolved == []
    assert evidence.delta == pytest.approx(0.006)
    assert evidence.cost_s == 42.0
    assert evidence.ci_low < evidence.delta < evidence.ci_high
    assert evidence.k == 3
    assert evidence.baseline_per_seed == list(base)
    assert evidence.seed_spread == pytest.approx(0.002517, abs=1e-5)
    assert evidence.knobs["precision"].verdict == "passed"
    within = judge({**measured, "tuned": measured["only_precision"], "only_batch": measured["only_precision"]},
                   ["precision", "batch"], variants, 0.002, None)  # fmt: skip
    assert within.refused == [] == within.unresolved


@pytest.mark.parametrize(
    ("climbed_to", "refused", "says"),
    [("baseline", [], "no knob gave a measurable gain"), ("tuned", ["batch"], "costs quality (batch:"),
     ("unresolved", [], "not shown to cost no quality (batch:")],
)  # fmt: skip
def test_a_published_baseline_says_why_nothing_was_kept(monkeypatch, climbed_to, refused, says):
    from autotuner.store import Candidate
    from autotuner.tuning import claim

    def row(id_: int, batch: int) -> Candidate:
        return Candidate(id=id_, env={}, fwd_precision="fp32", bwd_precision="fp32", batch_size=batch,
                         sharding="table_wise", num_threads=None, pipeline="sparse_dist")  # fmt: skip

    baseline, best = row(1, 512), row(2, 1024)
    settings = type("S", (), {"ladder_rounds": 5})()
    monkeypatch.setattr(claim, "climb", lambda ctx, base, target, steps: (base if climbed_to == "baseline" else target, None))  # fmt: skip
    unresolved = ["batch"] if climbed_to == "unresolved" else []
    monkeypatch.setattr(claim, "check", lambda ctx, base, top, steps: (Quality(refused=refused, unresolved=unresolved), base))  # fmt: skip
    outcome = claim.honest_claim(
        type("Ctx", (), {"settings": settings, "inert": {}})(), baseline, best, Outcome()
    )
    assert outcome.chosen_candidate == baseline.id
    assert says in (outcome.decision or "")


def test_a_one_step_ladder_is_the_confirmation_itself(store, tmp_path):
    # Only the batch differs between the baseline and the finalist: the ladder's one step is the
    # comparison the confirmation already made, so it reuses those rounds instead of new, noisier ones.
    space = {"precisions": [["fp32", "fp32"]], "batch_sizes": [64, 256], "allow_batch_change": True}
    study, final = run(store, tmp_path, space)
    (step,) = final.outcome["ladder"]
    assert step["step"] == "batch"
    assert step["rounds"] == final.outcome["rounds"] == 3
    assert step["speedup_vs_previous"] == final.outcome["speedup"]
    assert step["kept"]
    assert not [launch for launch in store.launches(study.id) if launch.kind == "ladder"]
