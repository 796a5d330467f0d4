"""Confirmation: the finalist and the baseline measured in interleaved launches; the finalist is
adopted only if it is faster with 95% confidence (else the baseline is published: jobs are never
handed an unproven change)."""

from __future__ import annotations

from autotuner.store import Candidate, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.outcome import FIGURES, Confirmation, Finalist, Outcome
from autotuner.tuning.pairs import Setting, compare, over_limit

ADOPTED = "tuned config is faster with 95% confidence: published"
NOT_SIGNIFICANT = "no significant gain over the baseline: published the baseline (no changes)"
FINALIST_OVER_LIMIT = ("the finalist, confirmed, is over the quantization-error limit ({}): published the baseline "
                       "(no changes)")  # fmt: skip
# Why nothing was confirmed, one sentence per cause (a decision names what happened, not a list of guesses).
UNCONFIRMED = "not confirmed (confirm_rounds=0): published the search's best as measured"
BASELINE_BEST = "the baseline was the fastest setting measured: published the baseline (no changes)"
# Nothing compared, nothing shown: a study whose launches failed (an outage) must not replace a config
# that was shown to help with the baseline.
KEPT_SERVED = "nothing published (the config served before, if any, stays)"
ROUNDS_FAILED = ("not confirmed: fewer than 2 of {rounds} confirmation rounds could be measured (see the "
                 f"launch logs): {KEPT_SERVED}")  # fmt: skip
NO_SEARCH = "no search was asked for (trials 0): published the baseline (no changes)"
NOTHING_MEASURED = ("nothing but the baseline was measured (every search launch failed or was left out: see "
                    f"the launch logs): {KEPT_SERVED}")  # fmt: skip


def decide(
    ctx: StudyContext, best: Candidate, baseline: Candidate, *, searched: bool | None = True
) -> Outcome:
    """`searched`: some search candidate was measured (False: the baseline is best by default, not
    shown; None: no search was asked for, and the baseline is what the study records)."""
    rounds = ctx.settings.confirm_rounds
    speedup, row = None, None
    if rounds and best.id != baseline.id:
        speedup, row = compare(
            ctx, Setting.of(best), Setting.of(baseline), rounds, LaunchKind.CONFIRM, "confirm"
        )
    if speedup is not None:
        # Over the limit in a confirmation round, with no ladder after it to drop the knob that is (its
        # steps judge each knob's error): no setting to publish, whatever it gains (the search's rows may
        # have been under it; the confirmation's error is the one quoted).
        over = None if ctx.settings.ladder_rounds else over_limit(row)
        adopt = speedup.significant and over is None
        figures = Confirmation.of(speedup).figures()
        decision = ADOPTED if adopt else NOT_SIGNIFICANT if over is None else FINALIST_OVER_LIMIT.format(over)
    else:
        adopt = best.id != baseline.id and rounds == 0
        figures = {"speedup": (best.samples_per_s or 0) / (baseline.samples_per_s or 1)}
        decision = (
            (BASELINE_BEST if searched else NO_SEARCH if searched is None else NOTHING_MEASURED)
            if best.id == baseline.id
            else UNCONFIRMED
            if rounds == 0
            else ROUNDS_FAILED.format(rounds=rounds)
        )
    return Outcome(best_candidate=best.id, baseline_candidate=baseline.id, decision=decision,
                   chosen_candidate=best.id if adopt else baseline.id, **figures)  # fmt: skip


def publishes(outcome: Outcome) -> bool:
    """Whether the outcome is published: not when nothing could be compared with the baseline."""
    return not (outcome.decision or "").endswith(KEPT_SERVED)


def unpublished(decision: str) -> str:
    """A decision in the words of a study that publishes nothing (publish off): what it would have
    published, and that it did not ("...: published" read as a config served when none was)."""
    reason, said, what = decision.rpartition(": published")
    if not said:
        return decision
    return f"{reason}: {what.strip() or 'the tuned config'} would be published; not published (publish off)"


def baseline_published(outcome: Outcome) -> Outcome:
    """When the baseline is what gets published, the finalist's figures are the finalist's, not the
    config's: they move under `finalist`, and the claim is 1.0x (no changes)."""
    cleared = dict.fromkeys(FIGURES)
    return outcome.model_copy(update={**cleared, "finalist": finalist_of(outcome), "speedup": 1.0})


def finalist_of(outcome: Outcome) -> Finalist:
    """The confirmation's figures of the finalist (kept apart when something else is published)."""
    return Finalist(**outcome.figures(), candidate=outcome.best_candidate)
