"""Changes what a service serves, from outside it, the ways production does: publishes in the store
(as the scheduler does), pins and rollbacks in the store and with the CLI (as an operator does), and
pins and rollbacks through the REST API. Prints one JSON line per change with its call interval on
CLOCK_MONOTONIC (the same clock in every process of the machine).

    python -m tests.api.config_writer SERVER_URL ADMIN_TOKEN DB_URL
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from autotuner.store import Store

CLUSTER, WORKLOAD = "c", "w"
# (how, what, expected (version, pinned) served afterwards; None: a change nobody can see, as a
# publish under a pin). Every visible state is new, so an answer names its place in the sequence.
STEPS: list[tuple[str, str, tuple[int, bool] | None]] = [
    ("store", "publish", (1, False)),
    ("store", "publish", (2, False)),
    ("store", "publish", (3, False)),
    ("store", "publish", (4, False)),
    ("api", "pin 2", (2, True)),
    ("store", "publish", None),
    ("store", "unpin", (5, False)),
    ("cli", "rollback", (4, True)),
    ("api", "rollback", (3, True)),
    ("store", "publish", None),
    ("api", "unpin", (6, False)),
]
# Readers need time to see each state; this paces the workload, nothing waits on it.
PAUSE_S = 0.6


def _publish(store: Store) -> dict[str, Any]:
    row = store.publish_config(cluster=CLUSTER, workload=WORKLOAD, nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                               fwd_precision="fp16", bwd_precision="fp16", batch_size=512,
                               sharding="table_wise")  # fmt: skip
    return {"version": row.version, "pinned": row.pinned}


def _api(api: httpx.Client, what: str) -> dict[str, Any]:
    verb, _, version = what.partition(" ")
    path = f"/v1/configs/{CLUSTER}/{WORKLOAD}/{'rollback' if verb == 'rollback' else 'pin'}"
    body = {"nodes": 1} if verb == "rollback" else {"nodes": 1, "version": int(version) if version else None}
    response = api.post(path, json=body)
    response.raise_for_status()
    return {"version": response.json()["version"], "pinned": response.json()["pinned"]}


def _cli(db_url: str, what: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "autotuner",
        "configs",
        what,
        CLUSTER,
        WORKLOAD,
        "--nodes",
        "1",
        "--db",
        db_url,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {proc.stderr}")
    return {"said": proc.stderr.strip()}


def main(server: str, token: str, db_url: str) -> None:
    store = Store(db_url)
    store.upsert_workload(WORKLOAD, {"name": WORKLOAD, "tables": []})
    api = httpx.Client(base_url=server, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    doers: dict[str, Callable[[str], dict[str, Any]]] = {
        "store": lambda what: _publish(store) if what == "publish" else _store_change(store, what),
        "api": lambda what: _api(api, what),
        "cli": lambda what: _cli(db_url, what),
    }
    for how, what, expected in STEPS:
        started = time.monotonic()
        outcome = doers[how](what)
        print(json.dumps({"how": how, "what": what, "expected": expected, "started": started,
                          "returned": time.monotonic(), **outcome}), flush=True)  # fmt: skip
        time.sleep(PAUSE_S)


def _store_change(store: Store, what: str) -> dict[str, Any]:
    assert what == "unpin", what
    row = store.pin_config(CLUSTER, WORKLOAD, 1, None)
    assert row is not None
    return {"version": row.version, "pinned": row.pinned}


if __name__ == "__main__":
    main(*sys.argv[1:4])
