"""Confirmation: the finalist and the baseline measured in interleaved launches; the finalist is
adopted only if it is faster with 95% confidence (else the baseline is published: jobs are never
handed an unproven change)."""

from __future__ import annotations

from typing import Any

from autotuner.store import MEASURED, Candidate, LaunchKind, env_hash
from autotuner.tuning.context import StudyContext, point_of
from autotuner.tuning.launch import run_launch
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.stats import paired_speedup

ADOPTED = "tuned config is faster with 95% confidence: published"
NOT_SIGNIFICANT = "no significant gain over the baseline: published the baseline (no changes)"
NOT_CONFIRMED = "not confirmed (confirm_rounds=0 or the baseline was best)"


def decide(ctx: StudyContext, best: Candidate, baseline: Candidate) -> dict[str, Any]:
    rounds = ctx.settings.confirm_rounds
    tuned_runs, base_runs = (
        measure(ctx, best, baseline, rounds) if rounds and best.id != baseline.id else ([], [])
    )
    outcome: dict[str, Any] = {"best_candidate": best.id, "baseline_candidate": baseline.id}
    if tuned_runs and base_runs:
        speedup = paired_speedup(tuned_runs, base_runs)
        outcome.update(speedup.as_dict())
        adopt = speedup.significant
        outcome["decision"] = ADOPTED if adopt else NOT_SIGNIFICANT
    else:
        adopt = best.id != baseline.id and rounds == 0
        outcome["speedup"] = (best.samples_per_s or 0) / (baseline.samples_per_s or 1)
        outcome["decision"] = NOT_CONFIRMED
    outcome["chosen_candidate"] = best.id if adopt else baseline.id
    return outcome


def measure(
    ctx: StudyContext, best: Candidate, baseline: Candidate, rounds: int
) -> tuple[list[float], list[float]]:
    """Interleave best and baseline (best, baseline, best, ...) so slow drift of a shared machine
    hits both alike; each round's pair gives one ratio. A resumed study keeps finished rounds."""
    same_env = env_hash(best.env) == env_hash(baseline.env)
    for _ in range(3 * rounds):  # failed confirmation launches are retried, within reason
        tuned, base = _measured(ctx, best)
        if min(len(tuned), len(base)) >= rounds:
            break
        if same_env:  # one process can measure both, alternating, in a single launch
            pairs = rounds - min(len(tuned), len(base))
            plan = PlannedLaunch.of(
                best.env, [point_of(best), point_of(baseline)] * pairs, LaunchKind.CONFIRM
            )
        else:
            row = best if len(tuned) <= len(base) else baseline
            plan = PlannedLaunch.of(row.env, [point_of(row)], LaunchKind.CONFIRM)
        run_launch(ctx, plan, None)
    tuned, base = _measured(ctx, best)
    n = min(len(tuned), len(base), rounds)
    return tuned[:n], base[:n]


def _measured(ctx: StudyContext, best: Candidate) -> tuple[list[float], list[float]]:
    key = (env_hash(best.env), point_of(best).key())
    tuned, base = [], []
    for row in ctx.store.candidates(ctx.study_id, kinds=[LaunchKind.CONFIRM], states=list(MEASURED)):
        is_best = (env_hash(row.env), point_of(row).key()) == key
        (tuned if is_best else base).append(row.samples_per_s or 0.0)
    return tuned, base
