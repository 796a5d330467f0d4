"""Trial benchmarks: efficiency (amortised start-up), measurement noise, fidelity, and cost scaling.

Each launch is a real `torchrun` of `trials.run` on this machine; wall time is measured from outside.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from autotuner.executors.local.executor import LAUNCH_TAG, Fabric, signal_all, tagged

ROOT = Path(__file__).resolve().parent.parent
TEN = json.loads((ROOT / "trials" / "examples" / "ten-candidates.json").read_text())
DEMO_WORKLOAD = json.loads((ROOT / "deploy" / "examples" / "workload-demo.json").read_text())
# The all-to-all fidelity compares comm calls with a plain loop of the same calls: the sparse part alone.
SPARSE_WORKLOAD = {k: v for k, v in DEMO_WORKLOAD.items() if k != "dense"}


def new_tag(name: str) -> str:
    """A launch's tag: set as AUTOTUNER_LAUNCH in its environment, which every process it starts
    inherits (torchrun's workers too, in sessions of their own), so `reap` finds them all."""
    return f"bench-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def reap(tag: str, grace_s: float = 5.0) -> int:
    """End every process tagged `tag` (the local executor's reaper finds them): SIGTERM, up to
    `grace_s` for them to go, then SIGKILL until none is left (torchrun may fork meanwhile).
    Returns how many there were."""
    found = tagged(tag)
    if not found:
        return 0
    signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and tagged(tag):
        time.sleep(0.05)
    for _ in range(50):
        left = tagged(tag)
        if not left:
            break
        found |= left
        signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return len(found)


def torchrun(
    args: list[str],
    nproc: int = 2,
    netns_rate: str | None = None,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess:
    """`torchrun --standalone` of `args` (a module's or a script's) on this machine; with `netns_rate`,
    inside a fresh network namespace whose loopback is limited to that rate (an emulated fabric);
    `env`: added to this process's environment. Past `timeout` (subprocess.TimeoutExpired) or on any
    other way out, no process of the launch is left: its workers too (sessions of their own)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    ns = None
    if netns_rate:
        ns = f"atb-{os.getpid() % 100000}"
        for step in Fabric(netns_rate).setup(ns):
            subprocess.run(step, check=True, capture_output=True)
        cmd = ["ip", "netns", "exec", ns, *cmd]
    tag = new_tag("torchrun")
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {}), LAUNCH_TAG: tag},
        )  # fmt: skip
    finally:
        reap(tag)
        if ns:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def launch(
    spec: dict[str, Any], nproc: int = 2, netns_rate: str | None = None
) -> tuple[dict[str, Any], float]:
    """Run one trial launch; returns (result, wall seconds measured from outside, torchrun included)."""
    work = Path(tempfile.mkdtemp(prefix="bench-trial-"))
    (work / "spec.json").write_text(json.dumps(spec))
    args = ["-m", "trials.run", "--spec", str(work / "spec.json"), "--out", str(work / "r.json"), "--quiet"]
    started = time.perf_counter()
    proc = torchrun(args, nproc, netns_rate)
    wall = time.perf_counter() - started
    if not (work / "r.json").exists():
        raise RuntimeError(f"trial failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads((work / "r.json").read_text())
    shutil.rmtree(work, ignore_errors=True)
    return result, wall


def efficiency() -> dict[str, Any]:
    """Share of a launch's wall time spent in measured iterations: 1 candidate vs 10 in one launch."""
    single = copy.deepcopy(TEN)
    single["candidates"] = single["candidates"][:1]
    one, one_wall = launch(single)
    ten, ten_wall = launch(TEN)
    share_one = sum(c["measured_s"] for c in one["candidates"]) / one_wall
    share_ten = sum(c["measured_s"] for c in ten["candidates"] if c["status"] == "ok") / ten_wall
    return {
        "spec": "trials/examples/ten-candidates.json (8 tables x dim 128, 30 iterations each, 2 CPU ranks)",
        "single_candidate": {
            "wall_s": one_wall,
            "measured_s": one["candidates"][0]["measured_s"],
            "setup_s": one["setup_s"],
            "share": share_one,
        },
        "ten_candidates": {
            "wall_s": ten_wall,
            "measured_s": share_ten * ten_wall,
            "setup_s": ten["setup_s"],
            "share": share_ten,
            "all_ok": all(c["status"] == "ok" for c in ten["candidates"]),
            "quant_error_fwd": {
                f"{c['fwd_precision']}/{c['bwd_precision']}": c["quant_error"]["fwd_rel_l2"]
                for c in ten["candidates"][:5]
            },
        },
        "ratio": share_ten / share_one,
    }


def noise(launches: int = 5) -> dict[str, Any]:
    """The same candidate in separate launches: CV of samples/s across launches, per statistic."""
    spec = {"workload": DEMO_WORKLOAD, "warmup": 20, "iterations": 200,
            "candidates": [{"fwd_precision": "fp16", "bwd_precision": "fp16", "batch_size": 512}]}  # fmt: skip
    stats, compute_ms, steal = [], [], []
    for _ in range(launches):
        before = _cpu_ticks()
        result, _ = launch(spec)
        after = _cpu_ticks()
        stats.append(result["candidates"][0]["iter_ms"])
        compute_ms.append(result["candidates"][0]["breakdown_ms"]["compute"])
        steal.append((after[1] - before[1]) / max(1, after[0] - before[0]))

    def cv(key: str) -> float:
        rates = [1000 * 512 * 2 / s[key] for s in stats]
        return statistics.stdev(rates) / statistics.mean(rates)

    return {
        "setup": "demo workload (4 tables x dim 64), fp16/fp16, batch 512, 2 CPU ranks; warmup 20, "
        "200 measured iterations per launch",
        "launches": launches,
        "samples_per_s": [1000 * 512 * 2 / s["median"] for s in stats],
        "iter_ms_median": [s["median"] for s in stats],
        "cv_within_launch": statistics.mean(s["cv"] for s in stats),
        "cv_median_statistic": cv("median"),
        "cv_p10_statistic": cv("p10"),
        "cv_mean_statistic": cv("mean"),
        # The machine's own speed: the training thread's CPU time per step (same work every launch),
        # and the share of the CPUs the hypervisor took (steal) while each launch ran.
        "compute_cpu_ms": compute_ms,
        "cv_compute_cpu_time": statistics.stdev(compute_ms) / statistics.mean(compute_ms),
        "steal_share": steal,
    }


def _cpu_ticks() -> tuple[int, int]:
    """(all, steal) CPU ticks of the machine so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), fields[7] if len(fields) > 7 else 0


def fidelity(rate: str | None) -> dict[str, Any]:
    """Trial all-to-all bandwidth vs a plain all_to_all_single loop of the same calls, same launch."""
    spec = {"workload": SPARSE_WORKLOAD, "warmup": 3, "iterations": 30, "extra": {"fidelity": True},
            "candidates": [{"fwd_precision": p, "bwd_precision": p, "batch_size": 512}
                           for p in ("fp32", "fp16", "int8")]}  # fmt: skip
    result, _ = launch(spec, netns_rate=rate)
    rows = [{"candidate": f"{result['candidates'][f['candidate']]['fwd_precision']} b512",
             "trial_algbw_gbps": f["trial_algbw_gbps"], "raw_algbw_gbps": f["raw_algbw_gbps"],
             "ratio": f["ratio"]} for f in result["fidelity"]]  # fmt: skip
    return {
        "fabric": f"emulated: loopback limited to {rate} (tbf, burst {Fabric.burst}, network namespace)"
        if rate
        else "unshaped loopback",
        "rows": rows,
        "median_ratio": statistics.median(r["ratio"] for r in rows),
    }


def cost_scaling() -> dict[str, Any]:
    """What a launch costs as the model and the job grow: tables 4 -> 16, ranks 1 -> 2."""

    def spec(tables: int) -> dict[str, Any]:
        return {"workload": {"name": f"t{tables}", "tables": [
                    {"name": f"t{i}", "num_embeddings": 20000, "embedding_dim": 64, "pooling_factor": 4}
                    for i in range(tables)]},
                "warmup": 3, "iterations": 20,
                "candidates": [{"fwd_precision": "fp16", "bwd_precision": "fp16", "batch_size": 512}]}  # fmt: skip

    rows = []
    for tables, nproc in ((4, 2), (16, 2), (4, 1)):
        result, wall = launch(spec(tables), nproc=nproc)
        cand = result["candidates"][0]
        rows.append({"tables": tables, "ranks": nproc, "wall_s": wall, "setup_s": result["setup_s"],
                     "iter_ms": cand["iter_ms"]["median"], "a2a_ms": cand["a2a_ms"]["median"],
                     "a2a_bytes_per_iter": cand["a2a_bytes_per_iter"]})  # fmt: skip
    return {"rows": rows,
            "setup_ratio_16_vs_4_tables": rows[1]["setup_s"] / rows[0]["setup_s"],
            "iter_ratio_16_vs_4_tables": rows[1]["iter_ms"] / rows[0]["iter_ms"],
            "iter_ratio_2_vs_1_ranks": rows[0]["iter_ms"] / rows[2]["iter_ms"]}  # fmt: skip
