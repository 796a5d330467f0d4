"""The real Slurm cluster of deploy/slurm/slurm-up.sh (CI starts it with `--nodes 2` and accounting): this
host as the node of the default partition, and the emulated nodes n1, n2 (network + UTS namespaces) in
partition `emu`. Without them these tests skip, or fail where AUTOTUNER_REQUIRE includes `slurm`."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import skip_or_fail
from tests.slurm.cluster import EMU_PARTITION, SLURM_UP, TASK_PROLOG, configured_task_prolog, run


def _nodes(partition: str | None) -> tuple[list[tuple[str, str]] | None, str]:
    """(node, state) of the responding nodes of `partition` (None: the default partition); None when the
    controller does not answer. And what sinfo said, for a skip reason."""
    try:
        proc = run("sinfo", "--noheader", "--responding", "--format=%n %T %P")
    except subprocess.TimeoutExpired:
        return None, "sinfo timed out"
    answer = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return None, answer
    rows = [line.split() for line in proc.stdout.splitlines()]
    wanted = (lambda p: p.endswith("*")) if partition is None else (lambda p: p.rstrip("*") == partition)
    return [(r[0], r[1]) for r in rows if len(r) == 3 and wanted(r[2])], answer


def _idle_nodes(partition: str | None, count: int, what: str) -> list[str]:
    """`count` idle nodes of `partition`, once there are (waits a little for jobs of earlier tests)."""
    if shutil.which("sinfo") is None:
        skip_or_fail("slurm", "no Slurm client here (run deploy/slurm/slurm-up.sh as root)")
    deadline = time.monotonic() + 60
    answer = ""
    while time.monotonic() < deadline:
        nodes, answer = _nodes(partition)
        if nodes is None:
            break  # no controller: waiting will not help
        if len(nodes) < count:
            break  # not there at all: waiting will not help either
        idle = sorted(name for name, state in nodes if state == "idle")
        if len(idle) >= count:
            return idle
        time.sleep(1)
    skip_or_fail(
        "slurm", f"not {count} idle {what} (run {_how_to_start(partition)} as root); sinfo: {answer!r}"
    )
    raise AssertionError("unreachable")


def _how_to_start(partition: str | None) -> str:
    return "deploy/slurm/slurm-up.sh" if partition is None else "deploy/slurm/slurm-up.sh --nodes 2"


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The name of an idle node of the default partition (where the tests' jobs go when they name none)."""
    return _idle_nodes(None, 1, "Slurm node in the default partition")[0]


@pytest.fixture(scope="session")
def emu_nodes(slurm_cluster) -> list[str]:
    """The names of two idle emulated nodes (partition `emu` of `slurm-up.sh --nodes 2`)."""
    return _idle_nodes(EMU_PARTITION, 2, f"emulated nodes in partition {EMU_PARTITION}")[:2]


@pytest.fixture(scope="session")
def task_prolog(slurm_cluster) -> Path:
    """The cluster's TaskProlog must be the project's deploy/slurm/task_prolog.sh (any checkout of it).
    A cluster without one, made by our slurm-up.sh, gets it: the script rewrites slurm.conf and runs
    `scontrol reconfigure` (idempotent, root only)."""
    current = configured_task_prolog()
    if current is None and Path("/etc/slurm/slurm.conf").is_file():
        conf = Path("/etc/slurm/slurm.conf").read_text()
        if "written by nccl-autotuner deploy/slurm/slurm-up.sh" in conf:
            proc = run("bash", str(SLURM_UP), timeout=120)  # keeps the emulated nodes and accounting
            if proc.returncode != 0:
                skip_or_fail("slurm", f"slurm-up.sh could not set the TaskProlog: {proc.stderr[-500:]}")
            current = configured_task_prolog()
    if current is None:
        skip_or_fail("slurm", "the cluster has no TaskProlog: run deploy/slurm/slurm-up.sh (sets it)")
    path = Path(str(current))
    if path.name != TASK_PROLOG.name or "nccl-autotuner" not in path.read_text(errors="replace"):
        skip_or_fail("slurm", f"the cluster's TaskProlog is {path}, not deploy/slurm/task_prolog.sh")
    return path
