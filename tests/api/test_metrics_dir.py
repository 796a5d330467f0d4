"""The workers' metric files (Prometheus multiprocess mode, mmap'd) live in memory, not under the data
dir: on a full data disk each write to them faulted (SIGBUS) and killed every API worker, over and over,
with nothing logged, and no request was answered, config fetches included. A service removes the dirs of
services gone, never a running one's, whatever PID namespace it runs in (a lock, not a pid)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from api.cli import METRICS_PREFIX, OWNER_LOCK, _export_for_workers, metrics_dir


def _gone_service_dir(parent: Path, name: str) -> Path:
    folder = parent / f"{METRICS_PREFIX}{name}"
    folder.mkdir()
    (folder / OWNER_LOCK).touch()  # its owner ended: nobody holds the lock
    (folder / "counter_1.db").write_bytes(b"\0" * 16)
    return folder


def test_a_service_removes_the_metrics_dirs_of_services_gone_never_a_running_ones(tmp_path):
    gone = _gone_service_dir(tmp_path, "gone")
    running = _gone_service_dir(tmp_path, "running")
    # held by another process, as a service in another PID namespace holds its own: kept
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'ab'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
                               str(running / OWNER_LOCK)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        unlocked = tmp_path / f"{METRICS_PREFIX}being-made"  # no lock yet: left alone
        unlocked.mkdir()
        made = metrics_dir(tmp_path)
        assert made.parent == tmp_path
        assert made.name.startswith(METRICS_PREFIX)
        assert not gone.exists()
        assert running.exists()
        assert unlocked.exists()
        with open(made / OWNER_LOCK, "rb") as lock:  # this service's own is held while it runs
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("this service's metrics dir is not locked")
            except BlockingIOError:
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_the_workers_metric_files_are_not_on_the_data_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "environ", dict(os.environ))
    old = tmp_path / "prometheus"  # where versions before put them: removed
    old.mkdir()
    settings = SimpleNamespace(url="sqlite://", data_dir=tmp_path, scheduler=False, host="127.0.0.1", port=8000,
                               workers=2)  # fmt: skip
    _export_for_workers(settings)
    where = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    assert where.is_dir()
    assert tmp_path not in where.parents
    assert not old.exists()
    if os.access("/dev/shm", os.W_OK | os.X_OK):
        assert where.parent == Path("/dev/shm")
