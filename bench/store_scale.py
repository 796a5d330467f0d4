"""The store at scale: what an operator's reads and changes cost as versions and studies pile up.

    python -m bench.store_scale [--versions 1000] [--studies 500]

Configs: one (cluster, workload, nodes) with few versions (the baseline, 10) and with many (1,000, as
years of scheduled re-validations and republishes leave): pin, unpin, rollback and the newest history
page of 10, each the median of 7 calls; the ratio many / few says whether a change costs more as
versions pile up. Studies: the listing's page of 5, 50 (what the dashboard polls) and 500 over 500
studies (a tenth measured: a baseline and two search candidates each; two of those still running), in
SQL statements and ms: whether a page costs a few queries or a few per study. SQLite in a temporary folder, in process (the service's own code, without HTTP).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from autotuner.store import Store

WORKLOAD = {
    "name": "w",
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 32, "pooling_factor": 1}],
}
# A published config's evidence is not small: a ladder, a quality check, the finalist's figures.
EVIDENCE = {"speedup": 1.1, "ci_low": 1.05, "ci_high": 1.15, "ladder": [{"step": "env", "kept": True}] * 8,
            "quality": {"variants": {f"v{i}": {"logloss": [0.57] * 3} for i in range(6)}}}  # fmt: skip
REPS = 7


def _ms(call: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def config_changes(store: Store, cluster: str, versions: int) -> dict[str, float]:
    store.upsert_workload("w", WORKLOAD)
    for _ in range(versions):
        store.publish_config(cluster=cluster, workload="w", nodes=2, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             fwd_precision="fp32", bwd_precision="fp32", batch_size=512, sharding="table_wise",
                             evidence=EVIDENCE)  # fmt: skip
    return {
        "pin_ms": _ms(lambda: store.pin_config(cluster, "w", 2, max(1, versions // 2))),
        "unpin_ms": _ms(lambda: store.pin_config(cluster, "w", 2, None)),
        "rollback_ms": _ms(lambda: store.rollback_config(cluster, "w", 2)),
        "history_page_ms": _ms(lambda: store.public_configs(store.config_history(cluster, "w", 2, limit=10))),
    }


def _listing(store: Store, limit: int) -> tuple[float, int]:
    """One listing page as the route builds it: (ms, SQL statements)."""
    from api.routes.studies import public_studies

    def page() -> None:
        public_studies(store, store.studies(limit=limit))
        store.count_studies()

    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", count)
    page()
    sa.event.remove(store.engine, "before_cursor_execute", count)
    return _ms(page), len(statements)


def studies_listing(store: Store, studies: int) -> dict[str, Any]:
    """`studies` studies, newest first: the two newest measured ones still running (their best and
    baseline are looked up), every tenth one before them done with both chosen, the rest queued."""
    for i in reversed(range(studies)):
        measured, running = i % 10 == 0, i < 20
        study = store.create_study(name=f"s{i}", cluster="c", workload_name="w", workload_spec=WORKLOAD,
                                   space={"env": {}}, settings={"trials": 4},
                                   state=("running" if running else "done") if measured else "queued")  # fmt: skip
        if not measured:
            continue
        ids = []
        for kind, speeds in (("baseline", [100.0]), ("search", [90.0, 120.0])):
            launch = store.add_launch(study_id=study.id, kind=kind, env={}, spec={"candidates": [{}] * len(speeds)},
                                      executor="replay")  # fmt: skip
            ids += [c.id for c in store.add_candidates([
                {"study_id": study.id, "launch_id": launch.id, "index": j, "kind": kind, "env": {}, "fwd_precision": "fp32",
                 "bwd_precision": "fp32", "batch_size": 512, "sharding": "table_wise", "state": "ok", "samples_per_s": v}
                for j, v in enumerate(speeds)])]  # fmt: skip
        if not running:
            store.update_study(study.id, baseline_candidate_id=ids[0], best_candidate_id=ids[2])
    out: dict[str, Any] = {"studies": studies}
    for limit in (5, 50, 500):
        out[f"page_{limit}_ms"], out[f"page_{limit}_statements"] = _listing(store, limit)
    return out


def run(versions: int = 1000, studies: int = 500) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'at.db'}")
        try:
            few, many = config_changes(store, "few", 10), config_changes(store, "many", versions)
            listing = studies_listing(store, studies)
        finally:
            store.dispose()
    return {
        "versions": {"few": 10, "many": versions},
        "configs_few": few,
        "configs_many": many,
        "configs_ratio": {k: many[k] / few[k] for k in few},
        "listing": listing,
        "listing_statements_50_vs_5": listing["page_50_statements"] / listing["page_5_statements"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.store_scale", description=__doc__.splitlines()[0])
    p.add_argument("--versions", type=int, default=1000)
    p.add_argument("--studies", type=int, default=500)
    args = p.parse_args(argv)
    print(json.dumps(run(args.versions, args.studies), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
