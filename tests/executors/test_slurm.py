"""The Slurm executor without a cluster: the whole sbatch script (golden files), the commands it runs
(subprocess.run patched), and how it reads Slurm's answers (squeue / scontrol output recorded from the
real Slurm 22.05 of deploy/slurm/slurm-up.sh, in tests/executors/data/).

Regenerate the golden scripts after an intended change with `UPDATE_GOLDEN=1 pytest tests/executors/test_slurm.py`
and review the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.executors.slurm.executor import (
    SLURM_STATES,
    SlurmError,
    SlurmExecutor,
    SlurmOptions,
    parse_scontrol,
    parse_squeue_json,
)
from tests.helpers import TINY_SPEC as SPEC

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
DATA = HERE / "data"
WORKDIR = Path("/srv/autotuner/study-1/launch-0007")

ENV = {"NCCL_SOCKET_IFNAME": "eth0,eth1;rm -rf /", "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_ALGO": "Ring Tree"}


def request(workdir: Path = WORKDIR, **kw) -> LaunchRequest:
    defaults = dict(name="s1-l7", spec=SPEC, env=dict(ENV), workdir=workdir, python="/opt/py/bin/python",
                    timeout_s=600)  # fmt: skip
    defaults.update(kw)
    return LaunchRequest(**defaults)


# ------------------------------------------------------------------------------ golden scripts

GPU_OPTIONS = {
    "partition": "p5",
    "account": "ml-infra",
    "qos": "high",
    "time_limit": "0:20:00",
    "constraint": "efa&h100",
    "cpus_per_task": 96,
    "sbatch_args": ["--mem=0", "--reservation=tuning"],
    "python": "/fsx/envs/rec/bin/python",
    "rdzv_port": 29400,
    "env": {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"},
}
CASES = {
    "sbatch-1node.sh": ({}, {"nnodes": 1}),
    "sbatch-2nodes.sh": ({}, {"nnodes": 2}),
    "sbatch-8nodes.sh": ({"partition": "cpu", "exclusive": True}, {"nnodes": 8, "timeout_s": 3600}),
    "sbatch-gpu-8nodes.sh": (GPU_OPTIONS, {"nnodes": 8, "nproc_per_node": 8, "spec": {**SPEC, "device": "cuda"}}),
    "sbatch-shared-node.sh": ({"exclusive": False, "gpus_per_node": 0}, {"nnodes": 1, "env": {}}),
}  # fmt: skip


@pytest.mark.parametrize("golden", sorted(CASES))
def test_sbatch_script_is_golden(slurm, golden):
    options, launch = CASES[golden]
    rendered = SlurmExecutor(**options).dryrun(request(**launch)).rendered
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{golden} changed: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_script_exports_values_quoted_and_disables_the_task_prolog(slurm):
    script = SlurmExecutor(gpus_per_node=0).dryrun(request()).rendered
    assert "export NCCL_SOCKET_IFNAME='eth0,eth1;rm -rf /'\n" in script
    assert "export NCCL_ALGO='Ring Tree'\n" in script
    assert "export AUTOTUNER_DISABLE=1\n" in script  # a served config must never leak into a trial
    # every #SBATCH line comes before the first command (sbatch stops reading them there)
    first_command = next(i for i, line in enumerate(script.splitlines()) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(script.splitlines()) if line.startswith("#SBATCH"))


@pytest.mark.parametrize("workdir", ["/srv/a b/launch-1", "/srv/%j/launch-1", "relative/launch-1"])
def test_launch_directory_that_sbatch_cannot_take_is_refused(slurm, workdir):
    with pytest.raises(ValueError, match="launch directory"):
        SlurmExecutor().dryrun(request(Path(workdir)))


def test_launch_variable_with_a_bad_name_is_refused():
    with pytest.raises(ValueError, match="not a variable name"):
        SlurmExecutor(gpus_per_node=0).dryrun(request(env={"NCCL X": "1"}))


# ------------------------------------------------------------------------------ options


BAD_OPTIONS = [
    ({"partiton": "gpu"}, "unknown.*did you mean 'partition'"),
    ({"partition": "gpu; reboot"}, "partition"),
    ({"account": "a b"}, "account"),
    ({"qos": ""}, "qos"),
    ({"constraint": "a100 && efa"}, "constraint"),
    ({"time_limit": "ten minutes"}, "time_limit"),
    ({"time_limit": 0}, "time_limit"),
    ({"time_limit": True}, "time_limit"),
    ({"exclusive": "yes"}, "exclusive"),
    ({"gpus_per_node": -1}, "gpus_per_node"),
    ({"gpus_per_node": 1.5}, "gpus_per_node"),
    ({"cpus_per_task": 0}, "cpus_per_task"),
    # went to sbatch as typed, refused at every submission (found by fuzzing)
    ({"cpus_per_task": 2**63}, "cpus_per_task"),
    ({"gpus_per_node": 2**63}, "gpus_per_node"),
    ({"time_limit": 2**63}, "give 1 to 525600"),
    ({"rdzv_port": 70000}, "rdzv_port"),
    ({"sbatch_args": "--mem=0"}, "a list"),
    ({"sbatch_args": ["--mem=0 --exclusive"]}, "sbatch_args"),
    ({"sbatch_args": ["--comment=$(reboot)"]}, "sbatch_args"),
    ({"sbatch_args": ["-N2"]}, "sbatch_args"),
    ({"sbatch_args": ["--nodes=4"]}, "set by the executor"),
    ({"sbatch_args": ["--wrap=true"]}, "set by the executor"),
    ({"python": "python3 -X dev"}, "python"),
    ({"python": "--chdir"}, "python"),  # it follows srun's options: srun would take it as one
    ({"python": "-K0"}, "python"),
    ({"env": {"FI PROVIDER": "efa"}}, "env"),
    # would undo the script's own AUTOTUNER_DISABLE=1 (a served config in every trial), steer srun,
    # or change which code the trial runs
    ({"env": {"AUTOTUNER_DISABLE": "0"}}, "AUTOTUNER_DISABLE: not settable here"),
    ({"env": {"SLURM_JOB_NUM_NODES": "1"}}, "SLURM_JOB_NUM_NODES: not settable"),
    ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, "LD_PRELOAD: not settable"),
    ({"env": {"PYTHONPATH": "/tmp"}}, "PYTHONPATH: not settable"),
    ({"env": {"PATH": "/tmp"}}, "PATH: not settable"),
    # the shell's own and the script's (found by fuzzing): EXECIGNORE ran another srun than PATH's first,
    # UID was "readonly variable" and not exported, head was overwritten by the script
    ({"env": {"EXECIGNORE": "/usr/bin/*"}}, "EXECIGNORE: not settable"),
    ({"env": {"UID": "0"}}, "UID: not settable"),
    ({"env": {"BASH_COMPAT": "1"}}, "BASH_COMPAT: not settable"),
    ({"env": {"RANDOM": "4"}}, "RANDOM: not settable"),
    ({"env": {"head": "node-b"}}, "head: not settable"),
    ({"env": {"GCONV_PATH": "/tmp"}}, "GCONV_PATH: not settable"),  # glibc loads code from it
    # Slurm's binding of GPUs to tasks, and what torchrun sets per rank (found by a review on real Slurm)
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "CUDA_VISIBLE_DEVICES: not settable"),
    ({"env": {"MASTER_ADDR": "10.0.0.1"}}, "MASTER_ADDR: not settable"),
    ({"env": {"TORCHELASTIC_RUN_ID": "x"}}, "TORCHELASTIC_RUN_ID: not settable"),
    ({"env": {"FI_PROVIDER": 1}}, "env"),
    ({"queue_timeout_s": 0}, "queue_timeout_s"),
    ({"queue_timeout_s": float("inf")}, r"queue_timeout_s=inf: expected seconds > 0 \(at most 30 days\)"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_are_refused_with_a_clear_message(options, message):
    with pytest.raises(ValueError, match=message):
        SlurmExecutor(**options)


def test_good_options_are_kept():
    o = SlurmOptions.parse({**GPU_OPTIONS, "time_limit": 30, "queue_timeout_s": 3600})
    assert (o.partition, o.time_limit, o.sbatch_args, o.queue_timeout_s) == ("p5", 30, ("--mem=0", "--reservation=tuning"), 3600)  # fmt: skip
    assert SlurmOptions.parse({"time_limit": "1-00:00:00"}).time_limit == "1-00:00:00"
    # fabric settings stay settable, the plugin's library path included
    fabric = {"FI_PROVIDER": "efa", "LD_LIBRARY_PATH": "/opt/aws-ofi-nccl/lib", "NCCL_NET_PLUGIN": "aws-ofi"}
    assert SlurmOptions.parse({"env": fabric}).env == fabric


def test_make_executor_builds_it_from_study_settings():
    from autotuner.executors import make_executor
    from autotuner.tuning import StudySettings

    executor = make_executor(StudySettings(executor="slurm", executor_options={"partition": "gpu"}))
    assert isinstance(executor, SlurmExecutor)
    assert executor.options.partition == "gpu"
    with pytest.raises(ValueError, match="did you mean"):
        make_executor(StudySettings(executor="slurm", executor_options={"acount": "x"}))


# ------------------------------------------------------------------------------ a fake Slurm


class FakeSlurm:
    """Stands in for subprocess.run: records every call, answers from recorded Slurm output."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict]] = []
        self.squeue = (DATA / "squeue-22.05-running.json").read_text()
        self.squeue_next: list[str] = []  # answers for the next squeue calls, then `squeue` again
        self.scontrol: dict[str, str] = {}
        self.sacct = (1, "", (DATA / "sacct-disabled.err").read_text())
        self.sbatch = (0, "4242\n", "")  # ";cluster" follows only with --clusters (test_option_edges.py)
        self.sinfo = (0, "(null)\n", "")
        self.down = False  # the controller does not answer
        self.hang: dict[str, int] = {}  # command -> how many of its next calls time out
        self.scancel_next: list[tuple[int, str, str]] = []  # answers for the next scancel calls
        self.scontrol_down = False
        self.accounting_up = False  # slurmdbd answers sacct while the controller is down

    def __call__(self, argv, **kwargs):
        assert isinstance(argv, list), "Slurm is called with an argument list, never a shell string"
        assert not kwargs.get("shell")
        self.calls.append((list(argv), kwargs))
        if self.hang.get(argv[0], 0) > 0:
            self.hang[argv[0]] -= 1
            time.sleep(kwargs["timeout"])
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        if self.down and not (argv[0] == "sacct" and self.accounting_up):
            return self._done(
                argv, 1, "", f"{argv[0]}: error: Unable to contact slurm controller (connect failure)"
            )
        if argv[0] == "sbatch":
            return self._done(argv, *self.sbatch)
        if argv[0] == "squeue":
            return self._done(argv, 0, self.squeue_next.pop(0) if self.squeue_next else self.squeue, "")
        if argv[0] == "scontrol":
            job = argv[-1]
            if self.scontrol_down:
                return self._done(argv, 1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")  # fmt: skip
            if job in self.scontrol:
                return self._done(argv, 0, self.scontrol[job], "")
            return self._done(argv, 1, "", (DATA / "scontrol-invalid.err").read_text())
        if argv[0] == "sacct":
            return self._done(argv, *self.sacct)
        if argv[0] == "scancel":
            return self._done(argv, *(self.scancel_next.pop(0) if self.scancel_next else (0, "", "")))
        if argv[0] == "sinfo":
            return self._done(argv, *self.sinfo)
        raise AssertionError(f"unexpected command {argv}")

    @staticmethod
    def _done(argv, rc, out, err):
        return subprocess.CompletedProcess(argv, rc, out, err)

    def commands(self, name: str) -> list[list[str]]:
        return [argv for argv, _ in self.calls if argv[0] == name]


@pytest.fixture
def slurm(monkeypatch):
    fake = FakeSlurm()
    monkeypatch.setattr("autotuner.executors.slurm.executor.subprocess.run", fake)
    return fake


# ------------------------------------------------------------------------------ schedule


def test_schedule_runs_sbatch_parsable_and_returns_the_job_id(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # the tuner's own comm variables must not reach the trial
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # nor the job the tuner may itself run in
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")  # but where the client finds Slurm stays
    # sbatch's input variables beat the script's own #SBATCH lines (an array of 3, another partition)
    for name, value in {"SBATCH_ARRAY_INX": "0-2", "SBATCH_PARTITION": "other", "SALLOC_ACCOUNT": "x",
                        "SRUN_CPUS_PER_TASK": "9"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AUTOTUNER_TOKENS", "s3cret:admin")  # the service's secrets stay with it
    monkeypatch.setenv("AUTOTUNER_DATABASE_URL", "postgresql+psycopg://u:s3cretPW@db/autotuner")
    executor = SlurmExecutor(gpus_per_node=0)
    launch = request(tmp_path)
    (tmp_path / "exit_code").write_text("0\n")  # from an earlier try in the same directory
    job_id, dryrun = executor.submit(launch)
    assert job_id == "4242"
    [(argv, kwargs)] = slurm.calls
    assert argv == ["sbatch", "--parsable", str(tmp_path / "launch.sbatch")]
    assert (tmp_path / "launch.sbatch").read_text() == dryrun.rendered
    assert json.loads(launch.spec_path.read_text()) == SPEC
    assert not (tmp_path / "exit_code").exists()
    assert (tmp_path / "job_id").read_text().strip() == "4242"
    env = kwargs["env"]
    assert "NCCL_DEBUG" not in env
    assert "SLURM_JOB_ID" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert env["PATH"] == os.environ["PATH"]
    assert not [name for name in env if name.startswith(("SBATCH_", "SALLOC_", "SRUN_"))]
    # from the submission on: a site's TaskProlog runs for the batch step before the script can say it
    assert env["AUTOTUNER_DISABLE"] == "1"
    assert "s3cret" not in json.dumps(env)


def test_sbatch_refusal_is_an_error_naming_slurms_reason(slurm, tmp_path):
    slurm.sbatch = (1, "", "sbatch: error: invalid partition specified: nope\n")
    executor = SlurmExecutor(partition="nope", gpus_per_node=0)
    with pytest.raises(SlurmError, match="invalid partition specified: nope"):
        executor.submit(request(tmp_path))


def test_sbatch_missing_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match="sbatch is not installed"):
        SlurmExecutor(gpus_per_node=0).submit(request(tmp_path))


# ------------------------------------------------------------------------------ GPUs


def test_gpus_follow_the_spec_and_the_partition(slurm):
    assert "--gpus-per-node=4" in SlurmExecutor().dryrun(request(nproc_per_node=4, spec={**SPEC, "device": "cuda"})).rendered  # fmt: skip
    assert "--gpus" not in SlurmExecutor().dryrun(request(spec={**SPEC, "device": "cpu"})).rendered
    assert "--gpus" not in SlurmExecutor(gpus_per_node=0).dryrun(request(spec={**SPEC, "device": "cuda"})).rendered  # fmt: skip
    assert slurm.commands("sinfo") == []
    # device "auto": asked once whether the partition's nodes have GPU GRES
    assert "--gpus" not in SlurmExecutor().dryrun(request()).rendered  # this box: "(null)"
    slurm.sinfo = (0, "gpu:8(S:0-1)\n(null)\n", "")
    executor = SlurmExecutor(partition="p5")
    assert "--gpus-per-node=2" in executor.dryrun(request()).rendered
    executor.dryrun(request())
    assert slurm.commands("sinfo")[-1] == ["sinfo", "--noheader", "--format=%G", "--partition=p5"]
    assert len(slurm.commands("sinfo")) == 2  # cached per executor


# ------------------------------------------------------------------------------ describe


def _workdir(tmp_path: Path, exit_code: int | None = None) -> LaunchRequest:
    if exit_code is not None:
        (tmp_path / "exit_code").write_text(f"{exit_code}\n")
    return request(tmp_path)


def test_describe_reads_recorded_squeue_json_for_running_and_pending(slurm, tmp_path):
    executor = SlurmExecutor()
    assert executor.describe("2", _workdir(tmp_path)).state == LaunchState.RUNNING
    pending = executor.describe("3", _workdir(tmp_path))
    assert (pending.state, pending.reason) == (LaunchState.PENDING, "Slurm PENDING: Resources")
    assert slurm.commands("squeue")[0] == ["squeue", "--json", "--jobs", "2"]
    assert slurm.commands("scontrol") == []  # squeue knew


@pytest.mark.parametrize(
    ("job", "state", "exit_code", "reason"),
    [
        ("4", LaunchState.SUCCEEDED, 0, ""),
        ("5", LaunchState.SUCCEEDED, 1, ""),  # exit 1: some candidate failed, the launch itself ran
        ("6", LaunchState.FAILED, 3, "at start-up, a stalled collective, a dead peer"),
        ("7", LaunchState.FAILED, 0, "signal 9"),
        ("8", LaunchState.TIMEOUT, None, "time limit"),
        ("2", LaunchState.CANCELLED, None, "scancel"),
    ],
)
def test_describe_ended_jobs_from_recorded_squeue_json(slurm, tmp_path, job, state, exit_code, reason):
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()
    desc = SlurmExecutor().describe(job, _workdir(tmp_path))
    assert (desc.state, desc.exit_code) == (state, exit_code)
    assert reason in desc.reason


def test_the_trials_exit_code_file_decides_between_completed_and_failed(slurm, tmp_path):
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()
    # Slurm says FAILED (exit 3) but the trial wrote 1: a candidate failed, the launch ran
    desc = SlurmExecutor().describe("6", _workdir(tmp_path, exit_code=1))
    assert (desc.state, desc.exit_code) == (LaunchState.SUCCEEDED, 1)
    # still RUNNING in Slurm (the batch shell is exiting) but the trial is over
    slurm.squeue = (DATA / "squeue-22.05-running.json").read_text()
    assert SlurmExecutor().describe("2", _workdir(tmp_path, exit_code=0)).state == LaunchState.SUCCEEDED


def test_squeue_json_of_22_05_ignores_jobs_filter_and_is_filtered_here():
    data = json.loads((DATA / "squeue-22.05-running.json").read_text())
    assert len(data["jobs"]) == 3  # recorded with `squeue --json --jobs 2`
    assert parse_squeue_json(data, "2").state == "RUNNING"
    assert parse_squeue_json(data, "999") is None


def test_squeue_json_of_newer_slurm_state_lists_and_exit_objects():
    """Slurm >= 23.02: job_state is a list (base state first, then flags), exit_code an object."""
    jobs = {"jobs": [
        {"job_id": 41, "job_state": ["RUNNING", "COMPLETING"], "state_reason": "None",
         "exit_code": {"status": ["PENDING"], "return_code": {"set": False, "infinite": False, "number": 0}}},
        {"job_id": 42, "job_state": ["FAILED"], "state_reason": "NonZeroExitCode",
         "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "infinite": False, "number": 1},
                       "signal": {"id": {"set": False, "number": 0}, "name": ""}}},
        {"job_id": 43, "job_state": ["CANCELLED"], "exit_code": {"status": ["SIGNALED"], "return_code": 0,
                                                                  "signal": {"id": 15, "name": "TERM"}}},
        {"job_id": 44, "job_state": ["WEIRD_NEW_STATE"]},
    ]}  # fmt: skip
    assert parse_squeue_json(jobs, "41").state == "RUNNING"
    info = parse_squeue_json(jobs, "42")
    assert (info.state, info.exit_code, info.signal) == ("FAILED", 1, None)
    assert parse_squeue_json(jobs, "43").signal == 15
    from autotuner.executors.slurm.executor import _describe

    assert _describe(parse_squeue_json(jobs, "42"), None).state == LaunchState.SUCCEEDED
    assert _describe(parse_squeue_json(jobs, "44"), None).state == LaunchState.UNKNOWN


def test_state_map_covers_slurms_states_with_unknown_fallback():
    for state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED",
                  "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"):  # fmt: skip
        assert state in SLURM_STATES
    assert SLURM_STATES["OUT_OF_MEMORY"] == LaunchState.FAILED
    # the cluster's failures are not the config's: no quarantine of the env (the driver skips CANCELLED)
    assert SLURM_STATES["NODE_FAIL"] == SLURM_STATES["PREEMPTED"] == LaunchState.CANCELLED
    assert SLURM_STATES.get("SOMETHING_NEW", LaunchState.UNKNOWN) == LaunchState.UNKNOWN


