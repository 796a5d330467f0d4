"""The scaling curve: throughput of the published config and of the baseline at each node count,
the scaling factor (throughput at N / at the smallest N) and the efficiency (factor / the ideal),
as the published case reports them ("3.9x at 4 nodes, 97.5% of ideal")."""

from __future__ import annotations

from typing import Any

from autotuner.executors.base import LaunchState
from autotuner.store import MEASURED, Candidate, CandidateState, LaunchKind, env_hash
from autotuner.tuning.context import StudyContext, point_of
from autotuner.tuning.launch import run_launch
from autotuner.tuning.outcome import ScalingPoint
from autotuner.tuning.plan import PlannedLaunch

ROLES = ("baseline", "tuned")


def scaling_curve(ctx: StudyContext, chosen: Candidate, baseline: Candidate) -> list[ScalingPoint]:
    measured = _measured(ctx, baseline)
    for nodes in ctx.settings.scaling_nodes:
        for role, row in (("baseline", baseline), ("tuned", chosen)):
            if (role, nodes) in measured or (role == "tuned" and chosen.id == baseline.id):
                continue
            ctx.lease.beat(force=True)
            plan = PlannedLaunch.of(row.env, [point_of(row)], LaunchKind.SCALING, nnodes=nodes)
            rows = run_launch(ctx, plan, None)
            if rows and rows[0].state != CandidateState.FAILED:
                measured[(role, nodes)] = rows[0].samples_per_s or 0.0
    if chosen.id == baseline.id:
        measured.update({("tuned", n): v for (r, n), v in list(measured.items()) if r == "baseline"})
    return _curve(ctx.settings.scaling_nodes, measured)


def _measured(ctx: StudyContext, baseline: Candidate) -> dict[tuple[str, int], float]:
    """What finished scaling launches measured already (a resumed study keeps them)."""
    base_key = (env_hash(baseline.env), point_of(baseline))
    measured: dict[tuple[str, int], float] = {}
    for launch in ctx.store.launches(ctx.study_id):
        if launch.kind != LaunchKind.SCALING or launch.state != LaunchState.SUCCEEDED.value:
            continue
        for row in ctx.store.candidates(ctx.study_id, launch_id=launch.id, states=list(MEASURED)):
            role = "baseline" if (env_hash(row.env), point_of(row)) == base_key else "tuned"
            measured[(role, launch.nnodes or ctx.settings.nnodes)] = row.samples_per_s or 0.0
    return measured


def _curve(node_counts: list[int], measured: dict[tuple[str, int], float]) -> list[ScalingPoint]:
    first = min(node_counts)
    curve = []
    for nodes in node_counts:
        point: dict[str, Any] = {"nodes": nodes}
        for role in ROLES:
            value, base = measured.get((role, nodes)), measured.get((role, first))
            point[f"{role}_samples_per_s"] = value
            factor = value / base if value and base else None
            point[f"{role}_scaling"] = factor
            # factor / the ideal one (N / the smallest N): 1.0 is perfect scaling
            point[f"{role}_efficiency"] = factor / (nodes / first) if factor else None
        curve.append(ScalingPoint.model_validate(point))
    return curve
