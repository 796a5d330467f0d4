"""The real single-node Slurm cluster (deploy/slurm/slurm-up.sh; CI starts it). Without one these tests
skip, or fail where AUTOTUNER_REQUIRE includes `slurm`."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, skip_or_fail

TASK_PROLOG = REPO / "deploy" / "slurm" / "task_prolog.sh"


def _run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The name of an idle node, once `sinfo` answers (waits a little for jobs of earlier tests to end)."""
    if shutil.which("sinfo") is None:
        skip_or_fail("slurm", "no Slurm client here (run deploy/slurm/slurm-up.sh as root)")
    deadline = time.monotonic() + 60
    answer = ""
    while time.monotonic() < deadline:
        try:
            proc = _run("sinfo", "--noheader", "--responding", "--format=%n %T")
        except subprocess.TimeoutExpired:
            proc = None
        answer = (proc.stdout + proc.stderr).strip() if proc else "sinfo timed out"
        if proc and proc.returncode != 0:
            break  # no controller: waiting will not help
        idle = (
            [line.split()[0] for line in proc.stdout.splitlines() if line.split()[1:] == ["idle"]]
            if proc
            else []
        )
        if idle:
            return idle[0]
        time.sleep(1)
    skip_or_fail("slurm", f"no idle Slurm node (run deploy/slurm/slurm-up.sh as root); sinfo: {answer!r}")
    raise AssertionError("unreachable")


def configured_task_prolog() -> str | None:
    proc = _run("scontrol", "show", "config")
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "TaskProlog":
            value = value.strip()
            return None if value in ("", "(null)") else value
    return None


@pytest.fixture(scope="session")
def task_prolog(slurm_cluster) -> Path:
    """The cluster's TaskProlog must be the project's deploy/slurm/task_prolog.sh (any checkout of it).
    A cluster without one, made by our slurm-up.sh, gets it: the script rewrites slurm.conf and runs
    `scontrol reconfigure` (idempotent, root only)."""
    current = configured_task_prolog()
    if current is None and Path("/etc/slurm/slurm.conf").is_file():
        conf = Path("/etc/slurm/slurm.conf").read_text()
        if "written by nccl-autotuner deploy/slurm/slurm-up.sh" in conf:
            proc = _run("bash", str(REPO / "deploy" / "slurm" / "slurm-up.sh"), timeout=120)
            if proc.returncode != 0:
                skip_or_fail("slurm", f"slurm-up.sh could not set the TaskProlog: {proc.stderr[-500:]}")
            current = configured_task_prolog()
    if current is None:
        skip_or_fail("slurm", "the cluster has no TaskProlog: run deploy/slurm/slurm-up.sh (sets it)")
    path = Path(str(current))
    if path.name != TASK_PROLOG.name or "nccl-autotuner" not in path.read_text(errors="replace"):
        skip_or_fail("slurm", f"the cluster's TaskProlog is {path}, not deploy/slurm/task_prolog.sh")
    return path
