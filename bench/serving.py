"""Serving benchmark: config fetches under concurrent load while a study writes, and the hook's latency.

    python -m bench.serving [--duration 10] [--connections 64] [--configs 10] [--out bench/out/serving.json]
    python -m bench.serving --against REF [--rounds 8] [--duration 8] [--hook-runs 20]

Load comes from a separate process (wrk, from Debian, one thread) against a real `autotuner serve`
(default 2 API workers), after a 3 s warm-up. The study that writes meanwhile runs on the replay
executor (recorded measurements), so trial processes do not take the machine's cores from the server.

`--against REF` compares this checkout's serving with commit REF's in one run: both services up side
by side, then wrk rounds against one at a time in ABBA order, so the machine's drift (10-20% over
seconds on a shared VM) falls on both sides alike. No study writes during these rounds: the two
commits' studies need not write at the same rate, and that would decide the comparison. Each round
loads plain fetches and fetches that carry a job's fingerprint header (what the hook sends since
configs are re-validated; a commit from before ignores it). Then the hook of each checkout, end to end
(`autotuner env`, a process per run), against its own service (up), a closed port (down, cached
config) and a socket that never answers (hanging), in ABBA order too.
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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.service import (  # noqa: E402
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


# A job's stack as the hook sends it (X-Autotuner-Fingerprint): what a fetch from a GPU node carries.
FINGERPRINT = "driver=550.54.15&gpu=NVIDIA+H100+80GB+HBM3&nccl=2.21.5&nodes=1"


def wrk(url: str, token: str, connections: int, duration_s: int, threads: int = 1,
        fingerprint: str | None = None) -> dict[str, Any]:  # fmt: skip
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    extra = ["-H", f"X-Autotuner-Fingerprint: {fingerprint}"] if fingerprint else []
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--latency", *extra,
           "-H", f"Authorization: Bearer {token}", url]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60, check=True)
    return {**parse_wrk(proc.stdout), "command": " ".join(cmd[:-3] + ["-H 'Authorization: Bearer ...'", url])}


def hook_timings(url: str, runs: int, env: dict[str, str], cwd: Path | None = None) -> dict[str, Any]:
    """`autotuner env` end to end, `runs` times; `cwd`: the checkout whose hook runs (default: this one)."""
    cmd = [sys.executable, "-m", "autotuner", "env", "--server", url, "--token", TOKENS["read"],
           "--cluster", "cpu-box", "--workload", "small"]  # fmt: skip
    if cwd is not None:
        env = {**env, "PYTHONPATH": str(cwd)}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env, cwd=cwd)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit(f"hook exited {proc.returncode}: {proc.stderr}")
    return {"median_ms": statistics.median(times) * 1e3, "max_ms": max(times) * 1e3, "runs": runs,
            "all_ms": [t * 1e3 for t in times]}  # fmt: skip


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


def abba(rounds: int) -> list[str]:
    """Which side each of 2 x `rounds` runs loads: baseline, this, this, baseline, ..."""
    return [("baseline", "this", "this", "baseline")[i % 4] for i in range(2 * rounds)]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per side over the rounds, and this checkout's ratios to the baseline."""
    sides = {}
    for side in ("this", "baseline"):
        mine = [r for r in runs if r["side"] == side]
        if not mine:
            continue
        sides[side] = {
            "requests_per_s": statistics.median(r["requests_per_s"] for r in mine),
            "p50_ms": statistics.median(r["p50_ms"] for r in mine),
            "p99_ms": statistics.median(r["p99_ms"] for r in mine),
            "errors": sum(r["non_2xx"] + r["socket_errors"] for r in mine),
            "rounds": len(mine),
        }
    return {
        **sides,
        "ratio_requests_per_s": sides["this"]["requests_per_s"] / sides["baseline"]["requests_per_s"],
        "ratio_p50": sides["this"]["p50_ms"] / sides["baseline"]["p50_ms"],
        "ratio_p99": sides["this"]["p99_ms"] / sides["baseline"]["p99_ms"],
    }


