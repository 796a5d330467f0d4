"""Re-validation, for real: the demo's study on 2 local CPU ranks (its workload, space and settings,
as `make demo` runs it), then `autotuner revalidate` of what it published, with the wall time.

    python -m bench.revalidate [--out bench/out/revalidate.json] [--iterations N]

The demo's job mostly gets its own settings published (the batch that is faster costs quality), and
re-validating the baseline is one launch: so the study's finalist is also published as a version in
the study's name and re-checked with `--version`, which is the interleaved comparison a config that
changes something gets (the study's confirmation rounds, one launch when the environments agree).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "deploy" / "examples"


def run(iterations: int | None = None) -> dict[str, Any]:
    from autotuner.cli.demo import DEMO_SETTINGS
    from autotuner.executors import make_executor
    from autotuner.store import Store, ValidationTrigger
    from autotuner.tuning import StudyDriver, StudySettings, create_study
    from autotuner.tuning.outcome import Outcome
    from autotuner.tuning.revalidate import Revalidation, request

    tmp = Path(tempfile.mkdtemp(prefix="bench-revalidate-"))
    store = Store(f"sqlite:///{tmp / 'autotuner.db'}")
    settings = StudySettings(**{**DEMO_SETTINGS, **({"iterations": iterations} if iterations else {})},
                             workdir=str(tmp / "runs"))  # fmt: skip
    workload = json.loads((EXAMPLES / "workload-demo.json").read_text())
    space = yaml.safe_load((EXAMPLES / "space-demo.yaml").read_text())
    study = create_study(
        store, cluster="demo-cpu", workload=workload, space=space, settings=settings, name="demo"
    )
    started = time.monotonic()
    final = StudyDriver(store, study.id, make_executor(settings), poll_s=0.2).run()
    study_s = time.monotonic() - started
    if final.state != "done":
        raise SystemExit(f"the demo study {final.state}: {final.error}")
    published = store.served_config("demo-cpu", "demo-dlrm")
    out: dict[str, Any] = {
        "study_s": study_s,
        "published": _config(published),
        "decision": (Outcome.load(final.outcome) or Outcome()).decision,
    }

    def revalidate(config: Any, reason: str) -> dict[str, Any]:
        row, _ = request(store, config, ValidationTrigger.MANUAL, reason)
        began = time.monotonic()
        done = Revalidation(store, row.id, make_executor(settings), poll_s=0.2).run()
        launches = [
            la
            for la in store.launches(study.id)
            if (la.spec.get("extra") or {}).get("tag") == f"revalidate-{row.id}"
        ]
        return {"version": config.version, "state": done.state, "action": done.action, "wall_s": time.monotonic() - began,
                **{k: (done.result or {}).get(k) for k in ("speedup", "ci_low", "ci_high", "confidence", "rounds", "why")},
                "launches": len(launches), "candidates": sum(len(la.spec["candidates"]) for la in launches),
                "fingerprint": done.fingerprint}  # fmt: skip

    out["published_revalidation"] = revalidate(published, "bench: the demo's published config")
    finalist = store.candidate(final.best_candidate_id)
    baseline = store.candidate(final.baseline_candidate_id)
    if finalist is not None and baseline is not None and finalist.id != baseline.id:
        inert = final.inert or {}
        changed = store.publish_config(
            cluster="demo-cpu", workload="demo-dlrm", nodes=settings.nnodes,
            env={k: v for k, v in finalist.env.items() if k not in inert}, fwd_precision=finalist.fwd_precision,
            bwd_precision=finalist.bwd_precision, batch_size=finalist.batch_size, sharding=finalist.sharding,
            num_threads=finalist.num_threads, pipeline=finalist.pipeline, study_id=study.id,
            evidence={"decision": "bench: the demo study's finalist, published to be re-validated", "study_id": study.id},
        )  # fmt: skip
        out["finalist"] = _config(changed)
        out["finalist_revalidation"] = revalidate(changed, "bench: the demo study's finalist")
    store.dispose()
    return out


def _config(row: Any) -> dict[str, Any]:
    return {"version": row.version, "precision": f"{row.fwd_precision}/{row.bwd_precision}", "batch_size": row.batch_size,
            "env": row.env, "pipeline": row.pipeline}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.revalidate", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "revalidate.json")
    p.add_argument("--iterations", type=int, help="measured iterations per candidate (default: the demo's)")
    args = p.parse_args(argv)
    result = run(args.iterations)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    from bench.scratch import scratch

    with scratch():  # its store and runs, removed at the end
        sys.exit(main())
