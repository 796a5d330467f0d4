"""The convergence check: what the tuned config costs in quality, decided with statistics.

One launch of kind `quality` trains, on the same samples each, fresh models of the baseline, the
tuned config and, with several training-changing knobs (precision, batch, pipeline), each of them
alone, every one under the same k model seeds (`quality_seeds`, default 3). A seed fixes both the
initialization and the order of the samples, so the baseline and a variant of one seed differ only
by what the variant changes: each seed gives a paired log-loss delta, and the k deltas a mean with a
95% t-interval (trials over the pairs). The verdict comes from the interval (stats.Delta.verdict):
passed when its upper end is within `max_logloss_delta`; refused when the cost is shown to exceed
it, or when the interval is narrower than the limit yet reaches past it (not shown within: a cost
inside the limit can be refused so, in about 7% of draws at half the limit and the README's spread);
"not resolved" when the interval is too wide to tell, with the k that would resolve it at the spread
seen. Only what passed is published, and only as it was trained: with three training knobs
the models are the baseline, the three together and each alone, so when one is refused or not
resolved the other two were never trained as a pair, and only the one of them with the largest
ladder gain goes out (the other is "not resolved": never trained with it). A check that cannot train
(why_no_training: no dense part, quality_samples 0) publishes none of the training knobs (a replay of
recorded timings, which trains nothing, is a rehearsal: its knobs go through, "not checked"); one
whose launch or models failed measured nothing, and the study publishes nothing (claim.py: the config
served before stays); a model whose log loss was not finite (it diverged) refuses its knob.

A bigger batch is judged by time to quality, not by quality at equal samples: its model trains on
past the common budget, scored along the way, and the samples it needs to reach the baseline's final
log loss (per seed, interpolated between checkpoints), against the samples the baseline's own curve
needs to reach it (read the same way), give a sample-efficiency ratio; times the
ladder's throughput gain for the batch step, that is its time-to-quality speedup, with a 95%
interval, and the verdict is on that product. A learning-rate rule for the batch change
(`lr_scaling`: none, sqrt, linear) is a knob of its own: each rule the space lists is trained, and
the best one is taken; with m rules every interval of theirs is at 1 - 5%/m, so that taking the best
passes no more often than one rule would. The task is a proxy (trials/convergence.py: a hidden teacher over the workload's
tables), or the user's data with `quality_data: "module:function"`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.executors.base import LaunchState
from autotuner.executors.results import clip
from autotuner.store import Candidate, Launch, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import GROUPS
from autotuner.tuning.launch import run_launch
from autotuner.tuning.outcome import Gain, KnobQuality, LadderStep, Quality, TimeToQuality, VariantFigures
from autotuner.tuning.pairs import Setting
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.settings import MAX_EXTENSION, eval_samples
from autotuner.tuning.stats import (
    CONFIDENCE,
    NOT_RESOLVED,
    PASSED,
    REFUSED,
    Ratio,
    family_confidence,
    paired_delta,
    product,
    ratio_over,
)
from autotuner.tuning.study import why_no_training

KNOBS = ("precision", "batch", "pipeline")  # what changes the training, not only its speed
LR_POWER = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}  # lr x (batch / the job's batch) ** power
CHECKPOINTS = 4  # held-out scores per common budget, for a launch with a batch change
MIN_EXTENSION = 1.25  # how far past the budget a bigger batch trains, at least (at most MAX_EXTENSION)
SYNTHETIC = "synthetic teacher task (a proxy: trials/convergence.py)"
# How the result check (executors/results.py) words a log loss that is NaN or infinite: a model that
# diverged, which is a quality cost of what it trained, not a failure to measure one.
NON_FINITE_LOSS = re.compile(r"quality\.logloss is (NaN|-?Infinity)\b")


@dataclass(frozen=True)
class Variant:
    """One model trained in the quality launch under every seed: a setting, and for a batch change
    its learning-rate rule."""

    name: str  # "baseline", "tuned", "only_batch", ...; "@rule" appended when several rules are tried
    setting: Setting | None  # None: scores judged without a launch (bench, tests)
    batch_change: bool = False
    lr_rule: str | None = None

    @property
    def planned(self) -> Setting:
        assert self.setting is not None, "a variant without a setting is judged, never launched"
        return self.setting


def check(
    ctx: StudyContext, baseline: Setting, tuned: Setting, ladder: Sequence[LadderStep] = ()
) -> tuple[Quality, Setting]:
    """The quality evidence, and the tuned setting without the knobs that did not pass."""
    knobs = [k for k in KNOBS if GROUPS[k][0](baseline) != GROUPS[k][0](tuned)]
    if not knobs:
        same = "the tuned config trains as the baseline does (no precision, batch or pipeline change)"
        return Quality(skipped=same), tuned
    cannot = why_no_training(ctx.settings, ctx.workload)
    if cannot and ctx.settings.executor == "replay":
        # A rehearsal on recorded timings (tests, demos, the search benchmark), labelled as such: it
        # goes through as recorded, said "not checked".
        return Quality(skipped=cannot), tuned
    if cannot:  # nothing can say what they cost: the training knobs stay the job's own, said as such
        return Quality(skipped=cannot, unresolved=list(knobs)), _without(tuned, knobs, baseline)
    variants = _variants(ctx, baseline, tuned, knobs)
    gain = batch_gain(ladder)
    seeds = list(range(ctx.space.quality_seeds))
    ctx.progress.on_phase("quality")
    launch, scores, failed = _scores(ctx, variants, seeds, gain)
    if scores is None:  # it should have run and did not: nothing it was to judge is adopted unjudged
        evidence = unjudged(launch, failed, knobs, len(variants) * len(seeds))
        return evidence, _without(tuned, knobs, baseline)
    summary = launch.summary or {}
    evidence = judge(scores, knobs, variants, ctx.space.max_logloss_delta, gain, rank=by_gain(knobs, ladder),
                     data=ctx.space.quality_data or SYNTHETIC, cost_s=summary.get("wall_s"))  # fmt: skip
    return evidence, _without(tuned, evidence.refused + evidence.unresolved, baseline)


def _without(tuned: Setting, knobs: Sequence[str], baseline: Setting) -> Setting:
    """`tuned` with these knobs back at the baseline's values."""
    for knob in knobs:
        tuned = GROUPS[knob][1](tuned, baseline)
    return tuned


