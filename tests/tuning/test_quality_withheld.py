"""What the convergence check publishes is only what it trained and judged (found by a statistics
review): a mix of knobs never trained together, training knobs of a study that cannot train, and knobs
whose models failed or diverged are withheld, each said in words; and a bigger batch's time to quality
reads the baseline's cost off its own curve, the same way as the variant's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from autotuner.cli.claim_report import quality_line
from autotuner.executors import LocalExecutor
from autotuner.executors.results import candidate_problem
from autotuner.store import Store
from autotuner.tuning import StudySettings, create_study
from autotuner.tuning.context import StudyContext
from autotuner.tuning.launch import spec_of
from autotuner.tuning.lease import Lease
from autotuner.tuning.outcome import LadderStep
from autotuner.tuning.pairs import Setting
from autotuner.tuning.quality import Variant, check, judge, time_to_quality, unjudged
from autotuner.tuning.stats import NOT_RESOLVED, PASSED, REFUSED, Ratio
from tests.tuning.test_quality_stats import ctx  # noqa: F401 (a fixture)

LIMIT = 0.002
BASE = (0.500, 0.503, 0.498)  # the baseline's log loss under seeds 0, 1, 2
# batch refused alone; the mix of all three costs far more than any one alone
COST = {"tuned": 0.030, "only_precision": 0.0001, "only_batch": 0.006, "only_pipeline": -0.0001}  # fmt: skip


def scores(cost: float) -> list[dict]:
    return [{"logloss": b + cost, "auc": 0.8, "train_samples": 1000, "eval_samples": 100, "model_seed": i}
            for i, b in enumerate(BASE)]  # fmt: skip


# ------------------------------------------------------------------------------ a mix never trained


def test_two_knobs_that_passed_alone_are_not_published_together_untrained():
    # precision and pipeline pass alone, batch is refused: the pair precision + pipeline was never
    # trained (the mix of all three costs 0.03), so only one of them goes out
    variants = [Variant(name, None, name == "only_batch") for name in ["baseline", *COST]]
    measured = {"baseline": scores(0.0), **{name: scores(cost) for name, cost in COST.items()}}
    knobs = ["precision", "batch", "pipeline"]
    evidence = judge(measured, knobs, variants, LIMIT, None)
    assert evidence.refused == ["batch"]
    assert evidence.unresolved == ["pipeline"]  # the first of the two in the default rank is kept
    assert {k: v.verdict for k, v in evidence.knobs.items()} == {"precision": PASSED, "batch": REFUSED,
                                                                 "pipeline": PASSED}  # fmt: skip
    line = quality_line(evidence)
    assert "pipeline: costs -0.0001 [-0.0001, -0.0001]: passed alone, but never trained with precision: " \
           "not resolved" in line  # fmt: skip
    assert "precision: costs +0.0001 [+0.0001, +0.0001]: passed (within 0.002)" in line
    ranked = judge(measured, knobs, variants, LIMIT, None, rank=["pipeline", "batch", "precision"])
    assert (ranked.refused, ranked.unresolved) == (["batch"], ["precision"])
    # all three pass alone and together: the mix was trained, all three go out
    fine = {**measured, "tuned": scores(0.0002), "only_batch": scores(0.0001)}
    together = judge(fine, knobs, variants, LIMIT, None)
    assert (together.refused, together.unresolved) == ([], [])


def test_the_check_keeps_the_knob_with_the_larger_ladder_gain_of_a_pair_never_trained(ctx, monkeypatch):  # noqa: F811
    def cost(cand: dict) -> float:  # int8 costs next to nothing, batch 1024 0.006, the pipeline nothing
        return 0.0001 * (cand["fwd_precision"] == "int8") + 0.006 * (cand["batch_size"] != 512)

    launched = _fake_quality_launch(ctx, monkeypatch, cost)
    base = Setting({}, ctx.baseline_point)
    tuned = base.but(fwd_precision="int8", bwd_precision="int8", batch_size=1024, pipeline="none")
    ladder = [LadderStep(step=s, kept=True, speedup_vs_previous=g, ci_low=g - 0.02, ci_high=g + 0.02, rounds=5)
              for s, g in (("precision", 1.05), ("batch", 1.3), ("pipeline", 1.2))]  # fmt: skip
    evidence, kept = check(ctx, base, tuned, ladder)
    assert launched  # the models were trained
    assert evidence.knobs["precision"].verdict == evidence.knobs["pipeline"].verdict == PASSED
    assert evidence.knobs["batch"].verdict == NOT_RESOLVED  # never reached the baseline's loss within 1.5x
    assert (evidence.refused, evidence.unresolved) == ([], ["precision", "batch"])
    assert kept == base.but(pipeline="none")  # the pipeline gained more on the ladder than precision


def _fake_quality_launch(ctx, monkeypatch, cost, fail=None):  # noqa: F811
    """The quality launch, training nothing: each model's log loss is its seed's baseline + cost(cand);
    `fail(cand)` -> an error records that model failed."""
    from autotuner.tuning import quality

    launched = []

    def fake_launch(ctx, plan, search):
        spec = spec_of(ctx, plan)
        launched.append(spec)
        launch = ctx.store.add_launch(study_id=ctx.study_id, kind=plan.kind, env=plan.env, spec=spec,
                                      executor="fake", attempt=1, nnodes=None)  # fmt: skip
        rows = []
        for i, c in enumerate(spec["candidates"]):
            loss = 0.575 + 0.002 * c["model_seed"]
            row = {"study_id": ctx.study_id, "launch_id": launch.id, "index": i, "kind": plan.kind, "env": plan.env,
                   "fwd_precision": c["fwd_precision"], "bwd_precision": c["bwd_precision"],
                   "batch_size": c["batch_size"], "sharding": "table_wise", "pipeline": c.get("pipeline")}  # fmt: skip
            error = fail(c) if fail else None
            curve = [[16384 * (k + 1), loss + cost(c) + 0.01 * (3 - k)] for k in range(4)]
            rows.append({**row, "state": "failed", "error": error, "metrics": {}} if error else
                        {**row, "state": "ok", "metrics": {"quality": {
                            "logloss": loss + cost(c), "auc": 0.8, "train_samples": 65536, "eval_samples": 8192,
                            "model_seed": c["model_seed"], "curve": curve, "budget_samples": 65536}}})  # fmt: skip
        ctx.store.finish_launch(launch.id, rows, state="succeeded")

    monkeypatch.setattr(quality, "run_launch", fake_launch)
    return launched


# ------------------------------------------------------------------------------ models that failed


def non_finite(cand: dict, loss: float) -> str:
    """The error a model's result gets from the result check when its log loss is `loss`."""
    measured = {**{k: cand[k] for k in ("fwd_precision", "bwd_precision", "batch_size")}, "status": "ok",
                "quality": {"logloss": loss, "auc": 0.8, "train_samples": 65536, "eval_samples": 8192}}  # fmt: skip
    return f"result unusable: {candidate_problem(measured, cand, 1, None)}"


