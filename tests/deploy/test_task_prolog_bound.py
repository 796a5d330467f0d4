"""The TaskProlog's own time bound holds whatever AUTOTUNER_HOOK_TIMEOUT says: `timeout 0` means no
limit at all, so a 0 (or a huge value) let a hung hook hold every task of every job. Run here as
Slurm runs it (sh, the job's environment), with a hook that never answers."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.job import hook
from autotuner.job.exports import checked_config
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


GOOD = {"NCCL_NSOCKS_PERTHREAD": "4", "AUTOTUNER_CONFIG": "c/w/1n/v3"}


def real_hook(tmp_path: Path) -> Path:
    """This checkout's `autotuner`, as the nodes' AUTOTUNER_HOOK runs it."""
    script = tmp_path / "autotuner"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "
                      '-m autotuner "$@"\n')  # fmt: skip
    script.chmod(0o755)
    return script


@pytest.fixture
def frozen_server():
    """A service that accepts and never answers (the kernel's backlog takes the connection)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"


@pytest.mark.parametrize("limit_s", ["1", "2"])
def test_the_cached_config_is_served_within_a_short_bound(tmp_path, monkeypatch, frozen_server, limit_s):
    # The hook waited its own 1.5 s on the service whatever the limit: with 1 s it was killed before it
    # fell back to its cache ("the hook took over 1 s: no tuned config").
    monkeypatch.setenv("AUTOTUNER_CACHE_DIR", str(tmp_path / "cache"))
    config, _ = checked_config({"exports": GOOD, "cluster": "c", "workload": "w"})
    assert config is not None
    hook._write_cache(hook._cache_paths(frozen_server, "c", "w", None)[0], config)
    env = {"PATH": os.environ["PATH"], "AUTOTUNER_HOOK": str(real_hook(tmp_path)),
           "AUTOTUNER_HOOK_TIMEOUT": limit_s, "AUTOTUNER_SERVER": frozen_server, "AUTOTUNER_CLUSTER": "c",
           "AUTOTUNER_WORKLOAD": "w", "AUTOTUNER_HOOK_VERBOSE": "1", "AUTOTUNER_FINGERPRINT": "off",
           "AUTOTUNER_CACHE_DIR": str(tmp_path / "cache"),
           "AUTOTUNER_HOOK_ENV": str(tmp_path / "absent.env")}  # fmt: skip
    proc = subprocess.run(["sh", str(PROLOG)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "took over" not in proc.stdout
    assert "using the cached config c/w/1n/v3" in proc.stdout
    assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("given", "wait_s"), [("1", "0.4"), ("2", "1"), ("3", "1.5"), ("", "1.5"), ("60", "1.5")]
)
def test_the_hooks_wait_on_the_service_is_what_the_bound_leaves(tmp_path, given, wait_s):
    env = {"PATH": os.environ["PATH"], "AUTOTUNER_HOOK": "/bin/true", "AUTOTUNER_HOOK_TIMEOUT": given,
           "AUTOTUNER_SERVER": "http://127.0.0.1:9", "AUTOTUNER_CLUSTER": "c", "AUTOTUNER_WORKLOAD": "w",
           "AUTOTUNER_HOOK_ENV": str(tmp_path / "absent.env")}  # fmt: skip
    proc = subprocess.run(["sh", "-x", str(PROLOG)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0
    assert re.search(rf"/bin/true env .* --timeout {re.escape(wait_s)}\n", proc.stderr), proc.stderr
