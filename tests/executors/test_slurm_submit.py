"""Submitting a Slurm launch: sbatch failures that pass are tried again (one socket timeout failed the
whole study, for good; a failed study cannot be resumed), a submit limit says "submit later" (the engine
waits its turn, its lease renewed: tests/tuning/test_submit_later.py), others raise at once in sbatch's
words; and what sbatch hands the job from the tuner's environment (golden)."""

from __future__ import annotations

import re

import pytest

from autotuner.executors.base import SubmitLater
from autotuner.executors.slurm.executor import SlurmError, SlurmExecutor, _submit_env
from tests.executors.test_slurm import FakeSlurm, request

REFUSED = "sbatch: error: Batch job submission failed: "
TRANSIENT = [
    REFUSED + "Socket timed out on send/recv operation",
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "sbatch: error: slurm_receive_msg: Socket timed out on send/recv operation",
    "sbatch: error: slurm_receive_msg: Zero Bytes were transmitted or received",
    REFUSED + "Resource temporarily unavailable",
]
# What sbatch prints at a submit limit (Slurm 22.05): the limit's name, then the policy message.
POLICY = REFUSED + "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
LIMITS = ["QOSMaxSubmitJobPerUserLimit", "QOSMaxSubmitJobPerAccountLimit", "QOSGrpSubmitJobsLimit",
          "AssocMaxSubmitJobLimit", "AssocGrpSubmitJobsLimit"]  # fmt: skip
LASTING = [
    REFUSED + "invalid partition specified: nope",
    REFUSED + "Invalid account or account/partition combination specified",
    REFUSED + "Requested node configuration is not available",
    # the policy message alone (or with a size or time limit's name) also says a job too big or too long
    # for the QOS (DenyOnLimit): that never clears
    POLICY,
    "sbatch: error: QOSMaxWallDurationPerJobLimit\n" + POLICY,
]


class FlakySlurm(FakeSlurm):
    """FakeSlurm whose next sbatch calls answer `sbatch_next` first, and whose `squeue --noheader` (the
    look for a job a failed sbatch queued) answers `queued` ("ID|workdir" lines) or fails while `down_q`."""

    def __init__(self) -> None:
        super().__init__()
        self.sbatch_next: list[tuple[int, str, str]] = []
        self.queued = ""
        self.down_q = 0  # that many squeue looks fail

    def __call__(self, argv, **kwargs):
        if argv[0] == "sbatch" and self.sbatch_next:
            self.calls.append((list(argv), kwargs))
            return self._done(argv, *self.sbatch_next.pop(0))
        if argv[:2] == ["squeue", "--noheader"]:
            self.calls.append((list(argv), kwargs))
            if self.down_q:
                self.down_q -= 1
                return self._done(argv, 1, "", "squeue: error: Unable to contact slurm controller")
            return self._done(argv, 0, self.queued, "")
        return super().__call__(argv, **kwargs)


@pytest.fixture
def slurm(monkeypatch):
    fake = FlakySlurm()
    monkeypatch.setattr("autotuner.executors.slurm.executor.subprocess.run", fake)
    return fake


def executor(delays: tuple[float, ...] = (0.0, 0.0, 0.0)) -> SlurmExecutor:
    ex = SlurmExecutor(gpus_per_node=0)
    ex.submit_retry_delays_s = delays  # no waiting in tests
    return ex


@pytest.mark.parametrize("message", TRANSIENT)
def test_a_transient_sbatch_failure_is_tried_again(slurm, tmp_path, message):
    slurm.sbatch_next = [(1, "", message + "\n")]
    launch = request(tmp_path)
    job_id, _ = executor().submit(launch)
    assert job_id == "4242"
    assert (tmp_path / "job_id").read_text() == "4242\n"
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch", "squeue", "sbatch"]  # asked in between