def by_gain(knobs: Sequence[str], ladder: Sequence[LadderStep]) -> list[str]:
    """The knobs, the one whose ladder step gained most first (unmeasured ones last, in KNOBS order)."""
    gains = {s.step: s.speedup_vs_previous for s in ladder if s.kept and s.speedup_vs_previous is not None}
    return sorted(knobs, key=lambda k: -gains.get(k, 0.0))


def unjudged(launch: Launch, failed: list[tuple[str, int, str]], knobs: list[str], models: int) -> Quality:
    """A check that did not give every model a score judges nothing: each training knob is not
    resolved, with what failed in words, except that a model whose log loss was not finite (it
    diverged) refuses the knob it trained alone with (the tuned mix with one knob: that one; a mix of
    several: none of them alone is to blame, all not resolved; the baseline: none). `failed` says that
    something was not measured (the launch, or a model that failed otherwise than by diverging): the
    study then publishes nothing (claim.py)."""
    if not failed:
        return Quality(skipped=f"the convergence check did not run: {launch.error or launch.state}",
                       unresolved=list(knobs), failed=True)  # fmt: skip
    diverged = {name.split("@")[0] for name, _, error in failed if NON_FINITE_LOSS.search(error)}
    alone = {k: "tuned" if len(knobs) == 1 else f"only_{k}" for k in knobs}  # the model of the knob alone
    refused = [k for k in knobs if alone[k] in diverged]
    shown = "; ".join(f"{name} seed {seed}: {clip(error, 200)}" for name, seed, error in failed[:3])
    more = f"; {len(failed) - 3} more" if len(failed) > 3 else ""
    why = f"{len(failed)} of {models} models of the quality launch failed ({shown}{more})"
    if refused:
        why += "; a log loss that is not finite means its model diverged: its knobs are refused"
    # A model that failed otherwise (an outage, a crash) measured nothing: that is no verdict on its knobs.
    lost = any(not NON_FINITE_LOSS.search(error) for _, _, error in failed)
    return Quality(skipped=why, refused=refused, unresolved=[k for k in knobs if k not in refused],
                   failed=lost or None)  # fmt: skip