@pytest.mark.parametrize("loss", [math.nan, math.inf])
def test_a_model_that_diverged_refuses_its_knob_and_says_what_failed(ctx, monkeypatch, loss):  # noqa: F811
    _fake_quality_launch(ctx, monkeypatch, lambda c: 0.0,
                         fail=lambda c: non_finite(c, loss) if c["fwd_precision"] == "int8" and c["model_seed"] == 1
                         else None)  # fmt: skip
    base = Setting({}, ctx.baseline_point)
    evidence, kept = check(ctx, base, base.but(fwd_precision="int8", bwd_precision="int8"))
    assert (evidence.refused, evidence.unresolved) == (["precision"], [])
    assert kept == base
    assert "succeeded" not in evidence.skipped
    assert evidence.skipped.startswith("1 of 8 models of the quality launch failed (tuned seed 1: result unusable: "
                                       "candidate 1: quality.logloss is ")  # fmt: skip
    assert quality_line(evidence).endswith("its model diverged: its knobs are refused) -> refused: precision")


def test_a_model_that_crashed_leaves_the_knobs_not_resolved_naming_the_error(ctx, monkeypatch):  # noqa: F811
    _fake_quality_launch(ctx, monkeypatch, lambda c: 0.0,
                         fail=lambda c: "killed by signal 9" if c["batch_size"] == 1024 else None)  # fmt: skip
    base = Setting({}, ctx.baseline_point)
    tuned = base.but(fwd_precision="int8", bwd_precision="int8", batch_size=1024)
    evidence, kept = check(ctx, base, tuned)
    assert evidence.refused == []
    assert evidence.unresolved == ["precision", "batch"]
    assert kept == base
    # tuned and batch alone under 2 rules x 4 seeds each: 16 of the 24 models
    assert evidence.skipped.startswith("16 of 24 models of the quality launch failed (tuned@none seed 0: "
                                       "killed by signal 9; ")  # fmt: skip
    assert "; 13 more)" in evidence.skipped
    assert "diverged" not in evidence.skipped


# ------------------------------------------------------------------------------ a check that cannot train


