"""The Slurm cluster the tests run on, as plain helpers (its fixtures: tests/slurm/conftest.py): the
project's TaskProlog and slurm-up.sh, the emulated nodes' partition and address, what the cluster's
configuration says."""

from __future__ import annotations

import subprocess

from tests.helpers import REPO

TASK_PROLOG = REPO / "deploy" / "slurm" / "task_prolog.sh"
SLURM_UP = REPO / "deploy" / "slurm" / "slurm-up.sh"
# slurm-up.sh --nodes N: the emulated nodes' partition, and the host's address on their bridge (the only
# address of this host that a process inside a node's namespace reaches)
EMU_PARTITION = "emu"
EMU_HOST_ADDR = "10.78.0.1"


def run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A command's output, whatever its exit code."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def accounting() -> bool:
    """Whether the cluster keeps accounting (sacct answers): `WITH_DBD=1 slurm-up.sh`."""
    value = _config().get("AccountingStorageType", "")
    return value not in ("", "accounting_storage/none")


def _config() -> dict[str, str]:
    proc = run("scontrol", "show", "config")
    pairs = (line.partition("=") for line in proc.stdout.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def configured_task_prolog() -> str | None:
    value = _config().get("TaskProlog", "")
    return None if value in ("", "(null)") else value
