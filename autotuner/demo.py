"""`make demo`: a small tuning study on 2 local CPU ranks, then the tuned export lines.

Runs `autotuner tune` with the example workload and space in deploy/examples/, against a fresh
SQLite store under .data/demo/, and prints what `autotuner env` hands a job.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "deploy" / "examples"


def main() -> int:
    data = ROOT / ".data" / "demo"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    db = f"sqlite:///{data / 'autotuner.db'}"
    autotuner = [sys.executable, "-m", "autotuner"]
    tune = [*autotuner, "tune", "--cluster", "demo-cpu", "--workload", str(EXAMPLES / "workload-demo.json"),
            "--space", str(EXAMPLES / "space-demo.yaml"), "--nproc", "2", "--trials", "3",
            "--candidates-per-launch", "4", "--iterations", "12", "--warmup", "2", "--confirm-rounds", "3",
            "--workdir", str(data / "runs"), "--db", db]  # fmt: skip
    print("$", " ".join(tune[1:]), file=sys.stderr, flush=True)
    rc = subprocess.call(tune)
    if rc != 0:
        return rc
    env = [*autotuner, "env", "--cluster", "demo-cpu", "--workload", "demo-dlrm", "--db", db]
    print("\n$ autotuner env --cluster demo-cpu --workload demo-dlrm", file=sys.stderr, flush=True)
    return subprocess.call(env)


if __name__ == "__main__":
    sys.exit(main())