def _variants(ctx: StudyContext, baseline: Setting, tuned: Setting, knobs: list[str]) -> list[Variant]:
    settings = {"baseline": baseline, "tuned": tuned}
    if len(knobs) > 1:
        settings.update({f"only_{k}": _alone(k, baseline, tuned) for k in knobs})
    out = []
    for name, setting in settings.items():
        if name != "baseline" and setting.point.batch_size != baseline.point.batch_size:
            rules = ctx.space.lr_scaling
            out += [
                Variant(name if len(rules) == 1 else f"{name}@{rule}", setting, True, rule) for rule in rules
            ]
        else:
            out.append(Variant(name, setting))
    return out


def _alone(knob: str, baseline: Setting, tuned: Setting) -> Setting:
    """The baseline with the tuned `knob`; with the tuned sharding too where the knob cannot run on the
    baseline's (int8 comms onto a reduce-scatter sharding: InProcPoint.problem)."""
    alone = GROUPS[knob][1](baseline, tuned)
    return GROUPS["sharding"][1](alone, tuned) if alone.point.problem() else alone


def batch_gain(ladder: Sequence[LadderStep]) -> Ratio | None:
    """The throughput gain of the ladder's batch step, with its interval (None: not measured)."""
    for step in ladder:
        if step.step == "batch" and step.ci_low is not None:
            assert (
                step.speedup_vs_previous is not None and step.ci_high is not None and step.rounds is not None
            )
            return Ratio.of_interval(step.speedup_vs_previous, step.ci_low, step.ci_high, step.rounds)
    return None


def extension(gain: Ratio | None) -> float:
    """How far past the common budget a bigger batch trains: as far as its throughput gain could
    carry it (the upper end of the interval), so a model that has not reached the baseline's log loss
    by then would be slower to it even at the best gain; in steps of the checkpoint spacing."""
    wanted = 1.5 if gain is None else gain.ci_high
    return min(MAX_EXTENSION, max(MIN_EXTENSION, math.ceil(wanted * CHECKPOINTS) / CHECKPOINTS))


def _scores(
    ctx: StudyContext, variants: list[Variant], seeds: list[int], gain: Ratio | None
) -> tuple[Launch, dict[str, list[dict[str, Any]]] | None, list[tuple[str, int, str]]]:
    """Each variant's score under each seed, from the study's quality launch (run now, or by the runner
    before a restart); None when some model has none, with (variant, seed, error) for each of those."""
    budget = ctx.settings.quality_samples
    baseline_batch = variants[0].planned.point.batch_size
    slots = [(v, seed) for v in variants for seed in seeds]
    done = [x for x in ctx.store.launches(ctx.study_id) if x.kind == LaunchKind.QUALITY]
    if (
        not done
        or done[-1].state != LaunchState.SUCCEEDED.value
        or len(done[-1].spec["candidates"]) != len(slots)
    ):
        batch_change = any(v.batch_change for v in variants)
        ranks = ctx.settings.nnodes * ctx.settings.nproc_per_node
        quality = {"train_samples": budget, "eval_samples": eval_samples(budget, ranks), "data_seed": ctx.settings.seed,
                   **({"checkpoints": CHECKPOINTS} if batch_change else {}),
                   **({"data": ctx.space.quality_data} if ctx.space.quality_data else {})}  # fmt: skip
        extras = [_extra(v, seed, baseline_batch, budget, gain, seeds.index(seed)) for v, seed in slots]
        plan = PlannedLaunch.of(variants[0].planned.env, [v.planned.point for v, _ in slots],
                                LaunchKind.QUALITY, extras=extras, quality=quality)  # fmt: skip
        run_launch(ctx, plan, None)
    launch = [x for x in ctx.store.launches(ctx.study_id) if x.kind == LaunchKind.QUALITY][-1]
    if launch.state != LaunchState.SUCCEEDED.value:
        return launch, None, []
    rows = {r.index: r for r in ctx.store.candidates(ctx.study_id, launch_id=launch.id)}
    failed = [
        (v.name, seed, _no_score(r)) for i, (v, seed) in enumerate(slots) if _no_score(r := rows.get(i))
    ]
    if failed:
        return launch, None, failed
    scores: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    for i, (variant, _) in enumerate(slots):
        scores[variant.name].append(rows[i].metrics["quality"])
    return launch, scores, []


def _no_score(row: Candidate | None) -> str:
    """Why a quality launch's row gives no score ("": it does). A row "ok" without one (a result that
    timed, not trained) is a model not measured: its metrics were read as a score and failed the study."""
    if row is None:
        return "no result"
    if row.state != "ok":
        return row.error or row.state
    return "" if isinstance((row.metrics or {}).get("quality"), dict) else "no quality scores in its result"


def _extra(
    variant: Variant, seed: int, baseline_batch: int, budget: int, gain: Ratio | None, baseline_slot: int
) -> dict[str, Any]:
    """A candidate's seed, and for a batch change its learning-rate scale and longer budget, trained no
    further than the log loss of its seed's baseline (`baseline_slot`: that candidate)."""
    extra: dict[str, Any] = {"model_seed": seed}
    if variant.batch_change:
        scale = lr_factor(variant.lr_rule, variant.planned.point.batch_size, baseline_batch)
        if scale is not None:
            extra["lr_scale"] = scale
        extra["train_samples"] = int(budget * extension(gain))
        extra["stop_at"] = baseline_slot
    return extra


def lr_factor(rule: str | None, batch: int, baseline_batch: int) -> float | None:
    """The factor a learning-rate rule puts on the job's rate for `batch` (None: the job's own rate)."""
    power = LR_POWER[rule or "none"]
    return float((batch / baseline_batch) ** power) if power and batch != baseline_batch else None


# ------------------------------------------------------------------------------ the verdicts