@pytest.mark.parametrize(
    ("recorded", "state", "code"),
    [
        ("scontrol-running.txt", "RUNNING", 0),
        ("scontrol-completed.txt", "COMPLETED", 0),
        ("scontrol-failed-exit1.txt", "FAILED", 1),
        ("scontrol-timeout.txt", "TIMEOUT", 0),
        ("scontrol-cancelled.txt", "CANCELLED", 0),
    ],
)
def test_scontrol_show_job_is_parsed(recorded, state, code):
    text = (DATA / recorded).read_text()
    job_id = text.split()[0].split("=")[1]
    info = parse_scontrol(text, job_id)
    assert (info.state, info.exit_code) == (state, code)
    assert parse_scontrol(text, "123456") is None


def test_describe_falls_back_to_scontrol_then_to_the_exit_code_file(slurm, tmp_path):
    executor = SlurmExecutor()
    # squeue no longer lists job 5; scontrol still does (MinJobAge)
    slurm.scontrol["5"] = (DATA / "scontrol-failed-exit1.txt").read_text()
    desc = executor.describe("5", _workdir(tmp_path))
    assert (desc.state, desc.exit_code) == (LaunchState.SUCCEEDED, 1)
    # nobody remembers job 9 (no accounting either): the trial's own exit code
    assert executor.describe("9", _workdir(tmp_path, exit_code=0)).state == LaunchState.SUCCEEDED
    assert [a[0] for a, _ in slurm.calls[-3:]] == ["squeue", "scontrol", "sacct"]


