"""Search efficiency: measurements until the study's pick is within 3% of the grid's best.

Studies run on the replay executor over a landscape recorded from real launches of the WHOLE grid
(bench/data/landscape-cpu.json, re-recorded with `make landscape`), so TPE, random search and the
exhaustive grid are compared on the very same measurements. A point's true value is the mean of its
recorded repeats; a study's pick after n measurements is its best observed feasible candidate so far,
and it counts as found when the pick's true value is within 3% of the grid's best.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.executors.replay import candidate_key, env_key
from autotuner.space import load_space
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study

LANDSCAPE = Path(__file__).resolve().parent / "data" / "landscape-cpu.json"
WITHIN = 0.03


def true_values(data: dict[str, Any], max_quant_error: float) -> dict[tuple[str, str], float]:
    """Mean samples/s of every feasible recorded point (infeasible or failed points are excluded)."""
    values = {}
    for point in data["points"]:
        ok = [r for r in point["results"] if r["status"] == "ok"]
        if not ok or len(ok) < len(point["results"]):
            continue
        worst = max(max(v or 0.0 for v in r["quant_error"].values()) for r in ok)
        if worst > max_quant_error:
            continue
        key = (env_key(point["env"]), candidate_key(point["candidate"]))
        values[key] = statistics.mean(r["samples_per_s"] for r in ok)
    return values


def measurements_to_find(
    store: Store, study_id: int, truth: dict[tuple[str, str], float], target: float
) -> int | None:
    """After how many measurements the study's pick (best observed so far) is truly within reach."""
    rows = store.candidates(study_id, kinds=["baseline", "search"])
    best_seen, pick = -math.inf, None
    for n, row in enumerate(rows, 1):
        if row.state == "ok" and row.samples_per_s is not None and row.samples_per_s > best_seen:
            best_seen = row.samples_per_s
            pick = (env_key(row.env), candidate_key({
                "fwd_precision": row.fwd_precision, "bwd_precision": row.bwd_precision,
                "batch_size": row.batch_size, "sharding": row.sharding, "num_threads": row.num_threads}))  # fmt: skip
        if pick is not None and truth.get(pick, 0.0) >= target:
            return n
    return None


def run(
    seeds: int = 20, k: int = 4, budget_fraction: float = 0.4, landscape: Path = LANDSCAPE
) -> dict[str, Any]:
    data = json.loads(landscape.read_text())
    # The grid as recorded: its NCCL dimensions cannot act on gloo, but they are what makes it a
    # search (a benchmark of the sampler on fixed measurements, not a tuning claim).
    space = load_space({**data["space"], "force_inert": list(data["space"]["env"])})
    truth = true_values(data, space.max_quant_error)
    grid = len(data["points"])
    best = max(truth.values())
    target = (1 - WITHIN) * best
    good = sum(1 for v in truth.values() if v >= target)
    budget_launches = math.ceil(grid * budget_fraction / k)
    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    store = Store(f"sqlite:///{tmp / 'search.db'}")
    found: dict[str, list[int | None]] = {"tpe": [], "random": []}
    for sampler in found:
        for seed in range(seeds):
            settings = StudySettings(executor="replay", sampler=sampler, seed=seed, trials=budget_launches,
                                     candidates_per_launch=k, confirm_rounds=0, publish=False,
                                     workdir=str(tmp / "runs"), executor_options={"landscape": str(landscape)})  # fmt: skip
            study = create_study(store, cluster="bench", workload=data["workload"], space=space,
                                 settings=settings, name=f"{sampler}-{seed}")  # fmt: skip
            final = StudyDriver(store, study.id, ReplayExecutor(Landscape(data), seed=seed), poll_s=0).run()
            if final.state != "done":
                raise RuntimeError(f"{sampler} seed {seed}: study {final.state}: {final.error}")
            found[sampler].append(measurements_to_find(store, study.id, truth, target))
    budget = budget_launches * k + 1

    def summary(values: list[int | None]) -> dict[str, Any]:
        censored = [v if v is not None else budget + 1 for v in values]  # not found within the budget
        q1, med, q3 = (
            statistics.quantiles(censored, n=4, method="inclusive")
            if len(censored) > 1
            else (censored[0],) * 3
        )
        return {"median": med, "iqr": [q1, q3], "found_within_budget": sum(v is not None for v in values),
                "runs": len(values), "median_fraction_of_grid": med / grid}  # fmt: skip

    return {
        "landscape": str(landscape.resolve().relative_to(Path(__file__).resolve().parent.parent)),
        "landscape_note": data.get("fabric", ""),
        "grid_points": grid,
        "grid_best_samples_per_s": best,
        "points_within_3pct": good,
        "candidates_per_launch": k,
        "budget_measurements": budget,
        "seeds": seeds,
        "tpe": summary(found["tpe"]),
        "random": summary(found["random"]),
        # Exhaustive grid: all points; in a random order the first good point is expected at (N+1)/(m+1).
        "grid": {"exhaustive": grid, "expected_shuffled": (grid + 1) / (good + 1)},
    }
