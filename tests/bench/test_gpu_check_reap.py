"""A gpu-check phase past its time limit leaves no process of it running: on the one GPU, a trial left
behind would share the device with the next phase's launches and skew what they measure. torchrun puts
its workers in sessions of their own, so killing torchrun (phase a), an agent's process group (phase b)
or `autotuner tune` (phase c) left them running; each launch is now tagged and reaped by its tag."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autotuner.executors.local.executor import carrying
from tests.helpers import REPO, kill_carrying

MARK = "GPU_CHECK_TEST_MARK"  # inherited by every process the run starts (launches keep it too)


def described(pids: set[int]) -> list[str]:
    out = []
    for pid in sorted(pids):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160])
        except OSError:
            continue
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "extra"),
    [("a", []), ("b", ["--sweep", ""]), ("c", ["--study-trials", "1", "--confirm-rounds", "2"])],
)
def test_a_phase_past_its_budget_leaves_no_process_behind(tmp_path, phase, extra):
    mark = uuid.uuid4().hex
    # 3000 measured steps of every candidate: far past the 5 s budget on any machine
    argv = [sys.executable, "-m", "bench.gpu_check", "--device", "cpu", "--phases", phase, "--budget-s", "5",
            "--iterations", "3000", *extra, "--out", str(tmp_path / "r.json"), "--work", str(tmp_path / "w")]  # fmt: skip
    try:
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240,
                              env={**os.environ, MARK: mark})  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert time.monotonic() - started < 120  # the phase was cut at its budget, not run out
        deadline = time.monotonic() + 10  # what was killed may take a moment to leave /proc
        left = carrying(MARK, mark)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = carrying(MARK, mark)
        assert not left, described(left)
    finally:
        kill_carrying(MARK, mark)