def test_a_job_gone_without_an_exit_code_is_cancelled_not_failed(slurm, tmp_path):
    """Recorded on the real cluster: job 24 scancelled while its tuner was down (SIGKILL), the tuner back
    after MinJobAge, no accounting (squeue and scontrol no longer know it). The batch script writes the
    trial's exit code whatever the trial did: none means Slurm killed the script itself. Failed, the
    resumed study quarantined the env config of a search launch so ended; the local executor's launch
    gone without an exit code is cancelled (and retried on resume)."""
    slurm.squeue = (DATA / "squeue-22.05-job-purged.json").read_text()
    gone = SlurmExecutor().describe("24", _workdir(tmp_path))
    assert [a[0] for a, _ in slurm.calls] == ["squeue", "scontrol", "sacct"]
    assert gone.state == LaunchState.CANCELLED, gone.reason
    assert "MinJobAge" in gone.reason


def test_describe_uses_accounting_for_old_jobs(slurm, tmp_path):
    slurm.sacct = (0, "9|CANCELLED by 0|0:15\n", "")
    desc = SlurmExecutor().describe("9", _workdir(tmp_path))
    assert desc.state == LaunchState.CANCELLED


def test_a_controller_that_does_not_answer_is_unknown_not_failed(slurm, tmp_path):
    slurm.down = True
    desc = SlurmExecutor().describe("2", _workdir(tmp_path))
    assert desc.state == LaunchState.UNKNOWN
    assert "Unable to contact" in desc.reason
    # squeue --json of 22.05 with slurmctld stopped (recorded): exit 0, no jobs, an "errors" entry
    slurm.down = False
    slurm.squeue = (DATA / "squeue-22.05-controller-down.json").read_text()
    slurm.scontrol_down = True
    desc = SlurmExecutor().describe("2", _workdir(tmp_path))
    assert desc.state == LaunchState.UNKNOWN
    assert "Failed while looking for jobs" in desc.reason
    assert not desc.state.is_terminal()  # the tuner keeps following the job
    assert SlurmExecutor().describe("2", _workdir(tmp_path, exit_code=0)).state == LaunchState.SUCCEEDED


