"""`make demo`: one trial launch on 2 local CPU ranks, printing its table of candidates."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import trials

SPEC = Path(trials.__file__).parent / "examples" / "ten-candidates.json"


def main() -> int:
    out = Path(tempfile.mkdtemp(prefix="autotuner-demo-")) / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "trials.bench",
        "--spec",
        str(SPEC),
        "--out",
        str(out),
    ]
    print("$", " ".join(cmd), file=sys.stderr)
    rc = subprocess.call(cmd)
    print(f"result: {out}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