@pytest.fixture
def sparse_ctx(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    workload = {"name": "w", "batch_size": 512,
                "tables": [{"name": "t0", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}]}  # fmt: skip
    space = {"precisions": [["fp32", "fp32"], ["int8", "int8"]], "batch_sizes": [512, 2048],
             "allow_batch_change": True}  # fmt: skip
    settings = StudySettings(executor="local", trials=1, workdir=str(tmp_path / "runs"))
    study = create_study(store, cluster="c", workload=workload, space=space, settings=settings)
    yield StudyContext.load(store, study.id, LocalExecutor(), Lease(store, study.id))
    store.dispose()


def test_a_workload_with_no_dense_part_publishes_no_training_change(sparse_ctx, monkeypatch):
    from autotuner.tuning import quality

    monkeypatch.setattr(quality, "run_launch", lambda *a: pytest.fail("a check that cannot train launched"))
    base = Setting({"NCCL_NSOCKS_PERTHREAD": "4"}, sparse_ctx.baseline_point)
    tuned = base.but(fwd_precision="int8", bwd_precision="int8", batch_size=2048)
    evidence, kept = check(sparse_ctx, base, tuned)
    assert kept == base  # neither int8 nor batch 2048 goes out unjudged
    assert evidence.unresolved == ["precision", "batch"]
    assert quality_line(evidence) == ("quality: not checked (the workload has no dense part: nothing trains to a "
                                      "loss) -> not resolved: precision, batch")  # fmt: skip


# ------------------------------------------------------------------------------ time to quality


B = 131072


def _base(curve: list[list[float]]) -> dict:
    return {"logloss": curve[-1][1], "train_samples": B, "curve": curve}


def test_a_copy_of_the_baseline_is_exactly_as_sample_efficient():
    # a flat tail that wobbles: the first crossing of the final log loss is before the budget
    curves = [[[B / 4, 0.60], [B / 2, 0.5745], [3 * B / 4, 0.5760], [B, 0.5750]],
              [[B / 4, 0.61], [B / 2, 0.5780], [3 * B / 4, 0.5770], [B, 0.5775]],
              [[B / 4, 0.60], [B / 2, 0.5730], [3 * B / 4, 0.5742], [B, 0.5740]]]  # fmt: skip
    same = [{"curve": c, "budget_samples": B} for c in curves]
    ttq = time_to_quality(same, [_base(c) for c in curves], Ratio.of_interval(1.2, 1.15, 1.25, 5))
    assert ttq.efficiency == pytest.approx(1.0)
    assert ttq.speedup == pytest.approx(1.2)


def test_identical_noisy_curves_give_an_efficiency_centred_on_1():
    rng, true, effs = np.random.default_rng(0), [0.60, 0.577, 0.5755, 0.575, 0.575, 0.575], []
    for _ in range(600):
        noisy = [[[B * (i + 1) / 4, v + rng.normal(0, 0.001)] for i, v in enumerate(true)] for _ in range(6)]
        base, variant = (
            [_base(c[:4]) for c in noisy[:3]],
            [{"curve": c, "budget_samples": 1.5 * B} for c in noisy[3:]],
        )
        ttq = time_to_quality(variant, base, None)
        if ttq.efficiency is not None:  # else a seed never reached its baseline's loss by 1.5x
            effs.append(ttq.efficiency)
    assert len(effs) > 150
    assert 0.97 < float(np.median(effs)) < 1.03  # was 1.19: the baseline charged its whole budget
    assert 0.4 < float(np.mean(np.array(effs) < 1)) < 0.6  # was never below 1


def test_the_verdict_on_a_never_reached_batch_is_bounded_by_the_baseline_own_samples():
    curve = [[B / 4, 0.60], [B / 2, 0.575], [3 * B / 4, 0.5752], [B, 0.575]]  # there at half the budget
    never = [{"curve": [[x, 0.6] for x, _ in curve], "budget_samples": B} for _ in range(3)]
    ttq = time_to_quality(never, [_base(curve)] * 3, Ratio.of_interval(1.6, 1.5, 1.7, 5))
    assert ttq.never
    assert ttq.speedup_at_most == pytest.approx(1.7 * 0.5)
    assert ttq.verdict == REFUSED  # against the budget it was "not resolved": at most 1.7x


# ------------------------------------------------------------------------------ the words of a refusal


def test_a_refusal_on_a_narrow_interval_says_it_is_not_shown_within_the_limit_not_that_it_exceeds_it():
    # +0.0014, +0.0016, +0.0018: 0.0016 [0.0011, 0.0021]; 80% of the allowance, nothing shows more
    variants = [Variant("baseline", None), Variant("tuned", None)]
    narrow = [
        {**s, "logloss": s["logloss"] + d} for s, d in zip(scores(0.0), (0.0014, 0.0016, 0.0018), strict=True)
    ]
    evidence = judge({"baseline": scores(0.0), "tuned": narrow}, ["precision"], variants, LIMIT, None)
    assert evidence.refused == ["precision"]
    line = quality_line(evidence)
    assert "refused (not shown within 0.002, on an interval narrower than that)" in line
    assert "more than" not in line  # was "refused (more than 0.002)"
    shown = judge({"baseline": scores(0.0), "tuned": scores(0.006)}, ["precision"], variants, LIMIT, None)
    assert "refused (more than 0.002)" in quality_line(shown)  # its lower end above: shown to exceed


def test_a_diverged_mix_of_several_knobs_blames_none_of_them_alone():
    """The tuned mix (under one learning-rate rule) diverged while precision alone trained fine: that
    refused precision too, said as costing quality. Only a knob whose own model diverged is refused."""
    launch = SimpleNamespace(error=None, state="succeeded")
    nan = "result unusable: candidate 3: quality.logloss is NaN, expected a finite number"
    mix = unjudged(launch, [("tuned@linear", 0, nan)], ["precision", "batch"], 12)  # type: ignore[arg-type]
    assert (mix.refused, mix.unresolved) == ([], ["precision", "batch"])
    assert "are refused" not in (mix.skipped or "")
    own = unjudged(launch, [("only_batch@linear", 0, nan)], ["precision", "batch"], 12)  # type: ignore[arg-type]
    assert (own.refused, own.unresolved) == (["batch"], ["precision"])
