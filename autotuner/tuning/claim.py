"""What a published config may claim: only the knobs shown to help, at a known quality cost.

After the finalist is confirmed against the baseline: the ladder keeps the knob groups that give a
measurable gain, one at a time; the convergence check refuses those that cost quality; and when
either left something out, what remains is confirmed against the baseline again, so the published
speedup is the published config's own.
"""

from __future__ import annotations

from autotuner.store import Candidate, LaunchKind
from autotuner.tuning.confirm import ADOPTED, KEPT_SERVED, NOT_SIGNIFICANT, finalist_of
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import NOT_MEASURED, climb
from autotuner.tuning.outcome import Confirmation, LadderStep, Outcome, Quality
from autotuner.tuning.pairs import Setting, compare, over_limit
from autotuner.tuning.quality import check

NOTHING_HELPED = "no knob gave a measurable gain on its own: published the baseline (no changes)"
QUALITY_REFUSED = (
    "what gave a gain costs quality ({knobs}: see the convergence check): published the baseline (no changes)"
)
OVER_LIMIT = ("what was left, confirmed again, is over the quantization-error limit ({}): published the baseline "
              "(no changes)")  # fmt: skip
QUALITY_UNRESOLVED = ("what gave a gain was not shown to cost no quality ({knobs}: see the convergence check): "
                      "published the baseline (no changes)")  # fmt: skip
ONLY_INERT = ("the finalist differs from the baseline only in variables that cannot act here ({names}: never "
              "exported, so what jobs would get is the baseline): published the baseline (no changes)")  # fmt: skip
# A phase that could not be measured (an outage) shows nothing either way: as an unmeasured confirmation
# (confirm.ROUNDS_FAILED), it publishes nothing, so a config shown to help before stays served.
LADDER_UNMEASURED = ("not credited: the ladder's {step} step could not be measured (see the launch logs): "
                     f"{KEPT_SERVED}")  # fmt: skip
QUALITY_UNMEASURED = f"not checked for quality ({{knobs}}): {{why}} (see the launch log): {KEPT_SERVED}"
RECONFIRM_FAILED = ("not confirmed again: fewer than 2 of {rounds} rounds of what was left after the ladder and "
                    f"the convergence check could be measured (see the launch logs): {KEPT_SERVED}")  # fmt: skip


def honest_claim(ctx: StudyContext, baseline: Candidate, best: Candidate, outcome: Outcome) -> Outcome:
    """The outcome with its ladder, quality and, if the published config is not the finalist, its own
    confirmation (`chosen_candidate` then names a row that measured it). A phase that could not be
    measured publishes nothing (its decision ends with KEPT_SERVED)."""
    base, target = Setting.of(baseline), Setting.of(best)
    steps = list(outcome.ladder or [])
    top, row = climb(ctx, base, target, steps) if ctx.settings.ladder_rounds else (target, best)
    unmeasured = next((s for s in steps if s.verdict == NOT_MEASURED), None)
    if unmeasured is not None:  # checked for nothing, confirmed again nothing: the served config stays
        return outcome.model_copy(update={"ladder": steps, "chosen_candidate": baseline.id,
                                          "decision": LADDER_UNMEASURED.format(step=_step_name(unmeasured))})  # fmt: skip
    quality, kept = check(ctx, base, top, steps)
    claimed = outcome.model_copy(update={"ladder": batch_step_to_quality(steps, quality), "quality": quality})
    if quality.failed:
        why = QUALITY_UNMEASURED.format(
            knobs=", ".join(quality.unresolved + quality.refused), why=quality.skipped
        )
        return claimed.model_copy(update={"chosen_candidate": baseline.id, "decision": why})
    if acting(kept, base, ctx.inert) == base:  # an inert variable is never exported: that is the baseline
        why = _baseline_why(ctx, base, target, top, quality)
        return claimed.model_copy(update={"chosen_candidate": baseline.id, "decision": why})
    if kept == target:
        return claimed
    rounds = ctx.settings.confirm_rounds or 2
    speedup, row = compare(ctx, kept, base, rounds, LaunchKind.CONFIRM, "reconfirm")
    if speedup is None or row is None:  # an outage: nothing shown either way
        return claimed.model_copy(
            update={"chosen_candidate": baseline.id, "decision": RECONFIRM_FAILED.format(rounds=rounds)}
        )
    if (over := over_limit(row)) is not None:  # measured over the limit this time
        return claimed.model_copy(
            update={"chosen_candidate": baseline.id, "decision": OVER_LIMIT.format(over)}
        )
    if not speedup.significant:
        return claimed.model_copy(update={"chosen_candidate": baseline.id, "decision": NOT_SIGNIFICANT,
                                          "reconfirmed": Confirmation.of(speedup)})  # fmt: skip
    again = Confirmation.of(speedup)
    return claimed.model_copy(update={**again.figures(), "chosen_candidate": row.id, "decision": ADOPTED,
                                      "reconfirmed": again, "finalist": finalist_of(outcome)})  # fmt: skip


def acting(setting: Setting, base: Setting, inert: dict[str, str]) -> Setting:
    """`setting` as jobs would get it: its inert variables at the baseline's values (never exported)."""
    env = {k: v for k, v in setting.env.items() if k not in inert}
    env.update({k: v for k, v in base.env.items() if k in inert})
    return Setting(env, setting.point)


def _step_name(step: LadderStep) -> str:
    return f"{step.step} ({', '.join(step.changed)})" if step.step == "env" else step.step


def _baseline_why(ctx: StudyContext, base: Setting, target: Setting, top: Setting, quality: Quality) -> str:
    """Why the baseline is published: the finalist differs from it only in variables that cannot act
    here; or no knob the ladder measured helped; or the convergence check left out what did."""
    if acting(target, base, ctx.inert) == base:
        names = sorted(k for k in ctx.inert if target.env.get(k) != base.env.get(k))
        return ONLY_INERT.format(names=", ".join(names))
    if acting(top, base, ctx.inert) == base:
        return NOTHING_HELPED
    return _quality_why(quality)


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
