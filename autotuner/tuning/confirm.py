"""Confirmation: the finalist and the baseline measured in interleaved launches; the finalist is
adopted only if it is faster with 95% confidence (else the baseline is published: jobs are never
handed an unproven change)."""

from __future__ import annotations

from typing import Any

from autotuner.store import Candidate, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.pairs import Setting, compare

ADOPTED = "tuned config is faster with 95% confidence: published"
NOT_SIGNIFICANT = "no significant gain over the baseline: published the baseline (no changes)"
NOT_CONFIRMED = "not confirmed (confirm_rounds=0 or the baseline was best)"


def decide(ctx: StudyContext, best: Candidate, baseline: Candidate) -> dict[str, Any]:
    rounds = ctx.settings.confirm_rounds
    outcome: dict[str, Any] = {"best_candidate": best.id, "baseline_candidate": baseline.id}
    speedup = None
    if rounds and best.id != baseline.id:
        speedup, _ = compare(
            ctx, Setting.of(best), Setting.of(baseline), rounds, LaunchKind.CONFIRM, "confirm"
        )
    if speedup is not None:
        outcome.update(speedup.as_dict())
        adopt = speedup.significant
        outcome["decision"] = ADOPTED if adopt else NOT_SIGNIFICANT
    else:
        adopt = best.id != baseline.id and rounds == 0
        outcome["speedup"] = (best.samples_per_s or 0) / (baseline.samples_per_s or 1)
        outcome["decision"] = NOT_CONFIRMED
    outcome["chosen_candidate"] = best.id if adopt else baseline.id
    return outcome


FIGURES = ("speedup", "ci_low", "ci_high", "confidence", "rounds", "tuned_samples_per_s",
           "baseline_samples_per_s", "significant")  # fmt: skip


def baseline_published(outcome: dict[str, Any]) -> dict[str, Any]:
    """When the baseline is what gets published, the finalist's figures are the finalist's, not the
    config's: they move under `finalist`, and the claim is 1.0x (no changes)."""
    rest = {k: v for k, v in outcome.items() if k not in FIGURES}
    return {**rest, "finalist": finalist_figures(outcome), "speedup": 1.0}


def finalist_figures(outcome: dict[str, Any]) -> dict[str, Any]:
    """The confirmation's figures of the finalist (kept apart when something else is published)."""
    return {**{k: outcome[k] for k in FIGURES if k in outcome}, "candidate": outcome.get("best_candidate")}