def test_accounting_alone_is_believed_only_when_it_says_the_job_ended(slurm, tmp_path):
    """slurmctld paused on the test cluster, slurmdbd up: sacct said PENDING of a job that ran (it hears
    of the start from the controller), and a launch whose queue_timeout_s passed was cancelled as
    "still queued" while it ran."""
    slurm.down, slurm.accounting_up = True, True
    slurm.sacct = (0, "2|PENDING|0:0\n", "")
    desc = SlurmExecutor().describe("2", _workdir(tmp_path))
    assert desc.state == LaunchState.UNKNOWN, desc.reason
    assert "accounting says PENDING, maybe not yet told it started" in desc.reason
    assert "Unable to contact slurm controller" in desc.reason
    slurm.sacct = (0, "2|COMPLETED|0:0\n", "")
    assert SlurmExecutor().describe("2", _workdir(tmp_path, exit_code=0)).state == LaunchState.SUCCEEDED
    slurm.sacct = (0, "2|NODE_FAIL|0:0\n", "")
    assert SlurmExecutor().describe("2", _workdir(tmp_path)).state == LaunchState.CANCELLED


def test_accounting_that_says_pending_of_a_job_the_controller_lost_is_not_believed(slurm, tmp_path):
    """slurmctld killed (SIGKILL) on the test cluster while job 309 ran, then started again: it had not
    saved the job ("Invalid job id specified"), and sacct said PENDING of it for good. The launch waited
    out its queue timeout, and a cancel of it was never confirmed (cancelled again every minute)."""
    slurm.squeue = (DATA / "squeue-22.05-job-purged.json").read_text()
    slurm.sacct = (0, "24|PENDING|0:0\n", "")
    assert SlurmExecutor().job_info("24") is None
    gone = SlurmExecutor().describe("24", _workdir(tmp_path))
    assert gone.state == LaunchState.CANCELLED, gone.reason
    assert SlurmExecutor().cancel("24", _workdir(tmp_path)) is None  # the end confirmed
    slurm.sacct = (0, "24|COMPLETED|0:0\n", "")  # an end it says is still read, for its exit code
    assert SlurmExecutor().job_info("24").state == "COMPLETED"


