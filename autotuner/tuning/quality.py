"""The convergence check: what the tuned config costs in quality, against the noise of a seed.

One launch of kind `quality` trains, on the same samples each, a fresh model of: the baseline, the
baseline with a second model seed (the yardstick of chance), the tuned config, and with several
training-changing knobs (precision, batch, pipeline) each of them alone. A tuned config whose log
loss is worse than the baseline's by more than the space's `max_logloss_delta` is not published
with the knob that costs it. The task is a proxy (trials/quality.py: a hidden teacher over the
workload's tables), or the user's data with `quality_data: "module:function"`.
"""

from __future__ import annotations

from typing import Any

from autotuner.executors.base import LaunchState
from autotuner.store import Launch, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import GROUPS
from autotuner.tuning.launch import run_launch
from autotuner.tuning.pairs import Setting
from autotuner.tuning.plan import PlannedLaunch

KNOBS = ("precision", "batch", "pipeline")  # what changes the training, not only its speed
SECOND_SEED = 1


def check(ctx: StudyContext, baseline: Setting, tuned: Setting) -> tuple[dict[str, Any], Setting]:
    """The quality evidence, and the tuned setting without the knobs that cost quality."""
    knobs = [k for k in KNOBS if GROUPS[k][0](baseline) != GROUPS[k][0](tuned)]
    skipped = _why_not(ctx, knobs)
    if skipped:
        return {"skipped": skipped}, tuned
    variants = {"baseline": baseline, "baseline_seed": baseline, "tuned": tuned}
    if len(knobs) > 1:
        variants.update({f"only_{k}": _alone(k, baseline, tuned) for k in knobs})
    launch, scores = _scores(ctx, variants)
    if scores is None:
        return {"skipped": f"the convergence check did not run: {launch.error or launch.state}"}, tuned
    evidence = _evidence(ctx, scores, knobs, launch)
    kept = tuned
    for knob in evidence["refused"]:
        kept = GROUPS[knob][1](kept, baseline)
    return evidence, kept


def _alone(knob: str, baseline: Setting, tuned: Setting) -> Setting:
    """The baseline with the tuned `knob`; with the tuned sharding too where the knob cannot run on the
    baseline's (int8 comms onto a reduce-scatter sharding: InProcPoint.problem)."""
    alone = GROUPS[knob][1](baseline, tuned)
    return GROUPS["sharding"][1](alone, tuned) if alone.point.problem() else alone


def _why_not(ctx: StudyContext, knobs: list[str]) -> str | None:
    if not knobs:
        return "the tuned config trains as the baseline does (no precision, batch or pipeline change)"
    if ctx.workload.dense is None:
        return "the workload has no dense part: nothing trains to a loss"
    if ctx.settings.executor == "replay":
        return "the replay executor answers with recorded timings: it cannot train"
    if not ctx.settings.quality_samples:
        return "quality_samples is 0"
    return None


def _scores(
    ctx: StudyContext, variants: dict[str, Setting]
) -> tuple[Launch, dict[str, dict[str, Any]] | None]:
    """Each variant's score from the study's quality launch (run now, or by the runner before a restart)."""
    done = [x for x in ctx.store.launches(ctx.study_id) if x.kind == LaunchKind.QUALITY]
    if not done or done[-1].state != LaunchState.SUCCEEDED.value:
        seeds = [SECOND_SEED if name == "baseline_seed" else 0 for name in variants]
        quality = {"train_samples": ctx.settings.quality_samples, "eval_samples": max(8192, ctx.settings.quality_samples // 8),
                   "data_seed": ctx.settings.seed, **({"data": ctx.space.quality_data} if ctx.space.quality_data else {})}  # fmt: skip
        plan = PlannedLaunch.of(next(iter(variants.values())).env, [v.point for v in variants.values()],
                                LaunchKind.QUALITY, model_seeds=seeds, quality=quality)  # fmt: skip
        run_launch(ctx, plan, None)
    launch = [x for x in ctx.store.launches(ctx.study_id) if x.kind == LaunchKind.QUALITY][-1]
    rows = ctx.store.candidates(ctx.study_id, launch_id=launch.id)
    if launch.state != LaunchState.SUCCEEDED.value or any(r.state != "ok" for r in rows):
        return launch, None
    return launch, {name: row.metrics["quality"] for name, row in zip(variants, rows, strict=True)}


def _evidence(
    ctx: StudyContext, scores: dict[str, dict[str, Any]], knobs: list[str], launch: Launch
) -> dict[str, Any]:
    base, tuned, limit = scores["baseline"], scores["tuned"], ctx.space.max_logloss_delta
    delta = tuned["logloss"] - base["logloss"]
    alone = {k: scores[f"only_{k}"]["logloss"] - base["logloss"] for k in knobs if f"only_{k}" in scores}
    if delta <= limit:
        refused: list[str] = []
    elif len(knobs) == 1:
        refused = knobs
    else:  # the knobs that cost quality on their own; all of them if only their mix does
        refused = [k for k in knobs if alone.get(k, 0.0) > limit] or list(knobs)
    summary = launch.summary or {}
    return {
        "baseline_logloss": base["logloss"],
        "tuned_logloss": tuned["logloss"],
        "delta": delta,
        "seed_noise": abs(scores["baseline_seed"]["logloss"] - base["logloss"]),
        "baseline_auc": base["auc"],
        "tuned_auc": tuned["auc"],
        "samples": base["train_samples"],
        "eval_samples": base["eval_samples"],
        "max_logloss_delta": limit,
        "knobs": alone or {k: delta for k in knobs},
        "refused": refused,
        "data": ctx.space.quality_data or "synthetic teacher task (a proxy: trials/quality.py)",
        "cost_s": summary.get("wall_s"),
    }
