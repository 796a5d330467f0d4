"""What a published config may claim: only the knobs shown to help, at a known quality cost.

After the finalist is confirmed against the baseline: the ladder keeps the knob groups that give a
measurable gain, one at a time; the convergence check refuses those that cost quality; and when
either left something out, what remains is confirmed against the baseline again, so the published
speedup is the published config's own.
"""

from __future__ import annotations

from typing import Any

from autotuner.store import Candidate, LaunchKind
from autotuner.tuning.confirm import ADOPTED, NOT_SIGNIFICANT, finalist_figures
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import climb
from autotuner.tuning.pairs import Setting, compare
from autotuner.tuning.quality import check

NOTHING_HELPED = "no knob gave a measurable gain on its own: published the baseline (no changes)"
QUALITY_REFUSED = (
    "what gave a gain costs quality ({knobs}: see the convergence check): published the baseline (no changes)"
)
QUALITY_UNRESOLVED = ("what gave a gain was not shown to cost no quality ({knobs}: see the convergence check): "
                      "published the baseline (no changes)")  # fmt: skip


def honest_claim(
    ctx: StudyContext, baseline: Candidate, best: Candidate, outcome: dict[str, Any]
) -> dict[str, Any]:
    """The outcome's ladder, quality and, if the published config is not the finalist, its own
    confirmation (`chosen_candidate` then names a row that measured it)."""
    base, target = Setting.of(baseline), Setting.of(best)
    steps: list[dict[str, Any]] = list(outcome.get("ladder") or [])
    top, row = climb(ctx, base, target, steps) if ctx.settings.ladder_rounds else (target, best)
    quality, kept = check(ctx, base, top, steps)
    batch_step_to_quality(steps, quality)
    claim: dict[str, Any] = {"ladder": steps, "quality": quality}
    if kept == target:
        return claim
    if kept == base:
        why = NOTHING_HELPED if top == base else _quality_why(quality)
        return {**claim, "chosen_candidate": baseline.id, "decision": why}
    speedup, row = compare(ctx, kept, base, ctx.settings.confirm_rounds or 2, LaunchKind.CONFIRM, "reconfirm")
    if speedup is None or row is None or not speedup.significant:
        return {**claim, "chosen_candidate": baseline.id, "decision": NOT_SIGNIFICANT,
                **({} if speedup is None else {"reconfirmed": speedup.as_dict()})}  # fmt: skip
    return {**claim, **speedup.as_dict(), "chosen_candidate": row.id, "decision": ADOPTED,
            "reconfirmed": speedup.as_dict(), "finalist": finalist_figures(outcome)}  # fmt: skip


def _quality_why(quality: dict[str, Any]) -> str:
    """Why the baseline is published after the convergence check: what it refused, else what it could
    not resolve."""
    if quality.get("refused"):
        return QUALITY_REFUSED.format(knobs=", ".join(quality["refused"] + quality.get("unresolved", [])))
    return QUALITY_UNRESOLVED.format(knobs=", ".join(quality.get("unresolved") or []))


def batch_step_to_quality(steps: list[dict[str, Any]], quality: dict[str, Any]) -> None:
    """The batch step's time-to-quality figure (its throughput gain x the sample-efficiency ratio of
    the convergence check), beside its throughput gain: the verdict on a batch change is on that."""
    ttq = quality.get("time_to_quality")
    for step in steps:
        if step.get("step") == "batch" and ttq and "ci_low" in step:
            step["time_to_quality"] = {k: ttq[k] for k in ("efficiency", "efficiency_ci", "speedup", "ci_low",
                                                            "ci_high", "verdict", "never", "speedup_at_most",
                                                            "lr_scaling", "trained_samples") if k in ttq}  # fmt: skip
