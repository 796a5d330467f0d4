"""The convergence check's cost and what it decides: real 2-rank quality launches on the demo tables,
the launch the engine plans today against the one it planned before (issue 24), in turns.

Before: one model seed per variant plus a second seed of the baseline, scored once at the end (the
baseline, its second seed, the tuned config and each knob alone: 5 models). Now: every variant under
k paired seeds, a bigger batch trained past the common budget with held-out checkpoints (4 x 3 = 12
models). The figure is the wall time of each and their ratio; beside it, what today's launch finds:
the per-seed log losses, each knob's paired delta with its 95% CI and verdict, and the batch change's
sample efficiency (samples to the baseline's final log loss).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotuner.tuning.quality import CHECKPOINTS, Variant, extension, judge, time_to_quality

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = json.loads((ROOT / "deploy" / "examples" / "workload-demo.json").read_text())
SAMPLES = 1 << 17  # the default quality_samples
K = 3  # the default quality_seeds
BASE = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 512, "pipeline": "sparse_dist"}
PRECISION = {"fwd_precision": "fp8", "bwd_precision": "bf16"}  # the demo's usual finalist: fp8/bf16 at 1024
BATCH = {"batch_size": 1024}
LIMIT = 0.002


def _quality(checkpoints: int) -> dict[str, Any]:
    return {"train_samples": SAMPLES, "eval_samples": max(8192, SAMPLES // 8), "data_seed": 0,
            **({"checkpoints": checkpoints} if checkpoints > 1 else {})}  # fmt: skip


def before_spec() -> dict[str, Any]:
    """The launch of the check as it was: one seed each, a second seed of the baseline."""
    cands = [{**BASE, "model_seed": 0}, {**BASE, "model_seed": 1}, {**BASE, **PRECISION, **BATCH, "model_seed": 0},
             {**BASE, **PRECISION, "model_seed": 0}, {**BASE, **BATCH, "model_seed": 0}]  # fmt: skip
    return {"workload": WORKLOAD, "quality": _quality(1), "candidates": cands}


VARIANTS: dict[str, dict[str, Any]] = {"baseline": {}, "tuned": {**PRECISION, **BATCH}, "only_precision": PRECISION,
                                       "only_batch": BATCH}  # fmt: skip


def after_spec() -> dict[str, Any]:
    """The launch the engine plans now for the same variants (autotuner.tuning.quality): k paired
    seeds, the batch change trained past the budget (no ladder gain known here: the default extension)
    until it reaches its seed's baseline (the baseline's candidates come first: index = seed)."""
    cands = []
    for change in VARIANTS.values():
        for seed in range(K):
            extra = (
                {"train_samples": int(SAMPLES * extension(None)), "stop_at": seed}
                if "batch_size" in change
                else {}
            )
            cands.append({**BASE, **change, "model_seed": seed, **extra})
    return {"workload": WORKLOAD, "quality": _quality(CHECKPOINTS), "candidates": cands}


def launch(spec: dict[str, Any], workdir: Path) -> tuple[dict[str, Any], float]:
    """One real 2-rank quality launch: its result and wall time (seconds, as the executor sees it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "spec.json").write_text(json.dumps(spec))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "trials.run", "--spec", "spec.json", "--out", "result.json", "--quiet"],
                          cwd=workdir, capture_output=True, text=True, timeout=900, env=dict(os.environ))  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"quality launch failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads((workdir / "result.json").read_text()), wall


def findings(result: dict[str, Any]) -> dict[str, Any]:
    """Today's verdicts on the launch: per-seed losses, paired deltas with CIs, the batch's efficiency."""
    scores = [c["quality"] for c in result["candidates"]]
    by = {name: scores[i * K : (i + 1) * K] for i, name in enumerate(VARIANTS)}
    variants = [Variant(n, None, "batch_size" in VARIANTS[n]) for n in VARIANTS]
    evidence = judge(by, ["precision", "batch"], variants, LIMIT, None, cost_s=result["wall_s"])
    ttq = time_to_quality(by["only_batch"], by["baseline"], None)
    pairs = {n: [s["logloss"] - b["logloss"] for s, b in zip(by[n], by["baseline"], strict=True)]
             for n in VARIANTS if n != "baseline"}  # fmt: skip
    return {
        "per_seed": {n: [s["logloss"] for s in by[n]] for n in VARIANTS},
        "paired_sd": {n: statistics.stdev(d) for n, d in pairs.items()},
        "variants": {
            n: f.model_dump(
                mode="json",
                include={"delta", "ci_low", "ci_high", "verdict", "k_to_resolve", "equal_samples_verdict"},
            )
            for n, f in evidence.variants.items()
        },
        "seed_spread": evidence.seed_spread,
        "knobs": {k: f.model_dump(mode="json") for k, f in evidence.knobs.items()},
        "batch_efficiency": ttq.model_dump(
            mode="json", include={"samples", "efficiency", "efficiency_ci", "never"}
        ),
        "train_s": sum(s["train_s"] for s in scores),
        "eval_s": sum(s.get("eval_s", 0.0) for s in scores),
    }


def run(rounds: int = 2) -> dict[str, Any]:
    """Before and after in turns (ABAB...), so the machine's drift falls on both."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    walls: dict[str, list[float]] = {"before": [], "after": []}
    last: dict[str, Any] = {}
    for i in range(rounds):
        for name, spec in (("before", before_spec()), ("after", after_spec())):
            result, wall = launch(spec, tmp / f"{name}-{i}")
            walls[name].append(wall)
            last[name] = result
    before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
    return {
        "models": {"before": len(before_spec()["candidates"]), "after": len(after_spec()["candidates"])},
        "k": K,
        "samples": SAMPLES,
        "checkpoints": CHECKPOINTS,
        "wall_s": walls,
        "before_s": before,
        "after_s": after,
        "ratio": after / before,
        "result_wall_s": {"before": last["before"]["wall_s"], "after": last["after"]["wall_s"]},
        "after": findings(last["after"]),
    }