def test_a_job_the_failed_sbatch_queued_all_the_same_is_followed_not_queued_twice(slurm, tmp_path):
    launch = request(tmp_path)
    slurm.sbatch_next = [(1, "", TRANSIENT[0])]
    # this user's jobs of the launch's name: another tuner's, in another directory, is not it
    slurm.queued = f"4100|/elsewhere/launch-0007\n4243|{tmp_path}\n"
    job_id, _ = executor().submit(launch)
    assert job_id == "4243"
    assert len(slurm.commands("sbatch")) == 1
    assert (tmp_path / "job_id").read_text() == "4243\n"


def test_no_second_sbatch_until_squeue_can_say_the_first_queued_nothing(slurm, tmp_path):
    slurm.sbatch_next = [(1, "", TRANSIENT[0])]
    slurm.down_q = 2
    job_id, _ = executor().submit(request(tmp_path))
    assert job_id == "4242"
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch", "squeue", "squeue", "squeue", "sbatch"]


@pytest.mark.parametrize("message", LASTING)
def test_other_sbatch_refusals_raise_at_once_in_sbatchs_words(slurm, tmp_path, message):
    slurm.sbatch = (1, "", message + "\n")
    with pytest.raises(SlurmError, match=re.escape(message.splitlines()[-1].split(": ", 2)[-1])):
        executor().submit(request(tmp_path))
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch"]


@pytest.mark.parametrize("limit", LIMITS)
def test_a_submit_limit_says_submit_later_at_once_naming_the_limit(slurm, tmp_path, limit):
    """A submit limit clears as this user's jobs end, which may take far longer than the executor may
    wait on its own (nothing renews the study's lease in there): the engine waits the launch's turn.
    sbatch is not tried again here, and squeue not asked: the controller refused the job, so nothing
    was queued."""
    slurm.sbatch_next = [(1, "", f"sbatch: error: {limit}\n{POLICY}\n")]
    ex = executor()
    ex.submit_limit_retry_s = 12.5
    with pytest.raises(
        SubmitLater, match=f"launch s1-l7 .*submit limit.*{limit}.*job submit limit"
    ) as refused:
        ex.submit(request(tmp_path))
    assert refused.value.retry_after_s == 12.5
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch"]
    assert not (tmp_path / "job_id").exists()
    # once the limit clears, the same launch submits as any other
    assert ex.submit(request(tmp_path))[0] == "4242"
    assert (tmp_path / "job_id").read_text() == "4242\n"


def test_a_submit_limit_after_a_lost_reply_says_submit_later_once_squeue_saw_nothing_queued(slurm, tmp_path):
    slurm.sbatch_next = [(1, "", TRANSIENT[0]), (1, "", f"sbatch: error: {LIMITS[0]}\n{POLICY}")]
    with pytest.raises(SubmitLater, match=LIMITS[0]):
        executor().submit(request(tmp_path))
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch", "squeue", "sbatch"]


def test_retries_are_bounded_and_then_say_submit_later(slurm, tmp_path):
    """A controller restarting or failing over can take minutes, longer than the executor may wait on its
    own (nothing renews the study's lease in there): past submit_retry_s the engine waits the launch's
    turn. Before, the study failed (SlurmError), for good."""
    slurm.sbatch = (1, "", TRANSIENT[4])
    with pytest.raises(
        SubmitLater, match=r"Resource temporarily unavailable \(sbatch tried 4 time\(s\) in 45 s\)"
    ):
        executor().submit(request(tmp_path))
    assert len(slurm.commands("sbatch")) == 4
    ex = executor()
    ex.submit_retry_s = 0.0  # no time left for another try
    slurm.calls.clear()
    with pytest.raises(SubmitLater, match=r"tried 1 time"):
        ex.submit(request(tmp_path))
    assert [argv[0] for argv, _ in slurm.calls] == ["squeue", "sbatch"]  # the first launch's note read