def test_a_job_id_is_owned_only_while_slurm_knows_it_under_the_launchs_name(slurm, tmp_path):
    """A controller that lost its state gave job 309's id to the next job (the test cluster): a cancel
    sent later by that id stopped the other job."""
    ours, other = request(Path("/tmp/rec"), name="rec-run"), request(Path("/tmp/rec"), name="s1-l7")
    assert SlurmExecutor().owns("2", ours) is True  # squeue --json (recorded): job 2 is "rec-run" in /tmp/rec
    assert SlurmExecutor().owns("2", other) is False
    # the same name in another directory: another store's launch (every store has an s1-l1)
    assert SlurmExecutor().owns("2", request(tmp_path, name="rec-run")) is False
    assert (
        SlurmExecutor().owns("1", request(Path("/tmp"), name="python3")) is False
    )  # it ended: nothing to stop
    slurm.squeue = (DATA / "squeue-22.05-job-purged.json").read_text()
    slurm.scontrol["2"] = (DATA / "scontrol-running.txt").read_text()  # scontrol's answer: JobName=rec-run
    assert SlurmExecutor().owns("2", ours) is True
    assert SlurmExecutor().owns("2", other) is False
    assert SlurmExecutor().owns("24", other) is False  # known no more
    slurm.down = True
    assert SlurmExecutor().owns("2", ours) is None
    slurm.accounting_up, slurm.sacct = True, (0, "2|COMPLETED|0:0\n", "")  # accounting alone: it ended
    assert SlurmExecutor().owns("2", ours) is False  # nothing to stop: no scancel by a name unseen


