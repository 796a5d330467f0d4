"""Record a landscape: real trial launches over a whole grid, for the replay executor.

    python -m bench.record_landscape --workload W.json --space S.yaml --repeats 2 --out L.json

Each env point of the space's grid (and each repeat) is one real local launch measuring every
in-process point; the results are stored per (env, candidate) with all repeats. Replaying the
file gives studies exactly these measurements, deterministically.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.space import load_space
from trials.spec import parse_workload

DROP = ("a2a_calls_by_rank",)


def record(
    workload: dict[str, Any],
    space_source: Any,
    *,
    repeats: int,
    iterations: int,
    warmup: int,
    nproc: int,
    fabric: str | None,
    log: Any = sys.stderr,
) -> dict[str, Any]:
    space = load_space(space_source)
    grid = space.env_grid()
    if grid is None:
        raise SystemExit(
            "the space's env dimensions must all be lists (or ranges with a step) to record a grid"
        )
    points = space.inproc_points(parse_workload(workload).default_pipeline)
    executor = LocalExecutor(fabric=Fabric(fabric) if fabric else None)
    recorded: dict[tuple[str, str], dict[str, Any]] = {}
    result: dict[str, Any] = {}
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="landscape-"))
    total = len(grid) * repeats
    for n, (env_point, repeat) in enumerate(((e, r) for r in range(repeats) for e in grid), 1):
        env = {**space.fixed_env, **env_point}
        spec = {"workload": workload, "candidates": [p.to_candidate() for p in points], "warmup": warmup,
                "iterations": iterations, "seed": repeat}  # fmt: skip
        launch = LaunchRequest(name=f"rec{n}", spec=spec, env=env, workdir=work / f"l{n}", nproc_per_node=nproc,
                               timeout_s=3600)  # fmt: skip
        outcome = executor.run(launch)
        if outcome.state != LaunchState.SUCCEEDED or outcome.result is None:
            raise SystemExit(f"launch {n} failed: {outcome.reason}\n{outcome.log_tail}")
        result = outcome.result
        for point, cand in zip(points, result["candidates"], strict=True):
            key = (json.dumps(env, sort_keys=True), point.key())
            entry = recorded.setdefault(key, {"env": env, "candidate": point.to_candidate(), "results": []})
            entry["results"].append({k: v for k, v in cand.items() if k not in DROP})
        print(
            f"[{n}/{total}] env {env or '{}'} repeat {repeat}: {time.monotonic() - started:.0f} s", file=log
        )
    return {
        **_about(workload, space, fabric, iterations, warmup, repeats, result),
        "points": list(recorded.values()),
    }


def _about(workload: dict[str, Any], space: Any, fabric: str | None, iterations: int, warmup: int, repeats: int,
           result: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """What a landscape was recorded from: where, how, and the stack of the last launch."""
    return {
        "description": "real trial measurements over a whole grid, for the replay executor",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "fabric": Fabric(fabric).label() if fabric else "unshaped loopback",
        "workload": workload,
        "space": space.model_dump(mode="json"),
        "iterations": iterations,
        "warmup": warmup,
        "repeats": repeats,
        **{
            k: result[k]
            for k in ("versions", "backend", "device", "device_name", "world_size")
            if k in result
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.record_landscape", description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True, type=Path)
    p.add_argument("--space", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--fabric", default=None, help="emulated fabric rate, e.g. 2gbit")
    args = p.parse_args(argv)
    data = record(json.loads(args.workload.read_text()), args.space, repeats=args.repeats,
                  iterations=args.iterations, warmup=args.warmup, nproc=args.nproc, fabric=args.fabric)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}: {len(data['points'])} points x {args.repeats} repeats", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
