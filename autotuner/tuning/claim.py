"""What a published config may claim: only the knobs shown to help, at a known quality cost.

After the finalist is confirmed against the baseline: the ladder keeps the knob groups that give a
measurable gain, one at a time; the convergence check refuses those that cost quality; and when
either left something out, what remains is confirmed against the baseline again, so the published
speedup is the published config's own.
"""

from __future__ import annotations

from autotuner.store import Candidate, CandidateState, LaunchKind
from autotuner.tuning.confirm import ADOPTED, NOT_SIGNIFICANT, finalist_of
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import climb
from autotuner.tuning.outcome import Confirmation, LadderStep, Outcome, Quality
from autotuner.tuning.pairs import Setting, compare
from autotuner.tuning.quality import check

NOTHING_HELPED = "no knob gave a measurable gain on its own: published the baseline (no changes)"
QUALITY_REFUSED = (
    "what gave a gain costs quality ({knobs}: see the convergence check): published the baseline (no changes)"
)
OVER_LIMIT = ("what was left, confirmed again, is over the quantization-error limit ({}): published the baseline "
              "(no changes)")  # fmt: skip
QUALITY_UNRESOLVED = ("what gave a gain was not shown to cost no quality ({knobs}: see the convergence check): "
                      "published the baseline (no changes)")  # fmt: skip


def honest_claim(ctx: StudyContext, baseline: Candidate, best: Candidate, outcome: Outcome) -> Outcome:
    """The outcome with its ladder, quality and, if the published config is not the finalist, its own
    confirmation (`chosen_candidate` then names a row that measured it)."""
    base, target = Setting.of(baseline), Setting.of(best)
    steps = list(outcome.ladder or [])
    top, row = climb(ctx, base, target, steps) if ctx.settings.ladder_rounds else (target, best)
    quality, kept = check(ctx, base, top, steps)
    claimed = outcome.model_copy(update={"ladder": batch_step_to_quality(steps, quality), "quality": quality})
    if kept == target:
        return claimed
    if kept == base:
        why = NOTHING_HELPED if top == base else _quality_why(quality)
        return claimed.model_copy(update={"chosen_candidate": baseline.id, "decision": why})
    speedup, row = compare(ctx, kept, base, ctx.settings.confirm_rounds or 2, LaunchKind.CONFIRM, "reconfirm")
    if row is not None and row.state == CandidateState.INFEASIBLE:  # measured over the limit this time
        return claimed.model_copy(
            update={"chosen_candidate": baseline.id, "decision": OVER_LIMIT.format(row.error)}
        )
    if speedup is None or row is None or not speedup.significant:
        return claimed.model_copy(update={"chosen_candidate": baseline.id, "decision": NOT_SIGNIFICANT,
                                          "reconfirmed": None if speedup is None else Confirmation.of(speedup)})  # fmt: skip
    again = Confirmation.of(speedup)
    return claimed.model_copy(update={**again.figures(), "chosen_candidate": row.id, "decision": ADOPTED,
                                      "reconfirmed": again, "finalist": finalist_of(outcome)})  # fmt: skip


def _quality_why(quality: Quality) -> str:
    """Why the baseline is published after the convergence check: what it refused, else what it could
    not resolve."""
    if quality.refused:
        return QUALITY_REFUSED.format(knobs=", ".join(quality.refused + quality.unresolved))
    return QUALITY_UNRESOLVED.format(knobs=", ".join(quality.unresolved))


def batch_step_to_quality(steps: list[LadderStep], quality: Quality) -> list[LadderStep]:
    """The steps, the batch step with its time-to-quality figure (its throughput gain x the
    sample-efficiency ratio of the convergence check) beside its throughput gain: the verdict on a
    batch change is on that."""
    ttq = quality.time_to_quality
    if ttq is None:
        return steps
    beside = ttq.model_copy(
        update={"baseline_samples": None, "samples": None, "throughput_gain": None, "variant": None}
    )
    return [s.model_copy(update={"time_to_quality": beside}) if s.step == "batch" and s.measured else s
            for s in steps]  # fmt: skip
