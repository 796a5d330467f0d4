"""Planning cost: CPU time to plan each launch of a replay study as it grows (launch 1..50), and
how many Optuna trials the study leaves per measured candidate.

A replay study over the recorded grid (bench/data/landscape-cpu.json, 120 points), k = 2
candidates per launch, so 50 launches measure 100 of the 120 points: late launches plan in a
nearly exhausted space, where a sampler keeps proposing what is measured already.
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
