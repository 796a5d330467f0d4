"""Training fidelity: does the trial predict the speedup of the user's training job?

For five candidates of the demo job (a DLRM), the trial's predicted speedup over fp32 at the job's
batch against the speedup the reference training loop (`bench/training_loop.py`, torchrec's public
API only) actually gets. Both sides take turns in the same way, so a shared machine's drift (its
speed wanders by 10-20% over seconds here) hits every candidate alike: one trial launch measures
the five candidates `turns` times, each time in a shuffled order, and one training launch trains
the five models taking turns likewise. Each turn's speedups are against the same turn's baseline;
the figures are medians over every turn of every launch.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

from scipy import stats

from autotuner.executors import Fabric
from bench.trials import DEMO_WORKLOAD, launch, torchrun

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = [
    ("fp32/fp32", 512),
    ("int8/int8", 1024),
    ("int8/int8", 512),
    ("fp32/fp32", 1024),
    ("fp16/fp16", 512),
]
BASELINE = CANDIDATES[0]


def _label(candidate: tuple[str, int]) -> str:
    precision, batch = candidate
    return f"{precision.split('/')[0]} b{batch}"


def _turns(turns: int, seed: int) -> list[tuple[str, int]]:
    """The candidates `turns` times over, each turn in a shuffled order."""
    rng, out = random.Random(seed), []
    for _ in range(turns):
        order = CANDIDATES[:]
        rng.shuffle(order)
        out += order
    return out


def _trial_round(rate: str | None, turns: int, warmup: int, iterations: int, seed: int) -> list[dict]:
    """Per turn, each candidate's samples/s as the trial measured it."""
    order = _turns(turns, seed)
    spec = {"workload": DEMO_WORKLOAD, "warmup": warmup, "iterations": iterations,
            "candidates": [{"fwd_precision": p.split("/")[0], "bwd_precision": p.split("/")[1], "batch_size": b}
                           for p, b in order]}  # fmt: skip
    result, _ = launch(spec, netns_rate=rate)
    n = len(CANDIDATES)
    return [{cand: c["samples_per_s"] for cand, c in zip(order[t * n:(t + 1) * n], result["candidates"][t * n:(t + 1) * n],
                                                          strict=True)} for t in range(turns)]  # fmt: skip


def _training_round(rate: str | None, turns: int, warmup: int, steps: int, seed: int) -> list[dict]:
    """Per turn, each candidate's samples/s as the reference training loop got it."""
    work = Path(tempfile.mkdtemp(prefix="bench-training-"))
    workload = work / "workload.json"
    workload.write_text(json.dumps(DEMO_WORKLOAD))
    args = [str(ROOT / "bench" / "training_loop.py"), "--workload", str(workload), "--rounds", str(turns),
            "--warmup", str(warmup), "--steps", str(steps), "--seed", str(seed), "--out", str(work / "r.json"),
            *(x for p, b in CANDIDATES for x in ("--candidate", f"{p}:{b}"))]  # fmt: skip
    proc = torchrun(args, netns_rate=rate)
    if not (work / "r.json").exists():
        raise RuntimeError(f"training loop failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    rates = json.loads((work / "r.json").read_text())["samples_per_s"]
    return [{(p, b): rates[f"{p}:{b}"][t] for p, b in CANDIDATES} for t in range(turns)]


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation (ties get their mean rank); 0 where either side is constant: no order to agree on."""
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return 0.0
    return float(stats.spearmanr(xs, ys).statistic)


def fidelity(rate: str | None, launches: int = 3, turns: int = 4, seed: int = 0) -> dict[str, Any]:
    trial_speedups: dict[tuple[str, int], list[float]] = {c: [] for c in CANDIDATES}
    training_speedups: dict[tuple[str, int], list[float]] = {c: [] for c in CANDIDATES}
    for i in range(launches):
        predicted = _trial_round(rate, turns, warmup=5, iterations=25, seed=seed + i)
        actual = _training_round(rate, turns, warmup=5, steps=25, seed=seed + 100 + i)
        for speedups, turns_measured in ((trial_speedups, predicted), (training_speedups, actual)):
            for turn in turns_measured:
                for c in CANDIDATES:
                    speedups[c].append(turn[c] / turn[BASELINE])
    rows = []
    for c in CANDIDATES:
        trial, training = statistics.median(trial_speedups[c]), statistics.median(training_speedups[c])
        rows.append({"candidate": _label(c), "trial_speedup": trial, "training_speedup": training,
                     "ratio": trial / training, "trial_rounds": trial_speedups[c],
                     "training_rounds": training_speedups[c]})  # fmt: skip
    others = [r for r in rows if r["candidate"] != _label(BASELINE)]
    return {
        "fabric": Fabric(rate).label() if rate else "unshaped loopback",
        "rounds": launches * turns,
        "launches": launches,
        "turns": turns,
        "rows": rows,
        "worst_ratio_error": max(abs(r["ratio"] - 1) for r in others),
        "spearman": spearman([r["trial_speedup"] for r in rows], [r["training_speedup"] for r in rows]),
    }