def test_a_fresh_executor_reattaches_from_the_job_id_alone(slurm, tmp_path):
    """What a tuner restarted after SIGKILL has: the job id from the database and the launch directory."""
    first = SlurmExecutor(gpus_per_node=0)
    launch = request(tmp_path)
    slurm.sbatch = (0, "2\n", "")
    job_id, _ = first.submit(launch)
    del first
    again = SlurmExecutor(gpus_per_node=0)
    assert again.describe(job_id, launch).state == LaunchState.RUNNING
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()  # later: job 2 ended (cancelled)
    assert again.describe(job_id, launch).state == LaunchState.CANCELLED


@pytest.mark.parametrize("bad", ["", "12; rm -rf /", "abc", "--all"])
def test_job_ids_are_checked_before_reaching_a_command(slurm, tmp_path, bad):
    with pytest.raises(ValueError, match="not a Slurm job id"):
        SlurmExecutor().describe(bad, _workdir(tmp_path))
    assert slurm.calls == []


# ------------------------------------------------------------------------------ cancel and wait


def test_cancel_runs_scancel_and_waits_for_the_end(slurm, tmp_path):
    executor = SlurmExecutor()
    executor.cancel_grace_s = 5
    slurm.squeue_next = [slurm.squeue] * 2  # still running twice after scancel, then cancelled
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()
    started = time.monotonic()
    executor.cancel("2", _workdir(tmp_path))
    assert slurm.commands("scancel") == [["scancel", "2"]]
    assert len(slurm.commands("squeue")) == 3  # running, running, cancelled
    assert time.monotonic() - started < 4