def ab_table(result: dict[str, Any], what: str = "config fetch") -> Table:
    table = Table("", "req/s", "p50 ms", "p99 ms", "errors", box=box.SIMPLE, caption="medians over the rounds",
                  title=f"{what}, {result['connections']} connections, {result['this']['rounds']} rounds a side")  # fmt: skip
    for name, side in (("this checkout", result["this"]), (result["ref"], result["baseline"])):
        table.add_row(name, f"{side['requests_per_s']:,.0f}", f"{side['p50_ms']:.1f}", f"{side['p99_ms']:.1f}",
                      str(side["errors"]))  # fmt: skip
    table.add_row("ratio", *(f"{result[f'ratio_{k}']:.2f}x" for k in ("requests_per_s", "p50", "p99")), "")
    return table


def hook_table(result: dict[str, Any]) -> Table:
    hooks = result["hook"]
    table = Table("", "up ms", "down ms (cached)", "hanging ms (cached)", box=box.SIMPLE,
                  title=f"hook end to end (autotuner env), {hooks['runs']} runs a side each, ABBA",
                  caption="medians; hanging also its max: the bound is 2 s")  # fmt: skip
    for name, side in (("this checkout", hooks["this"]), (result["ref"], hooks["baseline"])):
        table.add_row(name, f"{side['up']['median_ms']:.0f}", f"{side['down']['median_ms']:.0f}",
                      f"{side['hanging']['median_ms']:.0f} (max {side['hanging']['max_ms']:.0f})")  # fmt: skip
    table.add_row("ratio", *(f"{hooks['ratio'][k]:.2f}x" for k in ("up", "down", "hanging")))
    return table


def gpu_node_env(root: Path) -> dict[str, str]:
    """The environment of a job on a GPU node, as far as the hook's fingerprint reads it: NCCL and an
    aws-ofi-nccl plugin (2 MB, its version string at the end) on LD_LIBRARY_PATH. This box has no
    /proc/driver/nvidia: the driver and GPU come from AUTOTUNER_FINGERPRINT, read the same way."""
    lib = root / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libnccl.so.2.21.5").write_bytes(b"\x7fELF")
    if not (lib / "libnccl.so.2").exists():
        (lib / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    (lib / "libnccl-net.so").write_bytes(b"\0" * (2 << 20) + b"NET/OFI Initializing aws-ofi-nccl 1.9.1-aws\0")
    return {
        "LD_LIBRARY_PATH": str(lib),
        "AUTOTUNER_FINGERPRINT": "driver=550.54.15&gpu=NVIDIA H100 80GB HBM3",
    }


def hook_ab(urls: dict[str, str], trees: dict[str, Path], runs: int, tmp: Path) -> dict[str, Any]:
    """Each checkout's hook against its own service (up), a closed port and a hanging socket (down and
    hanging: from the config it cached when up), in ABBA order, `runs` runs a side for up."""
    servers = {side: url.split("/v1/")[0] for side, url in urls.items()}
    node = gpu_node_env(tmp / "node")  # what the hook finds on a GPU node (a commit from before ignores it)
    envs = {
        side: {**os.environ, **node, "AUTOTUNER_CACHE_DIR": str(tmp / f"hook-cache-{side}")} for side in urls
    }
    closed = f"http://127.0.0.1:{free_port()}"
    times: dict[str, dict[str, list[float]]] = {side: {"up": [], "down": [], "hanging": []} for side in urls}
    with socket.socket() as hang:  # accepts connections, never answers
        hang.bind(("127.0.0.1", 0))
        hang.listen(64)
        hanging = f"http://127.0.0.1:{hang.getsockname()[1]}"
        for side in urls:  # warm: each side's cache holds its config
            hook_timings(servers[side], 1, envs[side], trees[side])
        for side in abba(runs):
            for kind, url, n in (("up", servers[side], 2), ("down", closed, 1), ("hanging", hanging, 1)):
                times[side][kind] += hook_timings(url, n, envs[side], trees[side])["all_ms"]
    out: dict[str, Any] = {"runs": runs}
    for side in urls:
        out[side] = {kind: {"median_ms": statistics.median(v), "max_ms": max(v), "runs": len(v)}
                     for kind, v in times[side].items()}  # fmt: skip
    out["ratio"] = {
        k: out["this"][k]["median_ms"] / out["baseline"][k]["median_ms"] for k in ("up", "down", "hanging")
    }
    return out


def _commit(ref: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"--against {ref!r}: not a commit of {ROOT}")
    return proc.stdout.strip()


@contextmanager
def _checkout(commit: str) -> Iterator[Path]:
    """`commit` checked out in a temporary worktree (the repository's own checkout is left alone)."""
    with tempfile.TemporaryDirectory(prefix="bench-serving-ab-") as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), commit],
                       check=True)  # fmt: skip
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


