"""A trial that cannot start on its node (a broken torchrec, say) says so in an error result and exit 3:
an uncaught import error exited 1, the code for "the launch ran, some candidate failed"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.trials.test_launch import TABLES
from trials.result import EXIT_LAUNCH_FAILED


def test_a_node_whose_torchrec_is_broken_leaves_an_error_result_and_exit_3(tmp_path: Path):
    broken = tmp_path / "site" / "torchrec"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("torchrec is broken on this node")\n')
    spec = {"workload": {"name": "unit", "tables": TABLES}, "warmup": 1, "iterations": 2,
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64}]}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "result.json"
    repo = Path(__file__).parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "trials.run", "--spec", str(tmp_path / "spec.json"), "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=repo,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(repo)])},
    )  # fmt: skip
    assert proc.returncode == EXIT_LAUNCH_FAILED, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["status"] == "error"
    assert result["error"] == "cannot start the trial: ImportError: torchrec is broken on this node"
    assert "Traceback" not in proc.stderr
