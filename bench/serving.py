"""Serving benchmark: config fetches under concurrent load while a study writes, and the hook's latency.

    python -m bench.serving [--duration 10] [--connections 64] [--configs 10] [--out bench/out/serving.json]

Load comes from a separate process (wrk, from Debian, one thread) against a real `autotuner serve`
(default 2 API workers), after a 3 s warm-up. The study that writes meanwhile runs on the replay
executor (recorded measurements), so trial processes do not take the machine's cores from the server.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.conftest import (  # noqa: E402
    TOKENS,
    free_port,
    make_server,
    replay_study_body,
    wait_for_config,
    wait_for_state,
)

_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise ValueError(f"cannot read a latency from {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_wrk(output: str) -> dict[str, Any]:
    """req/s, latency percentiles (ms), errors from `wrk --latency` output."""
    out: dict[str, Any] = {"requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))}
    for pct in ("50", "75", "90", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", output, re.M)
        out[f"p{pct}_ms"] = _ms(m.group(1)) if m else None
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    out["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    out["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"(\d+) requests in", output)
    out["requests"] = int(m.group(1)) if m else None
    return out


def wrk(url: str, token: str, connections: int, duration_s: int, threads: int = 1) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--latency",
           "-H", f"Authorization: Bearer {token}", url]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60, check=True)
    return {**parse_wrk(proc.stdout), "command": " ".join(cmd[:-3] + ["-H 'Authorization: Bearer ...'", url])}


def hook_timings(url: str, runs: int, env: dict[str, str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "autotuner", "env", "--server", url, "--token", TOKENS["read"],
           "--cluster", "cpu-box", "--workload", "small"]  # fmt: skip
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit(f"hook exited {proc.returncode}: {proc.stderr}")
    times.sort()
    return {"median_ms": statistics.median(times) * 1e3, "max_ms": times[-1] * 1e3, "runs": runs}


def seed_configs(server_data: Path, db_url: str, count: int) -> None:
    """`count` extra published configs (other workloads), straight into the store."""
    from autotuner.store import Store

    store = Store(db_url)
    for i in range(count):
        name = f"bulk-{i:05d}"
        store.upsert_workload(name, {"name": name, "tables": []})
        store.publish_config(cluster="cpu-box", workload=name, nodes=1 + i % 8, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             fwd_precision="fp16", bwd_precision="fp16", batch_size=1024, sharding="table_wise")  # fmt: skip
    store.dispose()


def run(duration_s: int, connections: int, extra_configs: int, hook_runs: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    server = make_server(tmp)
    db_url = f"sqlite:///{server.data_dir / 'autotuner.db'}"
    server.start()
    try:
        client = server.client("write")
        study = client.post("/v1/studies", json=replay_study_body("publish")).json()
        wait_for_state(client, study["id"], ("done",))
        wait_for_config(client)
        if extra_configs:
            seed_configs(server.data_dir, db_url, extra_configs)
            last = f"bulk-{extra_configs - 1:05d}"
            assert (
                wait_for_config(client, workload=last, timeout_s=60).status_code == 200
            )  # cached before load
        # A long study keeps writing trials and launches while the load runs.
        writer = client.post("/v1/studies", json=replay_study_body("writer", trials=500)).json()
        time.sleep(1)
        url = f"{server.url}/v1/configs/cpu-box/small"
        wrk(url, TOKENS["read"], connections, 3)  # warm-up: connections, worker code paths, caches
        load = wrk(url, TOKENS["read"], connections, duration_s)
        trials_written = client.get(f"/v1/studies/{writer['id']}/trials", params={"limit": 1}).json()["count"]
        client.post(f"/v1/studies/{writer['id']}/cancel")
        env = {**os.environ, "AUTOTUNER_CACHE_DIR": str(tmp / "hook-cache")}
        up = hook_timings(server.url, hook_runs, env)
        down = hook_timings(f"http://127.0.0.1:{free_port()}", max(3, hook_runs // 4), env)
        with socket.socket() as hang:  # accepts connections, never answers
            hang.bind(("127.0.0.1", 0))
            hang.listen(64)
            hanging = hook_timings(f"http://127.0.0.1:{hang.getsockname()[1]}", 3, env)
    finally:
        server.kill()
    return {
        "stored_configs": 1 + extra_configs,
        "connections": connections,
        "duration_s": duration_s,
        "fetch": load,
        "trials_written_during_load": trials_written,
        "hook_up": up,
        "hook_down_cached": down,
        "hook_hanging_cached": hanging,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.serving", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--configs", type=int, default=0, help="extra stored configs beside the fetched one")
    p.add_argument("--hook-runs", type=int, default=20)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = run(args.duration, args.connections, args.configs, args.hook_runs)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
