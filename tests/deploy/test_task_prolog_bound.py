"""The TaskProlog's own time bound holds whatever AUTOTUNER_HOOK_TIMEOUT says: `timeout 0` means no
limit at all, so a 0 (or a huge value) let a hung hook hold every task of every job. Run here as
Slurm runs it (sh, the job's environment), with a hook that never answers."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.helpers import REPO

PROLOG = REPO / "deploy" / "slurm" / "task_prolog.sh"


@pytest.mark.parametrize(("given", "bound_s"), [("0", 5), ("000", 5), ("2", 2), ("99999999999", 60)])
def test_a_hung_hook_is_cut_at_the_prologs_bound(tmp_path, given, bound_s):
    hung = tmp_path / "hook"
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "AUTOTUNER_HOOK": str(hung), "AUTOTUNER_HOOK_TIMEOUT": given,
           "AUTOTUNER_SERVER": "http://127.0.0.1:9", "AUTOTUNER_CLUSTER": "c", "AUTOTUNER_WORKLOAD": "w",
           "AUTOTUNER_HOOK_VERBOSE": "1", "AUTOTUNER_HOOK_ENV": str(tmp_path / "absent.env")}  # fmt: skip
    if bound_s == 60:  # the clamp is read from what it says, not waited out
        env["AUTOTUNER_HOOK"] = "/bin/true"
        proc = subprocess.run(["sh", "-x", str(PROLOG)], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0
        assert "timeout -k 1 60 " in proc.stderr
        return
    started = time.monotonic()
    proc = subprocess.run(["sh", str(PROLOG)], capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert f"the hook took over {bound_s} s: no tuned config" in proc.stdout
    assert took >= bound_s