def judge(
    scores: dict[str, list[dict[str, Any]]], knobs: list[str], variants: list[Variant], limit: float,
    gain: Ratio | None, *, rank: Sequence[str] | None = None, data: str = SYNTHETIC, cost_s: float | None = None,
) -> Quality:  # fmt: skip
    """The evidence from every variant's per-seed scores (the same seeds, in the same order). `rank`:
    the knobs in the order one of them is kept when those that passed were never trained together
    (check: by ladder gain; default: `knobs`' order)."""
    base = scores["baseline"]
    base_loss = [s["logloss"] for s in base]
    # A variant trained under several learning-rate rules ("only_batch@sqrt", ...) is judged at the
    # confidence the best of them needs: the best is what goes out.
    rules = Counter(_family(v.name) for v in variants)
    figures = {
        v.name: _figures(v, scores[v.name], base, limit, gain, family_confidence(rules[_family(v.name)]))
        for v in variants if v.name != "baseline"
    }  # fmt: skip
    names = ("tuned", *(f"only_{k}" for k in knobs))
    chosen = {name: best for name in names if (best := _best_rule(name, variants, figures)) is not None}
    # The batch goes out with the rule it was shown under (publish.lr_scale): the tuned config is judged
    # under that rule too, not under whichever did best for it.
    same_rule = chosen.get("only_batch", "").replace("only_batch", "tuned", 1)
    if same_rule in figures:
        chosen["tuned"] = same_rule

    def verdict(name: str) -> str | None:
        return figures[chosen[name]].verdict

    if len(knobs) == 1:
        status = {knobs[0]: verdict("tuned")}
    else:  # each knob alone; if each passes alone but not together, none of them
        status = {k: verdict(f"only_{k}") for k in knobs}
        if all(v == PASSED for v in status.values()) and verdict("tuned") != PASSED:
            status = dict.fromkeys(knobs, verdict("tuned"))
        status = untrained_mix(status, rank or knobs)
    tuned = figures[chosen["tuned"]]
    batch = chosen.get("only_batch" if len(knobs) > 1 else "tuned")
    ttq = figures[batch].time_to_quality if "batch" in knobs and batch is not None else None
    return Quality(
        k=len(base), seeds=[s.get("model_seed") for s in base], baseline_logloss=statistics.fmean(base_loss),
        tuned_logloss=statistics.fmean(tuned.logloss), baseline_per_seed=base_loss, tuned_per_seed=tuned.logloss,
        delta=tuned.delta, ci_low=tuned.ci_low, ci_high=tuned.ci_high, confidence=tuned.confidence, sd=tuned.sd,
        k_to_resolve=tuned.k_to_resolve,
        verdict=tuned.equal_samples_verdict, seed_spread=statistics.stdev(base_loss),
        baseline_auc=statistics.fmean(s["auc"] for s in base), tuned_auc=statistics.fmean(tuned.auc),
        samples=base[0]["train_samples"], eval_samples=base[0]["eval_samples"], max_logloss_delta=limit,
        variants=figures, knobs={k: _knob(k, knobs, chosen, figures) for k in knobs},
        refused=[k for k in knobs if status[k] == REFUSED], unresolved=[k for k in knobs if status[k] == NOT_RESOLVED],
        data=data, cost_s=cost_s,
        time_to_quality=None if ttq is None or batch is None else
        ttq.model_copy(update={"variant": batch, "lr_scaling": figures[batch].lr_scaling}),
    )  # fmt: skip


def untrained_mix(status: dict[str, str | None], rank: Sequence[str]) -> dict[str, str | None]:
    """Only the mix of every knob and each knob alone were trained: when some knobs are left out and
    two or more of the rest passed, those were never trained together (they could cost quality as a
    pair that neither costs alone), so only the first of them in `rank` is kept; the others are not
    resolved."""
    passed = [k for k in rank if status[k] == PASSED]
    if len(passed) < 2 or len(passed) == len(status):
        return status
    return {k: NOT_RESOLVED if k in passed[1:] else v for k, v in status.items()}


def _knob(
    knob: str, knobs: list[str], chosen: dict[str, str], figures: dict[str, VariantFigures]
) -> KnobQuality:
    f = figures[chosen["tuned" if len(knobs) == 1 else f"only_{knob}"]]
    return KnobQuality(delta=f.delta, ci_low=f.ci_low, ci_high=f.ci_high, confidence=f.confidence,
                       verdict=f.verdict, k_to_resolve=f.k_to_resolve)  # fmt: skip


def _family(name: str) -> str:
    return name.split("@", 1)[0]


def _best_rule(name: str, variants: list[Variant], figures: dict[str, VariantFigures]) -> str | None:
    """The variant of `name` under the learning-rate rule that did best (time to quality, else the
    equal-samples delta)."""
    tried = [v.name for v in variants if _family(v.name) == name]
    if not tried:
        return None

    def merit(n: str) -> tuple[float, float]:
        ttq = figures[n].time_to_quality or TimeToQuality()
        return (ttq.speedup or ttq.efficiency or 0.0, -(figures[n].delta or 0.0))

    return max(tried, key=merit)