UNREACHED = (
    1,
    "",
    "scancel: error: Kill job error on job id 2: Unable to contact slurm controller (connect failure)",
)


@pytest.mark.parametrize("blip", ["timed out", "could not contact"])
def test_a_scancel_that_did_not_reach_the_controller_is_sent_again(slurm, tmp_path, blip):
    """A controller blip as the launch was given up: the one scancel was lost, and the job ran on (or
    started later from the queue), unfollowed, on GPU nodes until its time limit, its launch "cancelled"."""
    executor = SlurmExecutor()
    executor.cancel_grace_s, executor.command_timeout_s = 5, 0.2
    if blip == "timed out":
        slurm.hang["scancel"] = 1
    else:
        slurm.scancel_next = [UNREACHED]
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()  # the second one took
    assert executor.cancel("2", _workdir(tmp_path)) is None  # its end confirmed
    assert slurm.commands("scancel") == [["scancel", "2"]] * 2


def test_a_scancel_that_never_reaches_the_controller_names_the_job_that_may_still_run(slurm, tmp_path):
    """Before, a warning in the log and the launch said cancelled: nobody was told the job may still run."""
    executor = SlurmExecutor()
    executor.cancel_grace_s, executor.command_timeout_s = 1.0, 0.3
    slurm.hang["scancel"] = 1_000
    started = time.monotonic()
    left = executor.cancel("2", _workdir(tmp_path))
    took = time.monotonic() - started
    assert left is not None
    assert left.startswith("Slurm job 2 may still run: scancel did not reach the controller")
    assert "`scancel 2`" in left
    # the grace window, one command timeout, and the fake's fork and exec (0.2 s was tight on a busy machine)
    assert took < 1.0 + 0.3 + 1.5  # it waited on the scancel that hangs for 1,000 s: no bound at all
    assert 2 <= len(slurm.commands("scancel")) <= 3  # tried again, half a second apart, not in a tight loop
    assert slurm.commands("squeue") == []  # a controller scancel does not reach is not asked for the state


def test_a_job_still_running_after_the_grace_window_is_named(slurm, tmp_path):
    """scancel taken, but the job not seen ended: only a log line said so."""
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0.6  # job 2 stays RUNNING in the recording
    left = executor.cancel("2", _workdir(tmp_path))
    assert left is not None
    assert left.startswith("Slurm job 2 may still run: Slurm still says RUNNING 1 s after scancel")
    assert "`squeue --jobs 2`" in left


def test_wait_does_not_count_queue_time_and_cancels_at_the_timeout(slurm, tmp_path, monkeypatch):
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0
    states = iter(["3"] * 4)  # job 3 is PENDING in the recording, job 2 RUNNING

    def describe(backend_id, launch):
        return SlurmExecutor.describe(executor, next(states, "2"), launch)

    monkeypatch.setattr(executor, "describe", describe)
    launch = request(tmp_path, timeout_s=0.3)
    started = time.monotonic()
    outcome = executor.wait("2", launch, started=started, poll_s=0.1)
    elapsed = time.monotonic() - started
    assert outcome.state == LaunchState.TIMEOUT
    assert "0 s timeout (scancel 2)" in outcome.reason
    assert elapsed >= 0.3 + 0.3  # ~0.4 s queued, then 0.3 s running
    assert slurm.commands("scancel") == [["scancel", "2"]]


def test_wait_gives_up_on_a_job_stuck_in_the_queue(slurm, tmp_path, monkeypatch):
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    executor = SlurmExecutor(queue_timeout_s=0.2)
    executor.cancel_grace_s = 0
    outcome = executor.wait("3", request(tmp_path, timeout_s=60), started=time.monotonic(), poll_s=0.05)
    assert outcome.state == LaunchState.CANCELLED
    assert "queued" in outcome.reason
    assert "Resources" in outcome.reason
    assert slurm.commands("scancel") == [["scancel", "3"]]


def _polls(executor, monkeypatch, answers):
    """`executor.describe` answering `answers` in turn (a job id of the recording, a state, or None for
    a poll that could not read the state), then job 2 (RUNNING) for ever."""
    answers = iter(answers)

    def describe(backend_id, launch):
        answer = next(answers, "2")
        if answer is None:
            return Description(LaunchState.UNKNOWN, None, "squeue: timed out")
        if isinstance(answer, LaunchState):
            return Description(answer, 0)
        return SlurmExecutor.describe(executor, answer, launch)

    monkeypatch.setattr(executor, "describe", describe)


def test_an_unreadable_first_poll_does_not_start_the_run_clock_of_a_queued_job(slurm, tmp_path, monkeypatch):
    """One failed squeue before the job was first seen queued counted its whole queue time as run time:
    the queued launch was cancelled as a timeout, and its env quarantined."""
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0
    _polls(executor, monkeypatch, [None] + ["3"] * 4)  # unreadable, then PENDING (job 3) for 0.4 s
    launch = request(tmp_path, timeout_s=0.3)
    started = time.monotonic()
    outcome = executor.wait("2", launch, started=started, poll_s=0.1)
    assert outcome.state == LaunchState.TIMEOUT
    assert time.monotonic() - started >= 0.4 + 0.3  # queued, then its whole timeout running


