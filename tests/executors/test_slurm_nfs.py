"""A job Slurm says ended whose exit_code file the tuner's host does not see yet: on NFS, the attribute
and lookup caches can hide a file a node just wrote for up to a minute. Collected at that first poll,
the launch failed with "no result written (exit code 0)" and its env config was quarantined."""

from __future__ import annotations

import json

import pytest

from autotuner.executors import LaunchState
from autotuner.executors.slurm.executor import SlurmExecutor
from tests.executors.test_slurm import DATA, FakeSlurm, request
from tests.helpers import DATA as TEST_DATA

RESULT = json.loads((TEST_DATA / "trial-result-dlrm.json").read_text())
SPEC = {"candidates": [{k: c[k] for k in ("fwd_precision", "bwd_precision", "batch_size")}
                       for c in RESULT["candidates"]]}  # fmt: skip


@pytest.fixture
def slurm(monkeypatch):
    fake = FakeSlurm()
    fake.squeue = (DATA / "squeue-22.05-ended.json").read_text()  # job 4 COMPLETED (0), 8 TIMEOUT
    monkeypatch.setattr("autotuner.executors.slurm.executor.subprocess.run", fake)
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    return fake


def test_an_ended_job_is_collected_once_its_exit_code_file_shows(slurm, tmp_path):
    launch = request(tmp_path, spec=SPEC, nproc_per_node=2)
    executor = SlurmExecutor()
    executor.settle_s = 30  # a bound only: the files show at the third poll
    polls = []

    def nfs_catches_up(desc):
        polls.append(desc)
        if len(polls) == 2:  # what the node wrote before the job ended, now visible here
            launch.result_path.write_text(json.dumps(RESULT))
            (tmp_path / "exit_code").write_text("0\n")

    outcome = executor.wait("4", launch, started=0.0, poll_s=0.01, on_poll=nfs_catches_up)
    assert outcome.state == LaunchState.SUCCEEDED, outcome.reason
    assert outcome.result == RESULT
    assert [desc.settling for desc in polls] == [True, True]
    assert "exit_code file is not visible" in polls[0].reason
    assert slurm.commands("scancel") == []


def test_an_exit_code_file_that_never_shows_is_collected_as_before_after_settle_s(slurm, tmp_path):
    executor = SlurmExecutor()
    executor.settle_s = 0.2
    outcome = executor.wait("4", request(tmp_path), started=0.0, poll_s=0.02)
    assert outcome.state == LaunchState.FAILED
    assert outcome.reason.startswith("Slurm says COMPLETED but the launch's exit_code file is not visible")
    assert "lookupcache=positive" in outcome.reason
    assert len(slurm.commands("squeue")) >= 5  # followed again meanwhile, then given its due


@pytest.mark.parametrize(
    ("job", "exit_code", "state", "reason"),
    [
        ("4", "0", LaunchState.FAILED, "no result written (exit code 0)"),  # its exit code seen: as before
        ("8", None, LaunchState.TIMEOUT, "time limit"),  # killed by Slurm: its script wrote no exit code
        ("2", None, LaunchState.CANCELLED, "scancel"),
        ("7", None, LaunchState.FAILED, "killed by signal 9"),  # the batch script itself
    ],
)
def test_only_a_job_whose_script_ran_to_its_end_is_waited_for(slurm, tmp_path, job, exit_code, state, reason):
    if exit_code is not None:
        (tmp_path / "exit_code").write_text(exit_code + "\n")
    executor = SlurmExecutor()
    executor.settle_s = 60  # it would time the test out if waited for
    outcome = executor.wait(job, request(tmp_path), started=0.0, poll_s=0.01)
    assert outcome.state == state, outcome.reason
    assert reason in outcome.reason
    assert len(slurm.commands("squeue")) == 1


def test_the_default_grace_outlasts_nfs_attribute_caching():
    assert SlurmExecutor.settle_s >= 90  # acdirmax: 60 s by default