def _figures(
    variant: Variant,
    scores: list[dict[str, Any]],
    base: list[dict[str, Any]],
    limit: float,
    gain: Ratio | None,
    confidence: float = CONFIDENCE,
) -> VariantFigures:
    """A variant against the baseline: per-seed losses, the paired delta with its interval and verdict,
    and for a batch change its time to quality (whose verdict is then the variant's)."""
    loss = [s["logloss"] for s in scores]
    delta = paired_delta(loss, [s["logloss"] for s in base], confidence).as_dict(limit)
    out = VariantFigures.model_validate({"logloss": loss, "auc": [s["auc"] for s in scores], **delta,
                                         "equal_samples_verdict": delta["verdict"]})  # fmt: skip
    if not variant.batch_change:
        return out
    ttq = time_to_quality(scores, base, gain, confidence)
    return out.model_copy(update={"lr_scaling": variant.lr_rule or "none", "lr_scale": scores[0].get("lr_scale", 1.0),
                                  "time_to_quality": ttq, "verdict": ttq.verdict or out.verdict})  # fmt: skip


def time_to_quality(
    scores: list[dict[str, Any]],
    base: list[dict[str, Any]],
    gain: Ratio | None,
    confidence: float = CONFIDENCE,
) -> TimeToQuality:
    """Per seed, the samples the variant needs to reach that seed's baseline final log loss; the
    samples the baseline's own curve needs to reach it over those (sample efficiency, > 1: fewer
    samples), and times the throughput gain, the time-to-quality speedup with its interval (at
    `confidence`) and verdict."""
    budget = base[0]["train_samples"]
    needed = [samples_to_reach(s.get("curve") or [], b["logloss"]) for s, b in zip(scores, base, strict=True)]
    # Both sides read the same way: the first crossing of the target on their own curve. Against the
    # baseline's full budget instead, a curve wobbling on a flat tail crossed early and made a copy of
    # the baseline look 1.2x as sample-efficient as itself. No curve (a launch without checkpoints):
    # the budget, where its final log loss was taken.
    own = [_reached_at(b) for b in base]
    trained = max(s.get("budget_samples", budget) for s in scores)
    out = TimeToQuality(baseline_samples=budget, samples=needed, trained_samples=trained, confidence=confidence,
                        throughput_gain=None if gain is None else Gain.model_validate(gain.as_dict()))  # fmt: skip
    reached = [n for n in needed if n is not None]
    if len(reached) < len(needed):
        # Never within the budget: below (the baseline's samples)/trained as efficient, so at best this fast.
        best = None if gain is None else gain.ci_high * max(own) / trained
        verdict = None if best is None else REFUSED if best <= 1 else NOT_RESOLVED
        return out.model_copy(update={"never": True, "speedup_at_most": best, "verdict": verdict})
    efficiency = ratio_over([o / n for o, n in zip(own, reached, strict=True)], confidence)
    out = out.model_copy(
        update={"efficiency": efficiency.ratio, "efficiency_ci": [efficiency.ci_low, efficiency.ci_high]}
    )
    if gain is None:
        return out
    speedup = product(gain, efficiency, confidence)
    verdict = PASSED if speedup.ci_low > 1 else REFUSED if speedup.ci_high < 1 else NOT_RESOLVED
    return out.model_copy(update={"speedup": speedup.ratio, "ci_low": speedup.ci_low, "ci_high": speedup.ci_high,
                                  "verdict": verdict})  # fmt: skip


def _reached_at(base: dict[str, Any]) -> float:
    """The samples at which the baseline's own curve first reaches its final log loss."""
    at = samples_to_reach(base.get("curve") or [], base["logloss"])
    return float(base["train_samples"]) if at is None else at


def samples_to_reach(curve: Sequence[Sequence[float]], target: float) -> float | None:
    """The samples at which a held-out curve first reaches `target` (linear between checkpoints; the
    first checkpoint itself when it is already there); None when it never does."""
    before: Sequence[float] | None = None
    for point in curve:
        samples, loss = point[0], point[1]
        if loss <= target:
            if before is None or before[1] == loss:
                return float(samples)
            return before[0] + (samples - before[0]) * (before[1] - target) / (before[1] - loss)
        before = point
    return None