def unanswered(slurm, tmp_path) -> SlurmExecutor:
    """An executor whose sbatch of `request(tmp_path)` went unanswered past submit_retry_s."""
    ex = executor()
    ex.submit_retry_s = 0.0
    slurm.sbatch_next = [(1, "", TRANSIENT[0])]
    with pytest.raises(SubmitLater, match="Socket timed out"):
        ex.submit(request(tmp_path))
    slurm.calls.clear()
    return ex


def test_after_an_unanswered_sbatch_the_next_submit_follows_the_job_it_queued_not_a_second(slurm, tmp_path):
    ex = unanswered(slurm, tmp_path)
    slurm.queued = f"4243|{tmp_path}\n"
    assert ex.submit(request(tmp_path))[0] == "4243"
    assert [argv[0] for argv, _ in slurm.calls] == ["squeue"]  # no second sbatch
    assert (tmp_path / "job_id").read_text() == "4243\n"
    assert not (tmp_path / "sbatch-unanswered").exists()


def test_after_an_unanswered_sbatch_that_queued_nothing_the_next_submit_sends_it(slurm, tmp_path):
    ex = unanswered(slurm, tmp_path)
    assert ex.submit(request(tmp_path))[0] == "4242"
    assert [argv[0] for argv, _ in slurm.calls] == ["squeue", "sbatch"]
    assert not (tmp_path / "sbatch-unanswered").exists()
    slurm.calls.clear()
    ex.cancel_grace_s = 0.0
    ex.abandon(request(tmp_path))  # nothing left to look for in squeue: job_id names the job
    assert not [argv for argv, _ in slurm.calls if argv[:2] == ["squeue", "--noheader"]]
    assert slurm.commands("scancel") == [["scancel", "4242"]]


def test_after_an_unanswered_sbatch_no_sbatch_until_squeue_can_say(slurm, tmp_path):
    ex = unanswered(slurm, tmp_path)
    slurm.down_q = 1
    with pytest.raises(
        SubmitLater, match="squeue cannot say whether an earlier sbatch of launch s1-l7 queued it"
    ):
        ex.submit(request(tmp_path))
    assert [argv[0] for argv, _ in slurm.calls] == ["squeue"]
    assert (tmp_path / "sbatch-unanswered").exists()


def test_a_launch_given_up_after_an_unanswered_sbatch_cancels_the_job_it_queued(slurm, tmp_path):
    """Else it runs later with no one to follow, collect or cancel it (the engine abandons a launch whose
    turn never came: tests/tuning/test_submit_later.py)."""
    ex = unanswered(slurm, tmp_path)
    ex.cancel_grace_s = 0.0
    slurm.queued = f"4100|/elsewhere/launch-0007\n4243|{tmp_path}\n"
    ex.abandon(request(tmp_path))
    assert slurm.commands("scancel") == [["scancel", "4243"]]
    assert not (tmp_path / "sbatch-unanswered").exists()


def test_all_tries_fit_well_inside_the_study_lease():
    """Nothing renews the lease (AUTOTUNER_LEASE_S, default 60 s) while sbatch is tried again."""
    ex = SlurmExecutor()
    assert sum(ex.submit_retry_delays_s) <= ex.submit_retry_s <= 45


def test_sbatch_missing_is_raised_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    ex = executor(delays=(3600.0,))  # would hang the test if tried again
    with pytest.raises(SlurmError, match="sbatch is not installed"):
        ex.submit(request(tmp_path))


# ------------------------------------------------------------------------------ the job's environment

