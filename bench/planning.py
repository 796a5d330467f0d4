"""Planning cost: CPU time to plan each launch of a replay study as it grows (launch 1..50), and
how many Optuna trials the study leaves per measured candidate.

A replay study over the recorded grid (bench/data/landscape-cpu.json, 120 points), k = 2
candidates per launch, so 50 launches measure 100 of the 120 points: late launches plan in a
nearly exhausted space, where a sampler keeps proposing what is measured already.

`wide`: launches of k = 1,000 on a 9,000-point space (9 env values x 1,000 batch sizes, a synthetic
landscape: a recorded result scaled smoothly, consistent with its batch), planned as the engine plans
now and with the sampler proposing all k as it did before (plan.SAMPLER_PROPOSALS), in the same run.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.store import LaunchKind, Store
from autotuner.tuning import StudyDriver, StudySettings, create_study, optuna_storage, record_name
from autotuner.tuning import plan as planner
from autotuner.tuning.launch import run_launch
from autotuner.tuning.plan import plan_launch
from autotuner.tuning.search import Search

LANDSCAPE = Path(__file__).resolve().parent / "data" / "landscape-cpu.json"


def run(launches: int = 50, k: int = 2, seed: int = 0) -> dict[str, Any]:
    data = json.loads(LANDSCAPE.read_text())
    tmp = Path(tempfile.mkdtemp(prefix="bench-planning-"))
    store = Store(f"sqlite:///{tmp / 'planning.db'}")
    settings = StudySettings(executor="replay", seed=seed, trials=launches, candidates_per_launch=k, confirm_rounds=0,
                             publish=False, workdir=str(tmp / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    space = {**data["space"], "force_inert": list(data["space"]["env"])}  # as in bench/search.py
    study = create_study(store, cluster="bench", workload=data["workload"], space=space, settings=settings,
                         name="planning")  # fmt: skip
    ctx = StudyDriver(store, study.id, ReplayExecutor(Landscape(data), seed=seed), poll_s=0).ctx
    ctx.lease.acquire()
    run_launch(ctx, _baseline(ctx), None)
    search, rng = Search(ctx), random.Random(seed)
    cpu_ms = []
    for _ in range(launches):
        started = time.process_time()
        plan = plan_launch(ctx, search, rng)
        cpu_ms.append((time.process_time() - started) * 1000)
        if plan is None:
            break
        run_launch(ctx, plan, search)
    ctx.lease.release()
    measured = len(store.candidates(study.id, kinds=[LaunchKind.SEARCH]))
    record = optuna.load_study(study_name=record_name(study.id), storage=optuna_storage(store.url))
    tenth = max(1, len(cpu_ms) // 10)
    return {
        "setup": f"replay of {LANDSCAPE.name} ({len(data['points'])} points), k = {k}, {len(cpu_ms)} launches planned",
        "cpu_ms_per_launch": cpu_ms,
        "median_ms": statistics.median(cpu_ms),
        "max_ms": max(cpu_ms),
        "first_tenth_ms": statistics.mean(cpu_ms[:tenth]),
        "last_tenth_ms": statistics.mean(cpu_ms[-tenth:]),
        "measured_candidates": measured,
        "optuna_trials": len(record.get_trials(deepcopy=False)),
        "trials_per_candidate": len(record.get_trials(deepcopy=False)) / measured if measured else None,
    }


def _baseline(ctx: Any) -> Any:
    from autotuner.tuning.plan import PlannedLaunch

    return PlannedLaunch.of(ctx.space.fixed_env, [ctx.baseline_point], LaunchKind.BASELINE)


WIDE_BATCHES = range(64, 1064)  # 1,000 in-process points at each env
WIDE_SOCKETS = [None, 1, 2, 3, 4, 5, 6, 7, 8]


def wide(launches: int = 6, k: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Planning CPU per launch at k = 1,000, now and as before, on one synthetic landscape."""
    data = _wide_landscape()
    now = _plan_wide(data, launches, k, seed, planner.SAMPLER_PROPOSALS)
    before = _plan_wide(data, launches, k, seed, k)
    return {
        "setup": f"replay of a synthetic {len(data['points']):,}-point landscape, k = {k}, {launches} search "
                 f"launches; now: the sampler proposes {planner.SAMPLER_PROPOSALS} a launch, before: all {k}",
        "now": now, "before": before,
        "last_launch_ratio": before["cpu_ms_per_launch"][-1] / now["cpu_ms_per_launch"][-1],
        "total_ratio": sum(before["cpu_ms_per_launch"]) / sum(now["cpu_ms_per_launch"]),
    }  # fmt: skip