@contextmanager
def _served(tree: Path, log: Path) -> Iterator[str]:
    """A service of the checkout at `tree` with the demo config published; yields the config URL."""
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "serve_tree.py")], cwd=tree,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    try:
        url = proc.stdout.readline().strip()  # the launcher's own deadlines bound this wait
        if not url:
            proc.wait(timeout=30)
            raise SystemExit(f"the service of {tree} did not start:\n{log.read_text()[-2000:]}")
        yield url
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def against(ref: str, rounds: int, duration_s: int, connections: int, hook_runs: int = 0) -> dict[str, Any]:
    commit = _commit(ref)
    runs, fingerprinted = [], []
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-serving-logs-")))
        tree = stack.enter_context(_checkout(commit))
        urls = {"this": stack.enter_context(_served(ROOT, logs / "this.log")),
                "baseline": stack.enter_context(_served(tree, logs / "baseline.log"))}  # fmt: skip
        for url in urls.values():
            wrk(url, TOKENS["read"], connections, 3)  # warm-up
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=Console(stderr=True)) as progress:  # fmt: skip
            task = progress.add_task(f"ABBA rounds against {ref}", total=2 * rounds)
            for side in abba(rounds):
                runs.append({"side": side, **wrk(urls[side], TOKENS["read"], connections, duration_s)})
                fingerprinted.append({"side": side, **wrk(urls[side], TOKENS["read"], connections, duration_s,
                                                          fingerprint=FINGERPRINT)})  # fmt: skip
                progress.advance(task)
        hooks = hook_ab(urls, {"this": ROOT, "baseline": tree}, hook_runs, logs) if hook_runs else None
    this = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    out = {"this_commit": this, "ref": ref, "ref_commit": commit, "connections": connections,
           "duration_s": duration_s, **summarise(runs), "runs": runs}  # fmt: skip
    out["with_fingerprint"] = {"connections": connections, "ref": ref, "fingerprint": FINGERPRINT,
                               **summarise(fingerprinted), "runs": fingerprinted}  # fmt: skip
    if hooks is not None:
        out["hook"] = hooks
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.serving", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--configs", type=int, default=0, help="extra stored configs beside the fetched one")
    p.add_argument("--hook-runs", type=int, default=20)
    p.add_argument("--against", metavar="REF", help="compare with this commit's serving, in ABBA rounds")
    p.add_argument("--rounds", type=int, default=8, help="rounds per side with --against")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.against:
        result = against(args.against, args.rounds, args.duration, args.connections, args.hook_runs)
        Console().print(ab_table(result))
        Console().print(ab_table(result["with_fingerprint"], "config fetch with a job's fingerprint header"))
        if "hook" in result:
            Console().print(hook_table(result))
    else:
        result = run(args.duration, args.connections, args.configs, args.hook_runs)
    text = json.dumps(result, indent=2)
    if not args.against:
        print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    from bench.scratch import scratch

    with scratch():  # its store and runs, removed at the end
        sys.exit(main())
