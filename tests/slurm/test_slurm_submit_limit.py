"""A submit limit on the real Slurm cluster: sbatch refuses the job with Slurm's own words
(QOSMaxSubmitJobPerUserLimit, "Job violates accounting/QOS policy") for longer than the study's lease, as
a user's submit limit does until their other jobs end. The launch waits its turn, the lease kept (another
runner trying to take the study over while it waits never can), and once the limit clears the real job runs
and is measured. Before, the executor gave up after 45 s inside schedule() and the study failed. A limit
that never clears ends the launch cancelled at queue_timeout_s, naming the limit and the time waited,
with no job queued and no env config quarantined.

The refusals come from a wrapper earlier on PATH that answers as Slurm does (exit 1, the two lines on
stderr) for its first N calls, then execs the real sbatch: making this cluster's own QOS refuse would
rewrite slurm.conf and the accounting under every other test. The study's lease is shortened so that
the refusals outlast it in seconds."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from autotuner.executors.slurm.executor import SlurmExecutor
from autotuner.executors.slurm.script import job_name
from autotuner.store import TERMINAL, Store, StudyState
from autotuner.tuning import StudyDriver
from autotuner.tuning.lease import Lease, StudyBusy
from autotuner.tuning.settings import StudySettings
from autotuner.tuning.study import create_study
from tests.slurm.cluster import run
from tests.slurm.test_slurm_e2e import SPACE, WORKLOAD, slurm_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

LEASE_S = 1.5
LIMIT_LINES = ("sbatch: error: QOSMaxSubmitJobPerUserLimit",
               "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
               "user's size and/or time limits)")  # fmt: skip


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    monkeypatch.setattr("autotuner.tuning.lease.LEASE_S", LEASE_S)
    monkeypatch.setattr("autotuner.tuning.lease.HEARTBEAT_EVERY_S", 0.1)


def limited_sbatch(tmp_path: Path, monkeypatch, refusals: int) -> Path:
    """An sbatch earlier on PATH that refuses its first `refusals` calls at a submit limit, then is the
    real one; the file it returns counts the refusals."""
    real = shutil.which("sbatch")
    assert real is not None
    count = tmp_path / "refused"
    count.write_text("0\n")
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    message = tmp_path / "refusal.txt"
    message.write_text("".join(f"{line}\n" for line in LIMIT_LINES))
    wrapper.write_text(f"""#!/bin/sh
n=$(cat {count})
if [ "$n" -lt {refusals} ]; then
  echo $((n + 1)) > {count}
  cat {message} >&2
  exit 1
fi
exec {real} "$@"
""")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    return count


def study(store: Store, tmp_path: Path) -> int:
    settings = StudySettings(executor="slurm", trials=0, nproc_per_node=2, candidates_per_launch=1, iterations=3,
                             warmup=1, confirm_rounds=0, ladder_rounds=0, launch_timeout_s=240,
                             workdir=str(tmp_path / "runs"))  # fmt: skip
    return create_study(store, cluster="slurm-box", workload=WORKLOAD, space=SPACE, settings=settings).id


class Rival:
    """Another runner trying to take the study over while its launch waits its turn: it can only once the
    lease lapses (or the runner let the study go, ended: that does not count). It stops trying once the
    launch is submitted: the lease is kept as long as the real job runs too, but a poll of a loaded
    controller (squeue, sacct, a real job on these CPUs) can outlast the shortened lease, and that would
    be no wait of this test's."""

    def __init__(self, store: Store, study_id: int) -> None:
        self.lease = Lease(store, study_id, owner="rival-host:1:x:")
        self.took_it = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            if any(launch.backend_id for launch in self.lease.store.launches(self.lease.study_id)):
                return  # submitted: its turn came
            try:
                self.lease.acquire()
            except StudyBusy:
                continue
            self.took_it = self.lease.store.study(self.lease.study_id).state not in TERMINAL  # type: ignore[union-attr]
            self.lease.release()
            return

    def __enter__(self) -> Rival:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def test_a_submit_limit_that_outlasts_the_lease_is_waited_out_and_the_job_run(
    slurm_cluster, tmp_path, monkeypatch
):
    refused = limited_sbatch(tmp_path, monkeypatch, refusals=8)
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    study_id = study(store, tmp_path)
    executor = SlurmExecutor()
    executor.submit_limit_retry_s = 0.3  # 8 refusals: 2.4 s, past the 1.5 s lease
    with Rival(store, study_id) as rival:
        final = StudyDriver(store, study_id, executor, poll_s=0.2).run()
    assert not rival.took_it, "the lease lapsed while the launch waited its turn"
    assert final.state == StudyState.DONE, final.error
    assert refused.read_text().strip() == "8"
    [launch] = store.launches(study_id)
    assert launch.state == "succeeded", (launch.error, launch.log_tail)
    assert launch.waiting_on is None
    assert slurm_state(launch.backend_id) == "COMPLETED"
    assert (Path(launch.workdir) / "job_id").read_text().strip() == launch.backend_id
    [measured] = store.candidates(study_id)
    assert measured.state == "ok"
    assert measured.samples_per_s > 0
    assert store.quarantined(final.cluster_id) == {}
    store.dispose()


