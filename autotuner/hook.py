"""The pre-job hook: `autotuner env` prints a job's tuned variables, `autotuner exec` runs a command with them.

It runs at the start of every training job, so it must never be the reason a job does not start:
fail-open. If the service is down, slow or answers with an error, it falls back to the last config it
cached for this (server, cluster, workload, nodes), or to nothing; it warns on stderr, exits 0, and
gives up within a hard time bound. Machine output (the export lines) goes alone to stdout.

Standard library only on the service path (no HTTP client, no SQLAlchemy, no torch): it is imported
and run on every job start.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from autotuner.configs import FORMATS, render

DEFAULT_TIMEOUT_S = 1.5  # the whole fetch; the hook's bound (2 s) leaves room for start-up


def cache_dir() -> Path:
    base = os.environ.get("AUTOTUNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nccl-autotuner"
    )
    return Path(base) / "hook"


def _cache_path(server: str, cluster: str, workload: str, nodes: int | None) -> Path:
    key = hashlib.sha256(f"{server}|{cluster}|{workload}|{nodes}".encode()).hexdigest()[:32]
    return cache_dir() / f"{key}.json"


def _warn(message: str) -> None:
    print(f"autotuner: {message}", file=sys.stderr)


def fetch_from_server(
    server: str, token: str | None, cluster: str, workload: str, nodes: int | None, timeout_s: float
) -> dict[str, Any] | None:
    """GET /v1/configs/{cluster}/{workload} within a hard deadline. None: nothing published (404).

    urllib's timeout bounds each socket operation, not the request: a server that trickles bytes
    could hold a job forever. The request runs in a daemon thread that we stop waiting for.
    """
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["config"] = _get(server, token, cluster, workload, nodes, timeout_s)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["config"]


def _get(
    server: str, token: str | None, cluster: str, workload: str, nodes: int | None, timeout_s: float
) -> dict[str, Any] | None:
    path = f"/v1/configs/{urllib.parse.quote(cluster, safe='')}/{urllib.parse.quote(workload, safe='')}"
    query = f"?nodes={nodes}" if nodes is not None else ""
    request = urllib.request.Request(
        server.rstrip("/") + path + query, headers={"Accept": "application/json"}
    )
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - operator's URL
            return json.loads(response.read(1 << 20))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def fetch_from_db(url: str, cluster: str, workload: str, nodes: int | None) -> dict[str, Any] | None:
    from autotuner.configs import config_to_dict
    from autotuner.store import Store

    store = Store(url, migrate_schema=False)
    try:
        row = store.served_config(cluster, workload, nodes)
        return config_to_dict(row) if row is not None else None
    finally:
        store.dispose()


def resolve(args: argparse.Namespace) -> dict[str, Any] | None:
    """The config for this job, fail-open. Never raises for service trouble."""
    if not args.server:
        if not args.db:
            from autotuner.paths import default_database_url

            args.db = default_database_url()
        return fetch_from_db(args.db, args.cluster, args.workload, args.nodes)
    cache = _cache_path(args.server, args.cluster, args.workload, args.nodes)
    started = time.monotonic()
    try:
        config = fetch_from_server(
            args.server, args.token, args.cluster, args.workload, args.nodes, args.timeout
        )
    except Exception as exc:  # down, slow, 5xx, garbage: the job starts anyway
        elapsed = time.monotonic() - started
        reason = f"{type(exc).__name__}: {exc}"
        try:
            config = json.loads(cache.read_text())
        except (OSError, ValueError):
            _warn(f"config service unreachable ({reason}, {elapsed:.1f} s) and no cached config: "
                  "starting the job with its own environment")  # fmt: skip
            return None
        _warn(f"config service unreachable ({reason}, {elapsed:.1f} s): using the cached config "
              f"{config.get('exports', {}).get('AUTOTUNER_CONFIG', '')}")  # fmt: skip
        return config
    if config is None:
        _warn(
            f"no config published for {args.cluster}/{args.workload}: starting with the job's own environment"
        )
        cache.unlink(missing_ok=True)
        return None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(config))
        os.replace(tmp, cache)
    except OSError as exc:
        _warn(f"could not cache the config ({exc})")
    return config


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument(
        "--server", default=os.environ.get("AUTOTUNER_SERVER"), help="service URL (AUTOTUNER_SERVER)"
    )
    p.add_argument("--token", default=os.environ.get("AUTOTUNER_TOKEN"), help="read token (AUTOTUNER_TOKEN)")
    p.add_argument("--db", default=None, help="read the store directly instead of a service (admin use)")
    p.add_argument("--cluster", default=os.environ.get("AUTOTUNER_CLUSTER"), help="(AUTOTUNER_CLUSTER)")
    p.add_argument("--workload", default=os.environ.get("AUTOTUNER_WORKLOAD"), help="(AUTOTUNER_WORKLOAD)")
    p.add_argument("--nodes", type=int, default=_int_env("AUTOTUNER_NODES", "SLURM_JOB_NUM_NODES"),
                   help="node count of this job: nearest tuned count is served")  # fmt: skip
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the service")
    return p


def _int_env(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.cluster or not args.workload:
        p.error("--cluster and --workload are required (or AUTOTUNER_CLUSTER / AUTOTUNER_WORKLOAD)")


def env_main(argv: list[str]) -> int:
    p = parser("autotuner env")
    p.add_argument("--format", choices=[f for f in FORMATS if f != "env"] + ["env"], default="sh")
    args = p.parse_args(argv)
    _check(p, args)
    try:
        config = resolve(args)
    except Exception as exc:  # a broken local DB is an admin error: say so, still exit 0 for the job
        _warn(f"could not read the config: {type(exc).__name__}: {exc}")
        config = None
    if config is None and args.format == "json":
        print("null")
    elif config is not None:
        sys.stdout.write(render(config, args.format) + ("\n" if args.format == "json" else ""))
    return 0


def exec_main(argv: list[str]) -> int:
    """Run CMD with the tuned env layered over ours. Only the hook may fail open; CMD's exit is its own."""
    if "--" not in argv:
        print("usage: autotuner exec [options] -- CMD [ARGS...]", file=sys.stderr)
        return 2
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not command:
        print("autotuner exec: no command after --", file=sys.stderr)
        return 2
    p = parser("autotuner exec")
    args = p.parse_args(own)
    _check(p, args)
    try:
        config = resolve(args)
    except Exception as exc:
        _warn(f"could not read the config: {type(exc).__name__}: {exc}")
        config = None
    env = dict(os.environ)
    if config is not None:
        env.update({k: str(v) for k, v in config["exports"].items()})
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"autotuner exec: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "env":
        return env_main(argv[1:])
    if argv and argv[0] == "exec":
        return exec_main(argv[1:])
    print("usage: autotuner {env,exec} ...", file=sys.stderr)
    return 2
