"""The trial's own deadline: a stalled launch leaves an error result and exit 3 before NCCL's watchdog
would abort it with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.trials.test_launch import TABLES, run_trial

STALL = textwrap.dedent("""
    import sys, time
    from trials.watchdog import Watchdog
    beat_for, then, limit = float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    dog = Watchdog(limit, lambda msg: open(sys.argv[1], "w").write(msg), exit_code=3).start()
    end = time.monotonic() + beat_for
    while time.monotonic() < end:
        dog.beat("stepping")
        time.sleep(0.02)
    dog.beat("candidate 7 (fp32/fp32 b512)")
    if then == "stop":
        dog.stop()
        sys.exit(0)
    time.sleep(60)  # a collective that never completes
""")


def test_no_progress_past_the_limit_writes_why_and_exits_3(tmp_path):
    out = tmp_path / "why.txt"
    proc = subprocess.run(
        [sys.executable, "-c", STALL, str(out), "0.5", "hang", "0.3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 3
    assert "no progress for" in out.read_text()
    assert "candidate 7 (fp32/fp32 b512)" in out.read_text()


def test_a_launch_that_keeps_beating_is_left_alone(tmp_path):
    out = tmp_path / "why.txt"
    # 3 s of beats, 50 a second: the 1 s limit passes 3 times over, never without one. (A limit of 0.3 s
    # was shorter than the stretch a busy machine can leave a process unscheduled: the watchdog's
    # thread, woken first after it, saw no beat for longer than its limit and fired.)
    proc = subprocess.run(
        [sys.executable, "-c", STALL, str(out), "3", "stop", "1"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0
    assert not out.exists()


def test_rank_0_reports_a_stall_before_any_peer_gives_up():
    from trials.watchdog import deadline_s

    assert deadline_s(15, 0) == pytest.approx(12)
    assert deadline_s(15, 0) < deadline_s(15, 1) == deadline_s(15, 7) < 15  # all before the group's timeout


@pytest.mark.slow
def test_a_hung_peer_leaves_an_error_result_and_exit_3(tmp_path):
    spec = {"workload": {"name": "unit", "tables": TABLES, "sharding": "table_wise"}, "warmup": 1, "iterations": 2,
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64}],
            "extra": {"inject": "hang"}}  # fmt: skip
    proc, result = run_trial(tmp_path, spec, env={"AUTOTUNER_TRIAL_PG_TIMEOUT_S": "15"})
    assert proc.returncode != 0
    assert result is not None, proc.stderr[-2000:]
    assert result["status"] == "error", proc.stderr[-2000:]
    assert result["error"].startswith("TrialStalled: no progress for")
    assert "trial's deadline is 12 s" in result["error"]
    assert json.loads(json.dumps(result))  # a whole JSON file, as the executor reads it