TUNER_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/var/lib/nccl-autotuner",
    "LANG": "C.UTF-8",
    "LD_LIBRARY_PATH": "/opt/amazon/efa/lib",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    # the head node's own devices: the job's nodes are other hosts
    "CUDA_VISIBLE_DEVICES": "4,5",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "ROCR_VISIBLE_DEVICES": "1",
    "HIP_VISIBLE_DEVICES": "1",
    "GPU_DEVICE_ORDINAL": "1",
    "ZE_AFFINITY_MASK": "0.1",
    # the tuner's comm variables, its own job's context, sbatch's input variables, its secrets
    "NCCL_DEBUG": "INFO",
    "FI_PROVIDER": "efa",
    "SLURM_JOB_ID": "77",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "SBATCH_PARTITION": "other",
    "SRUN_CPUS_PER_TASK": "9",
    "AUTOTUNER_TOKENS": "s3cret:admin",
    "AUTOTUNER_TRIAL_FAULT": "hang",
}
JOB_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/var/lib/nccl-autotuner",
    "LANG": "C.UTF-8",
    "LD_LIBRARY_PATH": "/opt/amazon/efa/lib",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "AUTOTUNER_TRIAL_FAULT": "hang",
    "AUTOTUNER_DISABLE": "1",
}


def test_the_environment_sbatch_hands_the_job_is_golden():
    """Slurm sets CUDA_VISIBLE_DEVICES only for a job given GPU GRES: on a partition without, the head
    node's "4,5" ran every node's trial on GPUs 4 and 5."""
    assert _submit_env(TUNER_ENV) == JOB_ENV


def test_submit_hands_sbatch_no_device_pinning(slurm, tmp_path, monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "4,5")
    executor().submit(request(tmp_path))
    [(_, kwargs)] = slurm.calls
    assert not {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} & set(kwargs["env"])


# ------------------------------------------------------------- a tuner stopped while sbatch is out


class InterruptedSlurm(FlakySlurm):
    """sbatch queues the job (squeue shows it), then the tuner is stopped (Ctrl-C, SIGTERM as Ctrl-C)
    before sbatch answers."""

    def __call__(self, argv, **kwargs):
        if argv[0] == "sbatch":
            self.calls.append((list(argv), kwargs))
            self.queued = f"4243|{kwargs.get('cwd') or self.workdir}\n"
            raise KeyboardInterrupt
        return super().__call__(argv, **kwargs)


def test_a_tuner_stopped_while_sbatch_is_out_leaves_what_finds_and_cancels_the_job(monkeypatch, tmp_path):
    """The job sbatch queued before the tuner was stopped ran on, unfollowed (its launch said "cancelled
    with its launcher"; a resumed study retried it beside it): the note left before sbatch was sent lets
    the launch given up find it by squeue and cancel it."""
    fake = InterruptedSlurm()
    fake.workdir = tmp_path
    monkeypatch.setattr("autotuner.executors.slurm.executor.subprocess.run", fake)
    ex = executor()
    ex.cancel_grace_s = 0.0
    with pytest.raises(KeyboardInterrupt):
        ex.submit(request(tmp_path))
    assert (tmp_path / "sbatch-unanswered").exists()
    ex.abandon(request(tmp_path))
    assert fake.commands("scancel") == [["scancel", "4243"]]
    assert not (tmp_path / "sbatch-unanswered").exists()


def test_a_job_submitted_but_never_recorded_is_cancelled_when_its_launch_is_given_up(slurm, tmp_path):
    """Stopped after sbatch answered but before the store recorded the id (a resume finds the launch
    without a job id): the job_id file names the job."""
    ex = executor()
    ex.cancel_grace_s = 0.0
    assert ex.submit(request(tmp_path))[0] == "4242"
    assert not (tmp_path / "sbatch-unanswered").exists()  # answered: nothing to look for
    ex.abandon(request(tmp_path))
    assert slurm.commands("scancel") == [["scancel", "4242"]]


@pytest.mark.parametrize("message", LASTING)
def test_a_refused_sbatch_leaves_nothing_to_look_for(slurm, tmp_path, message):
    slurm.sbatch_next = [(1, "", message)]
    with pytest.raises(SlurmError):
        executor().submit(request(tmp_path))
    assert not (tmp_path / "sbatch-unanswered").exists()
    slurm.calls.clear()
    executor().abandon(request(tmp_path))
    assert slurm.calls == []
