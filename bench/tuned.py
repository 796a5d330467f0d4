"""Tuned vs default: a real study (local executor, 2 CPU ranks), its published config's confirmed
speedup over the baseline with a 95% confidence interval, unshaped and in emulated fabrics."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from autotuner.cli.demo import DEMO_SETTINGS
from autotuner.executors import Fabric, LocalExecutor
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.outcome import FIGURES, Outcome

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = json.loads((ROOT / "deploy" / "examples" / "workload-demo.json").read_text())
SPACE = yaml.safe_load((ROOT / "deploy" / "examples" / "space-demo.yaml").read_text())


LADDER = ("step", "speedup_vs_previous", "ci_low", "ci_high", "kept")
QUALITY = ("delta", "ci_low", "ci_high", "k", "seed_spread", "verdict", "refused", "unresolved", "time_to_quality",
           "cost_s", "skipped")  # fmt: skip


def study(fabric: str | None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tuned-"))
    store = Store(f"sqlite:///{tmp / 'tuned.db'}")
    settings = StudySettings(**DEMO_SETTINGS, fabric=fabric, workdir=str(tmp / "runs"))
    row = create_study(
        store, cluster="bench", workload=WORKLOAD, space=SPACE, settings=settings, name="tuned"
    )
    final = StudyDriver(store, row.id, LocalExecutor(fabric=Fabric(fabric) if fabric else None)).run()
    if final.state != "done":
        raise RuntimeError(f"study {final.state}: {final.error}")
    outcome = Outcome.load(final.outcome) or Outcome()
    out = outcome.dump()
    best = store.candidate(outcome.best_candidate)
    baseline = store.candidate(outcome.baseline_candidate)
    served = store.served_config("bench", WORKLOAD["name"])
    finalist = out.get("finalist") or out  # kept apart when something else is published
    return {
        "fabric": Fabric(fabric).label() if fabric else "unshaped loopback",
        "baseline": _setting(baseline),
        "best": _setting(best),
        "published": "the baseline (no changes)"
        if outcome.chosen_candidate == baseline.id
        else _setting(served),
        **{k: finalist.get(k) for k in FIGURES},
        "published_speedup": out.get("speedup"),
        "ladder": [{k: step.get(k) for k in LADDER} for step in out.get("ladder") or []],
        "quality": {k: (out.get("quality") or {}).get(k) for k in QUALITY},
        "decision": out.get("decision"),
        "launches": len(store.launches(row.id)),
        "seconds": (final.finished_at - final.started_at).total_seconds(),
    }


def _setting(row: Any) -> str:
    """A measured candidate's setting, or a served config's (what a job is handed)."""
    env = " ".join(f"{k}={v}" for k, v in sorted(row.env.items())) or "no env"
    return f"{row.fwd_precision}/{row.bwd_precision} batch {row.batch_size}, {env}"


def run(fabrics: tuple[str | None, ...] = (None, "2gbit", "1gbit")) -> dict[str, Any]:
    return {"rows": [study(f) for f in fabrics]}
