"""SIGKILL of a running `autotuner tune`: nothing finished is lost, the study finishes on re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from autotuner.store import Store
from tests.helpers import launches_when

WORKLOAD = {"name": "tiny", "batch_size": 32,
            "tables": [{"name": f"t{i}", "num_embeddings": 500, "embedding_dim": 32, "pooling_factor": 2}
                       for i in range(2)]}  # fmt: skip
SPACE = {"env": {"NCCL_NSOCKS_PERTHREAD": [None, 2]}, "precisions": [["fp32", "fp32"], ["fp16", "fp16"]],
         "batch_sizes": [32, 64], "allow_batch_change": True, "force_inert": ["NCCL_NSOCKS_PERTHREAD"]}  # fmt: skip


def tune(tmp_path, db, *extra):
    args = [
        sys.executable,
        "-m",
        "autotuner",
        "tune",
        "--db",
        db,
        "--workdir",
        str(tmp_path / "runs"),
        *extra,
    ]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "AUTOTUNER_DATA_DIR": str(tmp_path)})  # fmt: skip


@pytest.mark.slow
def test_sigkill_loses_no_finished_trial_and_resume_finishes(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    (tmp_path / "w.json").write_text(json.dumps(WORKLOAD))
    (tmp_path / "s.json").write_text(json.dumps(SPACE))
    first = tune(tmp_path, db, "--cluster", "box", "--workload", str(tmp_path / "w.json"), "--space",
                 str(tmp_path / "s.json"), "--study", "resumable", "--trials", "3", "--candidates-per-launch", "2",
                 "--iterations", "3", "--warmup", "1", "--confirm-rounds", "2")  # fmt: skip
    store = Store(db)
    launches = launches_when(
        store, "resumable", lambda ls: sum(x.state == "succeeded" for x in ls) >= 2 and ls[-1].backend_id is not None
        and ls[-1].state == "running",
        first, 240, "the study never got two launches done",
    )  # fmt: skip
    study = store.study("resumable")
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {c.id: (c.samples_per_s, c.state) for c in store.candidates(study.id)}
    running = launches[-1]
    assert before, "finished launches had recorded candidates before the kill"

    second = tune(tmp_path, db, "--study", "resumable")
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    assert "resuming study resumable" in output

    after = {c.id: (c.samples_per_s, c.state) for c in store.candidates(study.id)}
    assert {k: after[k] for k in before} == before  # every finished trial survived, unchanged
    final = store.study(study.id)
    assert final.state == "done"
    assert final.outcome["published_version"] == 1
    survivor = store.launch(running.id)
    retried = [x for x in store.launches(study.id) if x.attempt == 2 and x.env == running.env]
    # the launch that was running when the tuner died: followed to its end, or (killed before its pid was
    # stored, or gone without an exit code) recorded cancelled, as nothing blames its config, and retried
    assert survivor.state == "succeeded" or (survivor.state == "cancelled" and retried), (survivor, retried)
    attempts_1 = [x for x in store.launches(study.id) if x.kind == "search" and x.attempt == 1]
    assert len(attempts_1) == 3  # the budget counts launches, not restarts


@pytest.mark.slow
def test_ctrl_c_stops_the_running_trial_with_the_tuner_and_says_how_to_resume(tmp_path):
    """The trial runs in a session of its own (so a cancel takes its whole tree): before, Ctrl-C of the
    tuner left it running, unfollowed, beside whatever ran next."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    (tmp_path / "w.json").write_text(json.dumps(WORKLOAD))
    (tmp_path / "s.json").write_text(json.dumps(SPACE))
    first = tune(tmp_path, db, "--cluster", "box", "--workload", str(tmp_path / "w.json"), "--space",
                 str(tmp_path / "s.json"), "--study", "stopped", "--trials", "1", "--iterations", "20000")  # fmt: skip
    store = Store(db)
    [running] = launches_when(store, "stopped", lambda ls: ls and ls[-1].backend_id is not None, first, 240,
                              "the baseline launch never started")  # fmt: skip
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 130, output
    assert "interrupted: the running launch was cancelled" in output
    assert "autotuner tune --study stopped" in output
    launch = store.launch(running.id)
    assert (launch.state, launch.error) == ("cancelled", "interrupted (Ctrl-C): cancelled with its launcher")
    leader = int(launch.backend_id)  # the local executor's id: its session's leader
    deadline = time.monotonic() + 30  # a killed process takes a moment to exit (a trial unmapping torch)
    while [p for p in os.listdir("/proc") if p.isdigit() and _session_of(int(p)) == leader]:
        assert time.monotonic() < deadline, "the trial outlived its cancel"  # 20,000 iterations: many minutes
        time.sleep(0.1)
    assert store.study("stopped").state == "running"  # resumable


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(
                stat.read().rsplit(")", 1)[1].split()[3]
            )  # after "pid (comm) state ppid pgrp": session
    except (OSError, ValueError, IndexError):
        return None


def test_sigterm_stops_the_tuner_as_ctrl_c_does_and_lets_the_study_go(tmp_path):
    """Killed by SIGTERM (kill, systemd, a batch system's stop), the tuner held the study's lease until
    it lapsed: a runner on another host waited that long. Now it is Ctrl-C's path: the launch cancelled,
    the lease let go, the study resumable."""
    from tests.helpers import LANDSCAPE

    db = f"sqlite:///{tmp_path / 'at.db'}"
    (tmp_path / "w.json").write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    (tmp_path / "s.json").write_text(json.dumps({"env": {}, "precisions": [["fp32", "fp32"]],
                                                 "batch_sizes": [64, 256], "allow_batch_change": True}))  # fmt: skip
    first = tune(tmp_path, db, "--executor", "replay", "--landscape", str(LANDSCAPE), "--executor-option",
                 "delay_s=600", "--cluster", "cpu-box", "--workload", str(tmp_path / "w.json"), "--space",
                 str(tmp_path / "s.json"), "--study", "termed", "--trials", "2")  # fmt: skip
    store = Store(db)
    launches_when(store, "termed", lambda ls: ls and ls[-1].backend_id is not None, first, 120,
                  "the baseline launch never started")  # fmt: skip
    assert store.study("termed").owner is not None
    first.send_signal(signal.SIGTERM)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 130, output
    assert "autotuner tune --study termed" in output
    study = store.study("termed")
    assert (study.state, study.owner) == ("running", None)  # let go at once: resumable anywhere
    # or ended for good (a service's scheduler on the store would take it up): the message says how
    assert "or end it with `autotuner cancel termed`" in " ".join(output.split())
    ended = subprocess.run([sys.executable, "-m", "autotuner", "cancel", "termed", "--db", db],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ended.returncode == 0, ended.stderr
    assert f"study termed (id {study.id}) cancelled" in ended.stderr
    assert store.study("termed").state == "cancelled"
    store.dispose()
