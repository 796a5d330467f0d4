"""Training fidelity: does the trial predict the speedup of the user's training job?

For five candidates of the demo job (a DLRM), the trial's predicted speedup over fp32 at the job's
batch against the speedup the reference training loop (`bench/training_loop.py`, torchrec's public
API only) actually gets. Interleaved in rounds (one trial launch measuring all five, then one
training launch per candidate, in a shuffled order) so a machine's drift hits both; each round's
speedups are against that round's own baseline, and the figures are medians over rounds.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

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


def _trial_round(rate: str | None, warmup: int, iterations: int) -> dict[tuple[str, int], float]:
    spec = {"workload": DEMO_WORKLOAD, "warmup": warmup, "iterations": iterations,
            "candidates": [{"fwd_precision": p.split("/")[0], "bwd_precision": p.split("/")[1], "batch_size": b}
                           for p, b in CANDIDATES]}  # fmt: skip
    result, _ = launch(spec, netns_rate=rate)
    return {cand: c["samples_per_s"] for cand, c in zip(CANDIDATES, result["candidates"], strict=True)}


def _training(candidate: tuple[str, int], rate: str | None, warmup: int, steps: int) -> float:
    work = Path(tempfile.mkdtemp(prefix="bench-training-"))
    workload = work / "workload.json"
    workload.write_text(json.dumps(DEMO_WORKLOAD))
    precision, batch = candidate
    args = [str(ROOT / "bench" / "training_loop.py"), "--workload", str(workload), "--precision", precision,
            "--batch", str(batch), "--warmup", str(warmup), "--steps", str(steps), "--out", str(work / "r.json")]  # fmt: skip
    proc = torchrun(args, netns_rate=rate)
    if not (work / "r.json").exists():
        raise RuntimeError(f"training loop failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads((work / "r.json").read_text())["samples_per_s"]


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation (no ties expected among measured speedups; ties get their mean rank)."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else 0.0


def fidelity(rate: str | None, rounds: int = 5, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    trial_speedups: dict[tuple[str, int], list[float]] = {c: [] for c in CANDIDATES}
    training_speedups: dict[tuple[str, int], list[float]] = {c: [] for c in CANDIDATES}
    for _ in range(rounds):
        predicted = _trial_round(rate, warmup=10, iterations=60)
        order = CANDIDATES[:]
        rng.shuffle(order)
        actual = {c: _training(c, rate, warmup=10, steps=60) for c in order}
        for c in CANDIDATES:
            trial_speedups[c].append(predicted[c] / predicted[BASELINE])
            training_speedups[c].append(actual[c] / actual[BASELINE])
    rows = []
    for c in CANDIDATES:
        trial, training = statistics.median(trial_speedups[c]), statistics.median(training_speedups[c])
        rows.append({"candidate": _label(c), "trial_speedup": trial, "training_speedup": training,
                     "ratio": trial / training, "trial_rounds": trial_speedups[c],
                     "training_rounds": training_speedups[c]})  # fmt: skip
    others = [r for r in rows if r["candidate"] != _label(BASELINE)]
    return {
        "fabric": Fabric(rate).label() if rate else "unshaped loopback",
        "rounds": rounds,
        "rows": rows,
        "worst_ratio_error": max(abs(r["ratio"] - 1) for r in others),
        "spearman": spearman([r["trial_speedup"] for r in rows], [r["training_speedup"] for r in rows]),
    }