def _plan_wide(data: dict[str, Any], launches: int, k: int, seed: int, proposals: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-planning-wide-"))
    store = Store(f"sqlite:///{tmp / 'planning.db'}")
    settings = StudySettings(executor="replay", seed=seed, trials=launches, candidates_per_launch=k, confirm_rounds=0,
                             publish=False, workdir=str(tmp / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    study = create_study(store, cluster="bench", workload=data["workload"], space=data["space"], settings=settings,
                         name="planning-wide")  # fmt: skip
    ctx = StudyDriver(store, study.id, ReplayExecutor(Landscape(data), seed=seed), poll_s=0).ctx
    ctx.lease.acquire()
    run_launch(ctx, _baseline(ctx), None)
    search, rng, cpu_ms, cycle_ms, best = Search(ctx), random.Random(seed), [], [], []
    was, planner.SAMPLER_PROPOSALS = planner.SAMPLER_PROPOSALS, proposals
    try:
        for _ in range(launches):
            started = time.process_time()
            plan = plan_launch(ctx, search, rng)
            cpu_ms.append((time.process_time() - started) * 1000)
            assert plan is not None
            run_launch(ctx, plan, search)  # a replay: what remains is storing and learning the results
            cycle_ms.append((time.process_time() - started) * 1000)
            rows = store.candidates(study.id, kinds=[LaunchKind.SEARCH])
            best.append(max(r.samples_per_s or 0 for r in rows))
    finally:
        planner.SAMPLER_PROPOSALS = was
        ctx.lease.release()
    return {"cpu_ms_per_launch": cpu_ms, "cycle_cpu_ms_per_launch": cycle_ms, "best_samples_per_s": best}


def _wide_landscape() -> dict[str, Any]:
    """Every (sockets, batch) point of the wide space, each a recorded result rescaled: throughput
    rises with the batch and with sockets up to 4, and iter_ms is what that throughput means."""
    recorded = json.loads(LANDSCAPE.read_text())
    template = recorded["points"][0]["results"][0]
    world, points = recorded["world_size"], []
    for sockets in WIDE_SOCKETS:
        env = {} if sockets is None else {"NCCL_NSOCKS_PERTHREAD": str(sockets)}
        for batch in WIDE_BATCHES:
            rate = 20_000 * (batch / (batch + 256)) * (1 + 0.1 * min(sockets or 1, 4))
            ms = batch * world * 1000 / rate
            result = {**template, "batch_size": batch, "label": f"fp32/fp32 b{batch} table_wise",
                      "samples_per_s": rate, "iter_ms": {**template["iter_ms"], "median": ms}}  # fmt: skip
            candidate = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": batch}
            points.append({"env": env, "candidate": candidate, "results": [result]})
    space = {"env": {"NCCL_NSOCKS_PERTHREAD": WIDE_SOCKETS}, "force_inert": ["NCCL_NSOCKS_PERTHREAD"],
             "precisions": [["fp32", "fp32"]], "batch_sizes": list(WIDE_BATCHES), "allow_batch_change": True}  # fmt: skip
    workload = {**recorded["workload"], "batch_size": WIDE_BATCHES[0]}
    return {**{k: v for k, v in recorded.items() if k != "points"}, "space": space, "workload": workload,
            "points": points}  # fmt: skip
