"""The workers' metric files (Prometheus multiprocess mode, mmap'd) live in memory, not under the data
dir: on a full data disk each write to them faulted (SIGBUS) and killed every API worker, over and over,
with nothing logged, and no request was answered, config fetches included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from api.cli import METRICS_PREFIX, metrics_dir


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return int(proc.stdout)


def test_the_metrics_dir_is_the_services_own_and_those_of_dead_services_go(tmp_path):
    stale = tmp_path / f"{METRICS_PREFIX}{_dead_pid()}-abc"
    stale.mkdir()
    (stale / "counter_1.db").write_bytes(b"\0" * 16)
    live = tmp_path / f"{METRICS_PREFIX}{os.getppid()}-def"  # a service still running: kept
    live.mkdir()
    made = metrics_dir(tmp_path)
    assert made.parent == tmp_path
    assert made.name.startswith(f"{METRICS_PREFIX}{os.getpid()}-")
    assert made.is_dir()
    assert not stale.exists()
    assert live.exists()


def test_by_default_it_is_in_memory_not_on_the_data_disk(tmp_path):
    made = metrics_dir()
    try:
        shm = Path("/dev/shm")
        if os.access(shm, os.W_OK | os.X_OK):
            assert made.parent == shm
        assert tmp_path not in made.parents
    finally:
        made.rmdir()
