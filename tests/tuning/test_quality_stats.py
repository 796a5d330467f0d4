"""The convergence check's statistics, against a fake trainer whose losses are drawn from known
distributions: how often a knob with no effect is refused, how often a real cost is, how often the
interval covers the truth; time to quality on known curves; and the launch it plans (paired seeds,
a longer budget and the learning-rate rules for a batch change)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotuner.cli.claim_report import quality_line
from autotuner.executors import LocalExecutor
from autotuner.job.qcomms import tuned as tuned_of
from autotuner.space import load_space
from autotuner.store import LaunchKind, Store
from autotuner.tuning import StudySettings, create_study
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ingest import candidate_row
from autotuner.tuning.launch import spec_of
from autotuner.tuning.lease import Lease
from autotuner.tuning.outcome import LadderStep, Outcome, Quality, TimeToQuality
from autotuner.tuning.pairs import Setting
from autotuner.tuning.publish import lr_scale, publish
from autotuner.tuning.quality import (
    CHECKPOINTS,
    MAX_EXTENSION,
    Variant,
    check,
    extension,
    judge,
    samples_to_reach,
    time_to_quality,
)
from autotuner.tuning.stats import (
    NOT_RESOLVED,
    PASSED,
    REFUSED,
    Ratio,
    paired_delta,
    product,
    ratio_over,
    seeds_to_resolve,
    t_quantile,
)

DEFAULTS = load_space({})
LIMIT = DEFAULTS.max_logloss_delta  # 0.002
K = DEFAULTS.quality_seeds  # 3
# The demo's figures (bench "quality", a real 2-rank launch on its tables): the baseline's log loss moves
# by 0.0023 (sd) from seed to seed; fp8/bf16 comms, which change nothing that matters, move with their
# seed, the paired deltas' sd 0.0006. (Past a paired sd of ~0.0009 three seeds no longer refuse a 3x cost
# 95% of the time (97% at 0.0008, 70% at 0.0014): the interval is too wide, and says so with the k that would resolve it.)
SEED_SD, PAIR_SD, MEAN = 0.0023, 0.0006, 0.575
DRAWS = 200


def fake_trainer(rng: np.random.Generator, effect: float, k: int = K) -> dict[str, list[dict]]:
    """Baseline and variant under k seeds: a seed's draw moves both (the pairing), the variant's own
    noise and its true effect only it."""
    seed = rng.normal(0, SEED_SD, k)
    base = MEAN + seed
    variant = MEAN + seed + effect + rng.normal(0, PAIR_SD, k)

    def scores(losses):
        return [{"logloss": float(x), "auc": 0.76, "train_samples": 131072, "eval_samples": 16384, "model_seed": i}
                for i, x in enumerate(losses)]  # fmt: skip

    return {"baseline": scores(base), "tuned": scores(variant)}


def verdicts(effect: float, draws: int = DRAWS, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    variants = [Variant("baseline", None), Variant("tuned", None)]
    out = []
    for _ in range(draws):
        evidence = judge(fake_trainer(rng, effect), ["precision"], variants, LIMIT, None)
        assert evidence.k == K
        assert len(evidence.baseline_per_seed or []) == K
        out.append(evidence.knobs["precision"].verdict)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_knob_with_no_effect_is_passed_or_not_resolved_in_95_percent_of_draws(seed):
    seen = verdicts(0.0, seed=seed)
    assert seen.count(REFUSED) <= 0.05 * DRAWS, seen.count(REFUSED)
    assert seen.count(PASSED) > DRAWS / 2  # and mostly passed at the demo's spread, not left unresolved


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_true_cost_of_three_times_the_threshold_is_refused_in_95_percent_of_draws(seed):
    seen = verdicts(3 * LIMIT, seed=seed)
    assert seen.count(REFUSED) >= 0.95 * DRAWS, {v: seen.count(v) for v in set(seen)}


@pytest.mark.parametrize("effect", [0.0, 0.001, 3 * LIMIT])
def test_the_interval_covers_the_true_delta_95_percent_of_the_time(effect):
    rng = np.random.default_rng(42)
    variants = [Variant("baseline", None), Variant("tuned", None)]
    draws = 4000  # the coverage's own standard error: 0.34 points
    covered = 0
    for _ in range(draws):
        e = judge(fake_trainer(rng, effect), ["precision"], variants, LIMIT, None)
        covered += e.ci_low <= effect <= e.ci_high
    assert abs(covered / draws - 0.95) <= 0.02, covered / draws


def test_the_verdict_comes_from_the_interval():
    assert paired_delta([0.501, 0.5012, 0.5009], [0.5, 0.5, 0.5]).verdict(LIMIT) == PASSED  # all within
    wide = paired_delta([0.5, 0.509, 0.497], [0.5, 0.5, 0.5])
    assert wide.verdict(LIMIT) == NOT_RESOLVED
    assert wide.ci_high - wide.ci_low > LIMIT
    assert wide.k_to_resolve(LIMIT) == seeds_to_resolve(wide.sd, LIMIT) > K
    assert paired_delta([0.5031, 0.5033, 0.5029], [0.5, 0.5, 0.5]).verdict(LIMIT) == REFUSED  # above, narrow
    wholly_above = paired_delta([0.52, 0.522, 0.518], [0.5, 0.5, 0.5])  # wider than the limit, yet above it
    assert wholly_above.ci_high - wholly_above.ci_low > LIMIT
    assert wholly_above.verdict(LIMIT) == REFUSED
    narrow_over = paired_delta([0.5018, 0.5020, 0.5022], [0.5, 0.5, 0.5])  # upper end past the limit
    assert narrow_over.ci_high > LIMIT > narrow_over.ci_low
    assert narrow_over.verdict(LIMIT) == REFUSED


def test_seeds_to_resolve_is_the_first_k_whose_interval_fits():
    sd = 0.0015
    k = seeds_to_resolve(sd, LIMIT)
    assert k is not None
    assert 2 * t_quantile(k - 1) * sd / math.sqrt(k) <= LIMIT < 2 * t_quantile(k - 2) * sd / math.sqrt(k - 1)
    assert seeds_to_resolve(1.0, LIMIT) is None  # beyond MAX_SEEDS: said as such, not a number


def test_t_quantiles_are_students():
    assert t_quantile(2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(11) == pytest.approx(2.2010, abs=1e-4)
    assert t_quantile(10_000) == pytest.approx(1.9602, abs=1e-4)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        t_quantile(0)


# ------------------------------------------------------------------------------ time to quality


def curve(needs: float, budget: int = 131072, points: int = 8, final: float = 0.575) -> list[list[float]]:
    """A held-out curve that reaches `final` (the baseline's at `budget`) after `needs` x budget samples:
    loss = final + 0.2 * (1/x - 1/needs) at x budgets, every budget/4."""
    xs = [budget * (i + 1) / 4 for i in range(points)]
    return [[x, final + 0.2 * (budget / x - 1 / needs)] for x in xs]


def test_samples_to_reach_interpolates_between_checkpoints_and_says_never():
    points = [[100, 0.7], [200, 0.6], [300, 0.55]]
    assert samples_to_reach(points, 0.6) == 200
    assert samples_to_reach(points, 0.575) == pytest.approx(250)
    assert samples_to_reach(points, 0.8) == 100  # already there at the first checkpoint
    assert samples_to_reach(points, 0.5) is None


def test_time_to_quality_is_the_gain_times_the_sample_efficiency():
    budget = 131072
    base = [{"logloss": 0.575, "train_samples": budget} for _ in range(3)]
    # needs 1.25x the samples (interpolated between checkpoints, so a little more), 1.6x the throughput
    variant = [{"curve": curve(1.25 * f), "budget_samples": 2 * budget} for f in (0.98, 1.0, 1.02)]
    gain = Ratio.of_interval(1.6, 1.5, 1.7, 5)
    ttq = time_to_quality(variant, base, gain)
    assert ttq.efficiency == pytest.approx(0.8, rel=0.03)
    assert ttq.speedup == pytest.approx(1.6 * ttq.efficiency)
    assert ttq.ci_low < ttq.speedup < ttq.ci_high
    assert ttq.verdict == PASSED
    slow = time_to_quality(variant, base, Ratio.of_interval(1.1, 1.05, 1.15, 5))  # 0.88x: slower to quality
    assert slow.ci_high < 1
    assert slow.verdict == REFUSED
    never = time_to_quality([{"curve": curve(2.5), "budget_samples": 2 * budget}] * 3, base, gain)
    assert never.never
    assert never.speedup_at_most == pytest.approx(1.7 / 2)
    assert never.verdict == REFUSED


def test_a_bigger_batch_trains_as_far_as_its_gain_could_carry_it_within_bounds():
    assert extension(Ratio.of_interval(1.15, 1.1, 1.2, 5)) == 1.25
    assert extension(Ratio.of_interval(1.3, 1.22, 1.38, 5)) == 1.5  # 1.38 rounded up to a quarter budget
    assert extension(Ratio.of_interval(3.9, 3.5, 4.4, 5)) == MAX_EXTENSION == 1.5  # the cost bound
    assert extension(None) == 1.5


def test_a_product_interval_is_no_narrower_than_its_wider_part():
    a, b = Ratio.of_interval(1.33, 1.22, 1.46, 5), ratio_over([0.84, 0.98, 1.05])
    p = product(a, b)
    assert p.ratio == pytest.approx(a.ratio * b.ratio)
    assert math.log(p.ci_high / p.ci_low) >= math.log(b.ci_high / b.ci_low)


def test_the_batch_knob_is_judged_on_time_to_quality_not_at_equal_samples():
    # batch 2x: worse at equal samples (+0.004, refused there), but 1.6x the throughput and 1.1x the
    # samples to the baseline's log loss: 1.45x faster to the same quality, passed
    budget = 131072
    base = [{"logloss": 0.575 + d, "auc": 0.76, "train_samples": budget, "eval_samples": 16384} for d in
            (0.0, 0.002, -0.002)]  # fmt: skip
    variant = [{"logloss": b["logloss"] + 0.004 + e, "auc": 0.75, "train_samples": budget, "eval_samples": 16384,
                "curve": curve(1.1, final=b["logloss"]), "budget_samples": 2 * budget, "lr_scale": 1.0}
               for b, e in zip(base, (0.0, 0.0002, -0.0002), strict=True)]  # fmt: skip
    variants = [Variant("baseline", None), Variant("tuned", None, True, "none")]
    evidence = judge({"baseline": base, "tuned": variant}, ["batch"], variants, LIMIT,
                     Ratio.of_interval(1.6, 1.5, 1.7, 5))  # fmt: skip
    assert evidence.verdict == REFUSED  # at equal samples
    assert evidence.time_to_quality.speedup == pytest.approx(1.6 / 1.1, rel=0.03)
    assert evidence.knobs["batch"].verdict == PASSED
    assert evidence.refused == []


def test_the_tuned_config_is_judged_under_the_learning_rate_rule_its_batch_goes_out_with():
    budget = 131072
    base = [{"logloss": 0.575 + d, "auc": 0.76, "train_samples": budget, "eval_samples": 16384} for d in
            (0.0, 0.002, -0.002)]  # fmt: skip

    def trained(needs: float, cost: float, rule: str) -> list[dict]:
        return [{"logloss": b["logloss"] + cost, "auc": 0.76, "train_samples": budget, "eval_samples": 16384,
                 "curve": curve(needs, final=b["logloss"]), "budget_samples": 2 * budget,
                 "lr_scale": 2**0.5 if rule == "sqrt" else 1.0} for b in base]  # fmt: skip

    scores = {"baseline": base, "only_precision": [{**b, "logloss": b["logloss"] + 0.0001} for b in base],
              "tuned@none": trained(1.0, 0.0001, "none"), "tuned@sqrt": trained(1.1, 0.0003, "sqrt"),
              "only_batch@none": trained(1.4, 0.0, "none"), "only_batch@sqrt": trained(1.05, 0.0, "sqrt")}  # fmt: skip
    variants = [Variant("baseline", None), Variant("only_precision", None)]
    variants += [
        Variant(f"{name}@{rule}", None, True, rule)
        for name in ("tuned", "only_batch")
        for rule in ("none", "sqrt")
    ]
    evidence = judge(scores, ["precision", "batch"], variants, LIMIT, Ratio.of_interval(1.6, 1.5, 1.7, 5))
    assert evidence.time_to_quality.lr_scaling == "sqrt"  # the batch alone reached quality sooner under sqrt
    # tuned@none did better on its own, but sqrt is what a job gets with the batch: judged under sqrt
    assert evidence.tuned_per_seed == [x["logloss"] for x in scores["tuned@sqrt"]]
    assert evidence.delta == pytest.approx(0.0003)


# ------------------------------------------------------------------------------ the launch it plans


BASELINE = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 512, "sharding": "table_wise",
            "pipeline": "sparse_dist"}  # fmt: skip


@pytest.fixture
def ctx(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    workload = {"name": "w", "batch_size": 512, "dense": {"in_features": 13, "arch": [16], "over_arch": [16, 1]},
                "tables": [{"name": "t0", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}]}  # fmt: skip
    space = {"precisions": [["fp32", "fp32"], ["int8", "int8"]], "batch_sizes": [512, 1024],
             "allow_batch_change": True, "quality_seeds": 4, "lr_scaling": ["none", "sqrt"]}  # fmt: skip
    settings = StudySettings(
        executor="local", trials=1, quality_samples=65536, workdir=str(tmp_path / "runs")
    )
    study = create_study(store, cluster="c", workload=workload, space=space, settings=settings)
    yield StudyContext.load(store, study.id, LocalExecutor(), Lease(store, study.id))
    store.dispose()


def test_the_quality_launch_pairs_seeds_and_tries_each_lr_rule(ctx, monkeypatch):
    from autotuner.tuning import quality

    budget, launched = 65536, []

    def fake_launch(ctx, plan, search):
        """Train nothing: losses from known distributions (sqrt's batch reaches quality sooner)."""
        spec = spec_of(ctx, plan)
        launched.append(spec)
        launch = ctx.store.add_launch(study_id=ctx.study_id, kind=plan.kind, env=plan.env, spec=spec,
                                      executor="fake", attempt=1, nnodes=None)  # fmt: skip
        rows = []
        for i, cand in enumerate(spec["candidates"]):
            base = 0.575 + 0.002 * cand["model_seed"]
            needs = 1.0 if cand["batch_size"] == 512 else 1.4 if cand.get("lr_scale") is None else 1.05
            measured = {**{k: cand[k] for k in ("fwd_precision", "bwd_precision", "batch_size")}, "status": "ok",
                        "quality": {
                "logloss": base + 0.0001 * (cand["fwd_precision"] == "int8"), "auc": 0.76, "train_samples": budget,
                "eval_samples": 8192, "model_seed": cand["model_seed"], "lr_scale": cand.get("lr_scale", 1.0),
                "budget_samples": cand.get("train_samples", budget),
                "curve": curve(needs, budget, 4 * cand.get("train_samples", budget) // budget, base)}}  # fmt: skip
            rows.append(candidate_row(ctx, launch, i, cand, measured, None))
        ctx.store.add_candidates(rows)
        ctx.store.update_launch(launch.id, state="succeeded", summary={"wall_s": 12.5})

    monkeypatch.setattr(quality, "run_launch", fake_launch)
    base = Setting({}, ctx.baseline_point)
    tuned = base.but(fwd_precision="int8", bwd_precision="int8", batch_size=1024)
    ladder = [
        LadderStep(step="batch", kept=True, speedup_vs_previous=1.15, ci_low=1.1, ci_high=1.2, rounds=5)
    ]
    evidence, kept = check(ctx, base, tuned, ladder)
    (spec,) = launched
    assert spec["quality"]["checkpoints"] == CHECKPOINTS
    assert spec["quality"]["train_samples"] == budget
    cands = spec["candidates"]
    # baseline, tuned x 2 rules, precision alone, batch alone x 2 rules: each under seeds 0..3, paired
    assert len(cands) == 6 * 4
    assert [c["model_seed"] for c in cands[:8]] == [0, 1, 2, 3] * 2
    batch = [c for c in cands if c["batch_size"] == 1024]
    assert sorted(c.get("lr_scale") or 1.0 for c in batch) == [1.0] * 8 + [pytest.approx(2**0.5)] * 8
    assert all(c["train_samples"] == int(budget * 1.25) for c in batch)  # as far as the gain could carry it
    assert all(
        cands[c["stop_at"]] == {**BASELINE, "model_seed": c["model_seed"]} for c in batch
    )  # its seed's
    assert all("train_samples" not in c and "lr_scale" not in c for c in cands if c["batch_size"] == 512)
    assert evidence.k == 4
    assert evidence.cost_s == 12.5
    assert evidence.time_to_quality.lr_scaling == "sqrt"  # the rule that got there sooner
    none = evidence.variants["only_batch@none"].time_to_quality  # 1.4x the samples: not within 1.25x
    assert none.never
    assert none.verdict == REFUSED
    assert none.speedup_at_most == pytest.approx(1.2 / 1.25)
    assert evidence.knobs["precision"].verdict == PASSED
    assert evidence.knobs["batch"].verdict == PASSED
    assert kept == tuned
    assert ctx.store.launches(ctx.study_id)[-1].kind == LaunchKind.QUALITY
    # The batch travels with the rule it was shown under: a job gets lr x sqrt(1024 / 512), not its old rate.
    (row,) = [r for r in ctx.store.candidates(ctx.study_id) if r.batch_size == 1024 and r.fwd_precision == "int8"
              and r.metrics["quality"]["model_seed"] == 0 and r.metrics["quality"]["lr_scale"] != 1.0]  # fmt: skip
    config = ctx.store.public_config(publish(ctx, row, Outcome(quality=evidence)))
    assert config["lr_scale"] == pytest.approx(2**0.5)
    assert config["exports"]["AUTOTUNER_LR_SCALE"] == "1.41421"
    assert tuned_of(config["exports"]).lr_scale == pytest.approx(2**0.5, rel=1e-5)


def test_a_config_keeps_the_jobs_rate_unless_its_batch_was_shown_under_another():
    ttq = TimeToQuality(lr_scaling="linear")
    assert lr_scale(Outcome(quality=Quality(time_to_quality=ttq)), 2048, 512) == 4.0
    assert lr_scale(Outcome(quality=Quality(time_to_quality=ttq)), 512, 512) is None  # the batch was dropped
    none = TimeToQuality(lr_scaling="none")
    assert lr_scale(Outcome(quality=Quality(time_to_quality=none)), 2048, 512) is None
    assert lr_scale(Outcome(quality=Quality(skipped="replay")), 2048, 512) is None  # never trained: no rule
    assert lr_scale(Outcome(), 2048, 512) is None


# ------------------------------------------------------------------------------ the best of several rules


def best_of_rules_passes(draws: int, rules: tuple[str, ...], seed: int = 7) -> float:
    """How often a batch change whose time to quality is truly 1.0x (1.2x the samples/s, 1/1.2 as
    sample-efficient under every learning-rate rule) passes, when each rule is trained and the best
    taken. The rules share the seeds (the same data order): their efficiencies move together in part."""
    rng = np.random.default_rng(seed)
    budget, gain_true = 131072, 1.2
    base = [{"logloss": MEAN, "auc": 0.76, "train_samples": budget, "eval_samples": 16384} for _ in range(K)]
    variants = [Variant("baseline", None), *(Variant(f"tuned@{r}", None, True, r) for r in rules)]
    passed = 0
    for _ in range(draws):
        gain = ratio_over(list(np.exp(rng.normal(math.log(gain_true), 0.03, 6))))  # a ladder step's rounds
        seeds = rng.normal(0, 0.05, K)
        scores = {"baseline": base}
        for r in rules:
            needs = gain_true * np.exp(seeds + rng.normal(0, 0.05, K))
            # a straight curve through the baseline's log loss at `needs` budgets: read back exactly
            scores[f"tuned@{r}"] = [
                {"logloss": MEAN, "auc": 0.76, "train_samples": budget, "eval_samples": 16384,
                 "budget_samples": 2 * budget, "lr_scale": 1.0,
                 "curve": [[x, MEAN + 0.01 * (n - x / budget)] for x in budget * np.arange(1, 9) / 4]}
                for n in needs
            ]  # fmt: skip
        evidence = judge(scores, ["batch"], variants, LIMIT, gain)
        passed += evidence.knobs["batch"].verdict == PASSED
    return passed / draws


def test_the_best_of_three_learning_rate_rules_passes_a_change_with_no_gain_no_more_often_than_one_rule():
    draws = 4000  # a rate of 2.5% has a standard error of 0.25 points here
    one = best_of_rules_passes(draws, ("none",))
    three = best_of_rules_passes(draws, ("none", "sqrt", "linear"))
    # One interval's upper side: 2.5% nominal, 1.1% measured (the product's interval takes the fewer
    # degrees of freedom). The best of three at 95% each passed 2.3%, twice the one rule's (the code
    # before); at 1 - 5%/3 each (Bonferroni, conservative for rules that move together) 0.2%.
    assert one <= 0.025 + 0.0075, one
    assert three <= one, (three, one)


def test_each_rule_of_several_is_judged_at_the_familys_confidence():
    budget = 131072
    base = [{"logloss": 0.575, "auc": 0.76, "train_samples": budget, "eval_samples": 16384} for _ in range(3)]
    trained = [{"logloss": 0.575, "auc": 0.76, "train_samples": budget, "eval_samples": 16384, "lr_scale": 1.0,
                "curve": curve(1.1 * f), "budget_samples": 2 * budget} for f in (0.98, 1.0, 1.02)]  # fmt: skip
    gain = Ratio.of_interval(1.6, 1.5, 1.7, 5)
    rules = ("none", "sqrt", "linear")
    variants = [Variant("baseline", None), *(Variant(f"tuned@{r}", None, True, r) for r in rules)]
    several = judge(
        {"baseline": base, **{f"tuned@{r}": trained for r in rules}}, ["batch"], variants, LIMIT, gain
    )
    one = judge({"baseline": base, "tuned": trained}, ["batch"], [variants[0], Variant("tuned", None, True)],
                LIMIT, gain)  # fmt: skip
    wide, narrow = several.time_to_quality, one.time_to_quality
    assert narrow.confidence == 0.95
    assert wide.confidence == pytest.approx(1 - 0.05 / 3)
    assert wide.speedup == pytest.approx(narrow.speedup)  # the same figure, a wider interval around it
    assert wide.ci_low < narrow.ci_low
    assert wide.ci_high > narrow.ci_high
    assert several.knobs["batch"].confidence == several.confidence == pytest.approx(1 - 0.05 / 3)
    # and the words say so, where a plain 95% interval says nothing more
    said = quality_line(several)
    assert f"[{wide.ci_low:.2f}-{wide.ci_high:.2f}, 98.3%: the best of 3 learning-rate rules]" in said
    assert f"[{narrow.ci_low:.2f}-{narrow.ci_high:.2f}]" in quality_line(one)
    assert "learning-rate rules" not in quality_line(one)
