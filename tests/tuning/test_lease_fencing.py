"""Only the lease's holder records a launch. A runner paused past its lease (SIGSTOP, a frozen VM, a
store partition) woke to find its launch ended and recorded it again, after the runner that took the
study over had: its measurement counted twice in the confirmation's rounds. Found by the engine review."""

from __future__ import annotations

import pytest

from autotuner.executors import LocalExecutor, Outcome
from autotuner.executors.base import LaunchState
from autotuner.store import Store
from autotuner.tuning import StudyBusy, StudyDriver
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ingest import ingest
from autotuner.tuning.lease import LEASE_S, Lease
from autotuner.tuning.search import Search
from tests.autotuner.test_driver import replay, study_with

ROW = {"index": 0, "kind": "baseline", "env": {}, "fwd_precision": "fp32", "bwd_precision": "fp32",
       "batch_size": 64, "sharding": "table_wise", "state": "ok", "samples_per_s": 1000.0, "metrics": {}}  # fmt: skip


def test_a_launch_is_recorded_once_whoever_records_it_again(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]}, executor="replay",
                              attempt=1, nnodes=1)  # fmt: skip
    row = {**ROW, "study_id": study.id, "launch_id": launch.id}
    assert [c.index for c in store.finish_launch(launch.id, [row], state="succeeded")] == [0]
    assert store.finish_launch(launch.id, [row], state="failed") is None
    assert store.launch(launch.id).state == "succeeded"
    assert len(store.candidates(study.id)) == 1


def test_a_runner_that_lost_its_lease_records_nothing(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    lease = Lease(store, study.id, owner="replica-a")
    lease.acquire()
    ctx = StudyContext.load(store, study.id, LocalExecutor(), lease)
    spec = {"candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64}]}
    launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec=spec, executor="local", attempt=1,
                              nnodes=1)  # fmt: skip
    store.update_launch(launch.id, state=LaunchState.RUNNING)
    # replica-a is paused past its lease; replica-b takes the study over
    store.release_study(study.id, "replica-a")
    assert store.acquire_study(study.id, "replica-b", LEASE_S)
    with pytest.raises(StudyBusy):
        ingest(ctx, launch, Outcome(LaunchState.FAILED, "1", None, "gone"), None, None)
    assert store.launch(launch.id).state == "running"  # left for its new holder to follow
    assert store.candidates(study.id) == []


def test_a_runner_that_loses_its_lease_while_it_learns_a_long_history_stops(
    store: Store, tmp_path, monkeypatch
):
    # Learning thousands of measured candidates into Optuna takes a while; the lease must be renewed
    # meanwhile, and a runner whose lease went to another must stop there.
    study = study_with(store, tmp_path)
    assert StudyDriver(store, study.id, replay(), poll_s=0.01).run().state == "done"
    assert store.candidates(study.id, kinds=["search"])
    lease = Lease(store, study.id, owner="replica-a")
    ctx = StudyContext.load(store, study.id, replay(), lease)
    assert store.acquire_study(study.id, "replica-b", LEASE_S)
    monkeypatch.setattr(lease, "due", lambda: True)  # as after a long stretch of learning
    with pytest.raises(StudyBusy):
        Search(ctx)


def test_a_lease_let_go_by_its_successor_is_not_renewed_by_a_runner_that_lost_it(store: Store, tmp_path):
    # replica-a paused past its lease; replica-b took the study over, finished it and let the lease go.
    # replica-a's next heartbeat took the free lease back and carried on with a study that was done.
    study = study_with(store, tmp_path)
    lease = Lease(store, study.id, owner="replica-a")
    lease.acquire()
    store.release_study(study.id, "replica-a")  # lapsed, as far as the others can tell
    assert store.acquire_study(study.id, "replica-b", LEASE_S)
    store.release_study(study.id, "replica-b")
    with pytest.raises(StudyBusy):
        lease.beat(force=True)
    assert store.study(study.id).owner is None


def test_a_busy_study_names_its_holder_as_an_operator_finds_it(tmp_path):
    """`autotuner tune --study` of a study a service's scheduler had taken up said "being run by
    vm:2426:929300ec:4026531836", and nothing said that was the service."""
    import os
    import socket
    import sys

    from autotuner.tuning.lease import _pid_namespace, described, owner_id

    mine = owner_id()
    assert described(mine).startswith(f"{mine} (pid {os.getpid()} on this host: ")
    holder = started([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "api.scheduler"])
    try:
        scheduler = f"{socket.gethostname()}:{holder.pid}:ab12cd34:{_pid_namespace()}"
        assert (
            described(scheduler)
            == f"{scheduler} (pid {holder.pid} on this host: the scheduler of an `autotuner serve`)"
        )
    finally:
        holder.communicate(timeout=30)
    assert described(scheduler) == scheduler  # gone: its id alone
    # a tune's command and study, never its whole command line: a --db URL may hold a password
    tuner = started([sys.executable, "-c", "import sys; sys.stdin.read()", "autotuner", "tune", "--db",
                     "postgresql://tuner:hunter2@db/at", "--study", "s1"])  # fmt: skip
    try:
        owner = f"{socket.gethostname()}:{tuner.pid}:ab12cd34:{_pid_namespace()}"
        assert described(owner) == f"{owner} (pid {tuner.pid} on this host: autotuner tune --study s1)"
    finally:
        tuner.communicate(timeout=30)
    assert described("another-host:12:ab12cd34:1") == "another-host:12:ab12cd34:1"
    assert described(None) == "None"


def started(argv: list[str]):
    """A process that waits on its stdin, once /proc shows its command line (empty a moment after exec)."""
    import subprocess
    import time
    from pathlib import Path

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc
