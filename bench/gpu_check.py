"""`make gpu-check`: the dense trial on CUDA + NCCL, one short script for a lent GPU (< 5 minutes).

    python -m bench.gpu_check [--out bench/out/gpu-check.json] [--device cuda]

One launch of the demo job (DLRM) on one GPU (world size 1, NCCL): every comm precision under the
`sparse_dist` and `semi_sync` pipelines, with NCCL_DEBUG=INFO parsed into what NCCL reported. Writes
a JSON with the result's facts and a list of checks, prints a table, and exits 1 when a check fails.
Needs torch, torchrec and fbgemm-gpu built for CUDA (`make setup FLAVOR=cuda`). `--device cpu` runs
the same script where there is no GPU: the plumbing runs, and the CUDA-only checks fail as they should.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.trials import DEMO_WORKLOAD, torchrun

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8")
PIPELINES = ("sparse_dist", "semi_sync")


def spec(device: str, iterations: int) -> dict[str, Any]:
    return {"workload": DEMO_WORKLOAD, "device": device, "warmup": 5, "iterations": iterations,
            "candidates": [{"fwd_precision": p, "bwd_precision": p, "batch_size": 512, "pipeline": pipe}
                           for pipe in PIPELINES for p in PRECISIONS]}  # fmt: skip


def checks(result: dict[str, Any], device: str) -> list[dict[str, Any]]:
    """What a working GPU path shows: CUDA + NCCL, NCCL's own report, every candidate measured."""
    cands = result.get("candidates", [])
    out = [
        {"check": f"ran on {device}", "ok": result.get("device") == device, "saw": result.get("device")},
        {"check": "NCCL backend", "ok": device != "cuda" or result.get("backend") == "nccl",
         "saw": result.get("backend")},
        {"check": "NCCL_DEBUG parsed (version, network)", "ok": device != "cuda" or bool(result.get("nccl_effective")),
         "saw": result.get("nccl_effective")},
    ]  # fmt: skip
    for c in cands:
        label = f"{c['fwd_precision']} {c['pipeline']}"
        ok = (
            c["status"] == "ok"
            and c.get("effective_pipeline") == c["pipeline"]
            and bool(c.get("breakdown_ms"))
        )
        out.append(
            {"check": f"candidate {label}", "ok": ok, "saw": c.get("error") or c.get("effective_pipeline")}
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "gpu-check.json"))
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--iterations", type=int, default=30, help="measured steps per candidate")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    (work / "spec.json").write_text(json.dumps(spec(args.device, args.iterations)))
    started = time.perf_counter()
    proc = torchrun(
        ["-m", "trials.bench", "--spec", str(work / "spec.json"), "--out", str(work / "r.json")], nproc=1
    )
    wall = time.perf_counter() - started
    result = json.loads((work / "r.json").read_text()) if (work / "r.json").exists() else {}
    found = checks(result, args.device) if result else [
        {"check": "the launch wrote a result", "ok": False, "saw": proc.stderr[-2000:]}
    ]  # fmt: skip
    report = {
        "label": f"gpu-check on {result.get('device_name', 'unknown device')} ({args.device})",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": wall,
        "versions": result.get("versions"),
        "nccl_effective": result.get("nccl_effective"),
        "candidates": [
            {k: c.get(k) for k in ("fwd_precision", "pipeline", "status", "error", "effective_fwd_precision",
                                   "effective_bwd_precision", "effective_pipeline", "samples_per_s", "breakdown_ms",
                                   "quant_error", "a2a_bytes_per_iter", "dense_allreduce_bytes")}
            for c in result.get("candidates", [])
        ],
        "checks": found,
        "ok": all(c["ok"] for c in found),
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for c in found:
        print(
            f"{'ok  ' if c['ok'] else 'FAIL'} {c['check']}" + ("" if c["ok"] else f": {str(c['saw'])[:120]}")
        )
    print(f"{report['label']}: {'all checks passed' if report['ok'] else 'some checks failed'} in {wall:.0f} s; "
          f"wrote {args.out}")  # fmt: skip
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
