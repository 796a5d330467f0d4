"""Tuned vs default: a real study (local executor, 2 CPU ranks), its published config's confirmed
speedup over the baseline with a 95% confidence interval, unshaped and in emulated fabrics."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from autotuner.executors import Fabric, LocalExecutor
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = json.loads((ROOT / "deploy" / "examples" / "workload-demo.json").read_text())
SPACE = yaml.safe_load((ROOT / "deploy" / "examples" / "space-demo.yaml").read_text())


def study(fabric: str | None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tuned-"))
    store = Store(f"sqlite:///{tmp / 'tuned.db'}")
    settings = StudySettings(executor="local", trials=3, candidates_per_launch=4, iterations=12, warmup=2,
                             confirm_rounds=3, fabric=fabric, workdir=str(tmp / "runs"))  # fmt: skip
    row = create_study(
        store, cluster="bench", workload=WORKLOAD, space=SPACE, settings=settings, name="tuned"
    )
    final = StudyDriver(store, row.id, LocalExecutor(fabric=Fabric(fabric) if fabric else None)).run()
    if final.state != "done":
        raise RuntimeError(f"study {final.state}: {final.error}")
    out = final.outcome
    best = store.candidate(out["best_candidate"])
    baseline = store.candidate(out["baseline_candidate"])
    return {
        "fabric": Fabric(fabric).label() if fabric else "unshaped loopback",
        "baseline": f"{baseline.fwd_precision}/{baseline.bwd_precision} batch {baseline.batch_size}, no env",
        "best": f"{best.fwd_precision}/{best.bwd_precision} batch {best.batch_size}, "
        + (" ".join(f"{k}={v}" for k, v in sorted(best.env.items())) or "no env"),
        "speedup": out.get("speedup"),
        "ci_low": out.get("ci_low"),
        "ci_high": out.get("ci_high"),
        "rounds": out.get("rounds"),
        "tuned_samples_per_s": out.get("tuned_samples_per_s"),
        "baseline_samples_per_s": out.get("baseline_samples_per_s"),
        "decision": out.get("decision"),
        "launches": len(store.launches(row.id)),
    }


def run(fabrics: tuple[str | None, ...] = (None, "2gbit", "1gbit")) -> dict[str, Any]:
    return {"rows": [study(f) for f in fabrics]}