def test_a_launch_followed_again_after_it_was_seen_queued_counts_from_when_it_runs(
    slurm, tmp_path, monkeypatch
):
    """A restarted runner follows a launch whose row said pending: the hours it spent queued before the
    restart are not run time (it was timed out at its first running poll)."""
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0
    _polls(executor, monkeypatch, ["2", "2", LaunchState.SUCCEEDED])  # running twice, then ended
    launch = request(tmp_path)
    two_hours_ago = time.monotonic() - 7200
    outcome = executor.wait("2", launch, started=two_hours_ago, queued=True, poll_s=0.01)
    assert outcome.state != LaunchState.TIMEOUT, outcome.reason
    assert slurm.commands("scancel") == []
    outcome = executor.wait("2", launch, started=two_hours_ago, poll_s=0.01)  # a row that said running
    assert outcome.state == LaunchState.TIMEOUT, (outcome.state, outcome.reason)


def test_a_followed_launch_whose_state_stays_unreadable_is_given_up_after_its_timeout(
    slurm, tmp_path, monkeypatch
):
    """Followed again after a restart (its clock starts at a running answer), then not one readable
    answer (a controller gone for good): it waited for ever, with queue_timeout_s unset."""
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0
    _polls(executor, monkeypatch, [None] * 10_000)
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()  # the scancel took: its end is confirmed
    started = time.monotonic()
    outcome = executor.wait("2", request(tmp_path, timeout_s=0.3), started=started, queued=True, poll_s=0.05)
    assert outcome.state == LaunchState.CANCELLED  # nothing says it ran: no timeout, no quarantine
    assert outcome.reason == "its state could not be read for 0 s: squeue: timed out"
    assert time.monotonic() - started >= 0.3
    assert slurm.commands("scancel") == [["scancel", "2"]]


def test_a_fresh_launch_whose_state_is_never_readable_is_cancelled_not_timed_out(
    slurm, tmp_path, monkeypatch
):
    """The controller down from the submission on: the run clock ran from sbatch, the "could not be read"
    rule never applied, and the launch ended a timeout, its env config quarantined for nothing."""
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    slurm.down = True
    executor = SlurmExecutor()
    executor.cancel_grace_s = 0
    started = time.monotonic()
    outcome = executor.wait("2", request(tmp_path, timeout_s=0.3), started=started, poll_s=0.05)
    assert outcome.state == LaunchState.CANCELLED, outcome.reason
    assert outcome.reason.startswith("its state could not be read for 0 s: Slurm did not answer")
    assert "Unable to contact slurm controller" in outcome.reason
    assert time.monotonic() - started >= 0.3
    assert slurm.commands("scancel") == [["scancel", "2"]]


def test_wait_collects_a_finished_launch(slurm, tmp_path, monkeypatch):
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    slurm.squeue = (DATA / "squeue-22.05-ended.json").read_text()
    launch = _workdir(tmp_path, exit_code=1)
    launch.log_path.write_text("trials.run: candidate 0 failed\n")
    outcome = SlurmExecutor().wait("5", launch, started=time.monotonic())
    # exit 1 but no result: the launch failed, with the log's tail
    assert outcome.state == LaunchState.FAILED
    assert "no result written" in outcome.reason
    assert "candidate 0 failed" in outcome.log_tail
    assert SlurmExecutor().logs("5", launch) == "trials.run: candidate 0 failed"


def test_module_imports_without_slurm_installed(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    code = "import autotuner.executors.slurm.executor as s; s.SlurmExecutor(partition='gpu')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_a_trial_srun_could_not_start_for_an_unreachable_controller_is_cancelled_not_failed(
    slurm, tmp_path, monkeypatch
):
    """Recorded on the real cluster: slurmctld stopped as job 12 began, its srun could not confirm the
    allocation, and the batch script wrote srun's exit 1. Read as a trial that failed, a search launch
    quarantined an env config that never ran."""
    monkeypatch.setattr(SlurmExecutor, "min_poll_s", 0.0)
    slurm.scontrol["12"] = (DATA / "scontrol-failed-srun-unreached.txt").read_text()
    launch = _workdir(tmp_path, exit_code=1)
    launch.log_path.write_text((DATA / "srun-controller-down.log").read_text())
    outcome = SlurmExecutor().wait("12", launch, started=time.monotonic())
    assert outcome.state == LaunchState.CANCELLED, outcome.reason
    assert "srun could not start the trial" in outcome.reason
    assert "Unable to contact slurm controller" in outcome.reason
    # srun's line for a task that ran and failed says nothing of the sort: that launch failed
    launch.log_path.write_text("srun: error: vm: task 0: Exited with exit code 1\n")
    assert SlurmExecutor().wait("12", launch, started=time.monotonic()).state == LaunchState.FAILED