def test_a_submit_limit_that_never_clears_ends_at_queue_timeout_s_naming_it(
    slurm_cluster, tmp_path, monkeypatch
):
    limited_sbatch(tmp_path, monkeypatch, refusals=10**6)
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    study_id = study(store, tmp_path)
    executor = SlurmExecutor(queue_timeout_s=3)
    executor.submit_limit_retry_s = 0.5
    with Rival(store, study_id) as rival:
        final = StudyDriver(store, study_id, executor, poll_s=0.2).run()
    assert not rival.took_it
    assert final.state == StudyState.FAILED
    [launch] = store.launches(study_id)
    assert final.error == (f"the baseline (the job's own settings) was not measured: launch 1 cancelled: {launch.error} "
                           f"(its log: {launch.log_path})")  # fmt: skip
    assert launch.state == "cancelled"
    assert launch.backend_id is None
    assert launch.error == (f"not submitted after 3 s (queue_timeout_s 3 s): sbatch refused launch s{study_id}-l1 "
                            f"for now, at a submit limit (exit 1): {' '.join(LIMIT_LINES)}")  # fmt: skip
    assert store.quarantined(final.cluster_id) == {}
    # nothing was queued for the launch (a job of its name in its directory)
    queued = run(
        "squeue", "--noheader", "--states=all", f"--name={job_name(f's{study_id}-l1')}", "--format=%Z"
    ).stdout
    assert launch.workdir not in queued.split()
    store.dispose()


def test_an_sbatch_whose_reply_is_lost_past_the_retry_window_is_followed_not_queued_twice(
    slurm_cluster, tmp_path, monkeypatch
):
    """A controller that queues the job and loses the reply ("Socket timed out"), for longer than the
    executor may try on its own (submit_retry_s): the engine waits the launch's turn, and the next try
    finds the job in squeue and follows it. Before, the study failed; sbatch again would run it twice."""
    real = shutil.which("sbatch")
    calls = tmp_path / "calls"
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(f"""#!/bin/sh
echo x >> {calls}
{real} "$@" > /dev/null || exit $?
echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
exit 1
""")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    study_id = study(store, tmp_path)
    executor = SlurmExecutor()
    executor.submit_retry_s = 0.0  # no second try inside: the engine's turn
    executor.submit_limit_retry_s = 0.3
    final = StudyDriver(store, study_id, executor, poll_s=0.2).run()
    assert final.state == StudyState.DONE, final.error
    assert len(calls.read_text().split()) == 1  # sbatch once
    [launch] = store.launches(study_id)
    assert launch.state == "succeeded", (launch.error, launch.log_tail)
    assert slurm_state(launch.backend_id) == "COMPLETED"
    queued = run(
        "squeue", "--noheader", "--states=all", f"--name={job_name(f's{study_id}-l1')}", "--format=%i|%Z"
    ).stdout.split()
    assert [line for line in queued if line.endswith(f"|{launch.workdir}")] == [
        f"{launch.backend_id}|{launch.workdir}"
    ]
    assert not (Path(launch.workdir) / "sbatch-unanswered").exists()
    store.dispose()
