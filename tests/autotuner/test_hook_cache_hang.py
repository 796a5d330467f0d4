"""The pre-job hook when its cache directory does not answer (a hung NFS home: the default cache is
~/.cache). The fetch and the node's stack had deadlines, but the cache was read and written on the
job's own thread, unbounded: the job never started. Now a read gets what is left of the deadline, the
job's answer is printed before the cache is written, and a write gets hook.CACHE_S."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.job import hook
from tests.autotuner.test_hook_hostile import GOOD, serve  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30  # the test's own deadline: the old code was still waiting when it passed

# A file system that never answers, for the paths under argv[1] only (the rest of the hook, and
# Python, must still work): every call the cache makes there blocks, as a hung NFS server does.
HUNG = """
import os, sys, threading
hung = sys.argv.pop(1)
def blocking(real):
    def call(path, *args, **kwargs):
        if os.fspath(path).startswith(hung):
            threading.Event().wait()  # no answer, ever
        return real(path, *args, **kwargs)
    return call
for name in ("lstat", "stat", "open", "mkdir", "unlink", "replace"):
    setattr(os, name, blocking(getattr(os, name)))
from autotuner.job.hook import main
sys.exit(main(sys.argv[1:]))
"""


def hook_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    return {**env, "AUTOTUNER_CACHE_DIR": str(cache), "AUTOTUNER_FINGERPRINT": "off"}


def run_hung(cache: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", HUNG, str(cache), *argv], capture_output=True, text=True,
                          timeout=WAIT_S, env=hook_env(cache), cwd=REPO)  # fmt: skip
    return proc, time.monotonic() - started


def refused_url() -> str:
    """A port nothing listens on: the service is down, the hook falls back to its cache."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_config_fetched_is_printed_though_the_cache_cannot_be_written(tmp_path, serve):  # noqa: F811
    server = serve({"exports": GOOD})
    proc, took = run_hung(tmp_path / "cache", "env", "--server", server.url, "--cluster", "c",
                          "--workload", "w", "--timeout", "5")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout
    assert (
        f"could not cache the config (the cache directory did not answer within {hook.CACHE_S:g} s)"
        in proc.stderr
    )
    assert took < 5 + hook.CACHE_S + 3  # start-up, fetch and the bounded write; never the cache's time


def test_exec_runs_the_command_though_the_cache_cannot_be_read_nor_written(tmp_path, serve):  # noqa: F811
    server = serve({"exports": GOOD})
    proc, _ = run_hung(tmp_path / "cache", "exec", "--server", server.url, "--cluster", "c", "--workload",
                       "w", "--timeout", "5", "--", "sh", "-c", "echo CMD-RAN $NCCL_NSOCKS_PERTHREAD")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CMD-RAN 4" in proc.stdout
    assert "could not cache the config" in proc.stderr
    proc, took = run_hung(tmp_path / "cache", "exec", "--server", refused_url(), "--cluster", "c",
                          "--workload", "w", "--timeout", "1", "--", "echo", "CMD-RAN")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CMD-RAN" in proc.stdout
    assert "config service unreachable" in proc.stderr
    assert re.search(
        r"and the cache directory did not answer within (0\.\d+|1) s:", proc.stderr
    )  # what was left
    assert took < 1 + 3


def test_a_withdrawn_config_is_said_though_the_cache_cannot_forget_it(tmp_path, serve):  # noqa: F811
    # a service from before the hint: its plain detail is believed
    server = serve({"detail": "no config published for c/w"}, status=404)
    proc, _ = run_hung(tmp_path / "cache", "env", "--server", server.url, "--cluster", "c", "--workload",
                       "w", "--timeout", "5")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no config published for c/w" in proc.stderr
    assert (
        "could not remove the withdrawn config from the cache (the cache directory did not answer"
        in proc.stderr
    )


def fuse_available() -> bool:
    """Root, /dev/fuse, and a private mount namespace allowed (a container may refuse it)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-m", "--propagation", "private", "true"]
    return subprocess.run(probe, capture_output=True, timeout=WAIT_S).returncode == 0


# The reviewer's reproduction: a FUSE mount whose daemon never replies (no one reads /dev/fuse), in a
# private mount namespace; the hook's cache directory is on it.
FUSE = """
exec 3<>/dev/fuse || exit 77
mount -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 hangfs "$MNT" || exit 77
exec "$@"
"""


@pytest.mark.skipif(not fuse_available(), reason="needs root, /dev/fuse and unshare")
@pytest.mark.parametrize("down", [False, True], ids=["service-up", "service-down"])
def test_a_cache_on_a_file_system_that_never_answers_does_not_hold_the_job(tmp_path, serve, down):  # noqa: F811
    mount = tmp_path / "hung"
    mount.mkdir()
    url = refused_url() if down else serve({"exports": GOOD}).url
    env = {**hook_env(mount / "cache"), "MNT": str(mount)}
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", FUSE, "fuse", sys.executable, "-m",
           "autotuner", "exec", "--server", url, "--cluster", "c", "--workload", "w", "--timeout", "1", "--",
           "echo", "CMD-RAN"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WAIT_S, env=env, cwd=REPO)
    if proc.returncode == 77:
        pytest.skip(f"no FUSE mount here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "CMD-RAN" in proc.stdout
    assert "the cache directory did not answer" in proc.stderr


def test_a_write_cut_short_leaves_no_temporary_file_for_good(tmp_path):
    """A write still going when the job's command was exec'd (bounded by CACHE_S) left its temporary
    file behind, one a job on a slow home: the next write of that key removes the stale ones (its own
    user's, older than TMP_STALE_S), never a fresh one another job is writing, nor another key's."""
    cache = tmp_path / "c_w_1.json"
    tmp_path.chmod(0o700)
    stale, fresh, other = (tmp_path / name for name in
                           (".c_w_1.aaaa.tmp", ".c_w_1.bbbb.tmp", ".c_w_2.cccc.tmp"))  # fmt: skip
    for path in (stale, fresh, other):
        path.write_text("{")
    old = time.time() - hook.TMP_STALE_S - 5
    for path in (stale, other):
        os.utime(path, (old, old))
    hook._write_cache(cache, {"env": {}})
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c_w_1.bbbb.tmp", ".c_w_2.cccc.tmp", "c_w_1.json"]
