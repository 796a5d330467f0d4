"""End to end on the real Slurm cluster of deploy/slurm/slurm-up.sh: a study whose trials are sbatch jobs,
a hung trial scancelled at its timeout, a tuner killed with SIGKILL that re-attaches to its job, and the
TaskProlog that hands the served config to every task of a job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.executors import LaunchRequest, LaunchState
from autotuner.executors.slurm.executor import SlurmExecutor
from autotuner.store import Store
from tests.api.service import TOKENS, free_port, make_server, replay_study_body, served_config, wait_for_state
from tests.helpers import TINY_SPEC, launches_when

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

AUTOTUNER = str(Path(sys.executable).with_name("autotuner"))
WORKLOAD = {"name": "tiny", "batch_size": 32,
            "tables": [{"name": f"t{i}", "num_embeddings": 500, "embedding_dim": 16, "pooling_factor": 2}
                       for i in range(2)]}  # fmt: skip
# NCCL_NSOCKS_PERTHREAD=2 in every launch shows the launch environment reaching the ranks through
# sbatch and srun; an env that does not vary keeps the confirmation to one launch.
SPACE = {"env": {}, "fixed_env": {"NCCL_NSOCKS_PERTHREAD": "2"}, "precisions": [["fp32", "fp32"], ["fp16", "fp16"]],
         "batch_sizes": [32, 64], "allow_batch_change": True}  # fmt: skip


def tune(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "autotuner", "tune", "--executor", "slurm", "--db", f"sqlite:///{tmp_path / 'at.db'}",
            "--workdir", str(tmp_path / "runs"), *extra]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "AUTOTUNER_DATA_DIR": str(tmp_path)})  # fmt: skip


def new_study(tmp_path: Path, name: str, trials: int, confirm_rounds: int) -> subprocess.Popen[str]:
    (tmp_path / "w.json").write_text(json.dumps(WORKLOAD))
    (tmp_path / "s.json").write_text(json.dumps(SPACE))
    return tune(tmp_path, "--cluster", "slurm-box", "--workload", str(tmp_path / "w.json"), "--space",
                str(tmp_path / "s.json"), "--study", name, "--nproc", "2", "--trials", str(trials),
                "--candidates-per-launch", "2", "--iterations", "3", "--warmup", "1",
                "--confirm-rounds", str(confirm_rounds), "--launch-timeout", "240")  # fmt: skip


def slurm_state(job_id: str) -> str | None:
    info = SlurmExecutor().job_info(job_id)
    return info.state if info else None


def test_tune_runs_its_trials_as_sbatch_jobs_and_publishes(slurm_cluster, tmp_path):
    proc = new_study(tmp_path, "on-slurm", trials=2, confirm_rounds=2)
    output, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, output
    assert "published slurm-box/tiny version 1" in output

    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    study = store.study("on-slurm")
    launches = store.launches(study.id)
    assert [launch.kind for launch in launches][:3] == ["baseline", "search", "search"]
    # A finalist is confirmed against the baseline in launches of their own; when the baseline itself
    # measured fastest (it happens on a loaded machine) there is nothing to confirm.
    if study.best_candidate_id != study.baseline_candidate_id:
        assert any(launch.kind == "confirm" for launch in launches)
    for launch in launches:
        assert launch.executor == "slurm", launch.backend_id
        assert launch.backend_id.isdigit(), launch.backend_id
        assert launch.state == "succeeded", (launch.seq, launch.error, launch.log_tail)
        # the job Slurm ran was this launch's, and it ended well
        assert slurm_state(launch.backend_id) == "COMPLETED"
        assert (Path(launch.workdir) / "job_id").read_text().strip() == launch.backend_id
        assert "#SBATCH --job-name=s1-l" in launch.request
        # the launch environment reached every rank unchanged (rank 0 compares them all)
        assert launch.summary["env"]["NCCL_NSOCKS_PERTHREAD"] == "2"
        assert "AUTOTUNER_CONFIG" not in json.dumps(launch.summary)
    assert store.served_config("slurm-box", "tiny") is not None
    store.dispose()


def test_hung_trial_is_scancelled_at_its_timeout(slurm_cluster, tmp_path):
    spec = {"workload": WORKLOAD, "warmup": 1, "iterations": 3, "extra": {"inject": "hang"},
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}]}  # fmt: skip
    launch = LaunchRequest(name="hang-1", spec=spec, env={}, workdir=tmp_path / "hang", timeout_s=25)
    executor = SlurmExecutor()
    started = time.monotonic()
    outcome = executor.run(launch)
    elapsed = time.monotonic() - started
    assert outcome.state == LaunchState.TIMEOUT, (outcome.reason, outcome.log_tail)
    assert f"scancel {outcome.backend_id}" in outcome.reason
    assert elapsed < launch.timeout_s + 15
    assert "injecting fault 'hang'" in launch.log_path.read_text()
    # Slurm agrees the job is over (cancel() waits for it), and no rank survived it
    assert slurm_state(outcome.backend_id) == "CANCELLED"
    assert SlurmExecutor().describe(outcome.backend_id, launch).state == LaunchState.CANCELLED
    assert _processes_mentioning(str(launch.spec_path)) == []


def test_a_job_sbatch_queued_but_answered_too_late_for_is_followed(slurm_cluster, tmp_path, monkeypatch):
    """sbatch that queues the job and then does not answer within the executor's bound (a slow
    controller): the job was orphaned, running with no one to collect or cancel it, and the study
    failed. Now it is found (this user's, its name, its directory) and followed to its result."""
    real = shutil.which("sbatch")
    slow = tmp_path / "bin" / "sbatch"
    slow.parent.mkdir()
    slow.write_text(f'#!/bin/sh\n{real} "$@"\nrc=$?\nsleep 8\nexit $rc\n')
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow.parent}:{os.environ['PATH']}")
    spec = {"workload": WORKLOAD, "warmup": 1, "iterations": 3,
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}]}  # fmt: skip
    launch = LaunchRequest(name="late-1", spec=spec, env={}, workdir=tmp_path / "late", timeout_s=120)
    executor = SlurmExecutor()
    executor.command_timeout_s = 3
    outcome = executor.run(launch)
    assert outcome.state == LaunchState.SUCCEEDED, (outcome.reason, outcome.log_tail)
    assert outcome.backend_id == (launch.workdir / "job_id").read_text().strip()
    assert outcome.result is not None
    assert outcome.result["candidates"][0]["status"] == "ok"


def test_a_tuner_killed_with_sigkill_reattaches_to_its_running_job(slurm_cluster, tmp_path):
    first = new_study(tmp_path, "killed", trials=1, confirm_rounds=0)
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    launches = launches_when(
        store, "killed", lambda ls: bool(ls) and bool(ls[0].backend_id) and slurm_state(ls[0].backend_id) == "RUNNING",
        first, 120, "the baseline job never ran",
    )  # fmt: skip
    study = store.study("killed")
    first.send_signal(signal.SIGKILL)
    first.wait()
    job_id = launches[0].backend_id
    assert slurm_state(job_id) in ("RUNNING", "COMPLETING", "COMPLETED")  # the job outlives its tuner

    second = tune(tmp_path, "--study", "killed")
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    baseline = store.launch(launches[0].id)
    assert baseline.backend_id == job_id, (baseline.error, output)
    assert baseline.state == "succeeded", (baseline.error, output)
    assert not [x for x in store.launches(study.id) if x.attempt > 1]  # followed, not retried
    assert store.study("killed").state == "done"
    store.dispose()


# ---------------------------------------------------------------------------------- TaskProlog


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real service with a published config for cpu-box/small (a replay study run over REST). Shared
    by the TaskProlog tests; the last one stops it."""
    server = make_server(tmp_path_factory.mktemp("service"))
    server.start()
    try:
        with server.client("admin") as client:
            created = client.post("/v1/studies", json=replay_study_body("for-prolog"))
            assert created.status_code == 201, created.text
            study = wait_for_state(client, created.json()["id"], ("done", "failed"))
            assert study["state"] == "done", study
            response = served_config(client)  # at once: the study is done, so its config is published
            assert response.status_code == 200, response.text
            config = response.json()
        yield server, config
    finally:
        server.kill(signal.SIGTERM)


CHECK = r"""
import json, os, sys
want = json.loads(sys.argv[1])
got = {k: os.environ.get(k) for k in want}
print(json.dumps({"got": got, "procid": os.environ.get("SLURM_PROCID")}))
sys.exit(0 if got == want else 1)
"""


def srun_check(tmp_path: Path, want: dict, ntasks: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    """srun a task that checks INSIDE itself that its environment has `want` (None: unset)."""
    task_env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    task_env.update({"AUTOTUNER_HOOK": AUTOTUNER, "AUTOTUNER_HOOK_ENV": str(tmp_path / "no-hook.env"),
                     "AUTOTUNER_CACHE_DIR": str(tmp_path / "hook-cache"), **env})  # fmt: skip
    argv = ["srun", "--nodes=1", f"--ntasks={ntasks}", "--export=ALL", "--time=2",
            sys.executable, "-c", CHECK, json.dumps(want)]  # fmt: skip
    return subprocess.run(argv, env=task_env, capture_output=True, text=True, timeout=120, check=False)


def test_task_prolog_exports_the_served_config_into_every_task(task_prolog, served, tmp_path):
    server, config = served
    exports = config["exports"]
    assert exports["AUTOTUNER_CONFIG"] == "cpu-box/small/1n/v1"
    assert "AUTOTUNER_BATCH_SIZE" in exports
    job = {"AUTOTUNER_SERVER": server.url, "AUTOTUNER_TOKEN": TOKENS["read"], "AUTOTUNER_CLUSTER": "cpu-box",
           "AUTOTUNER_WORKLOAD": "small"}  # fmt: skip
    started = time.monotonic()
    proc = srun_check(tmp_path, exports, ntasks=2, **job)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert sorted(json.loads(line)["procid"] for line in proc.stdout.splitlines()) == ["0", "1"]
    assert time.monotonic() - started < 30

    # defaults from the hook.env file (the job sets none of it)
    hook_env = tmp_path / "hook.env"
    hook_env.write_text(
        f"# site defaults\nAUTOTUNER_SERVER={server.url}\nAUTOTUNER_TOKEN='{TOKENS['read']}'\n"
        'AUTOTUNER_CLUSTER="cpu-box"\nAUTOTUNER_WORKLOAD=small\nNOT_OURS=ignored\n'
    )
    proc = srun_check(tmp_path, {**exports, "NOT_OURS": None}, AUTOTUNER_HOOK_ENV=str(hook_env))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)

    # a job that opts out, and a trial (the Slurm executor's script sets AUTOTUNER_DISABLE=1): nothing
    unset = {k: None for k in exports}
    proc = srun_check(tmp_path, unset, AUTOTUNER_DISABLE="1", **job)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    # unconfigured: nothing, and the task still runs
    assert srun_check(tmp_path, unset).returncode == 0


def test_task_prolog_fails_open_when_the_service_is_down_or_silent(task_prolog, served, tmp_path):
    _, config = served
    exports = config["exports"]
    unset = {k: None for k in exports}
    job = {"AUTOTUNER_TOKEN": TOKENS["read"], "AUTOTUNER_CLUSTER": "cpu-box", "AUTOTUNER_WORKLOAD": "small"}

    # nothing listens: the task starts at once, without a config (no cache yet)
    down = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = srun_check(tmp_path, unset, AUTOTUNER_SERVER=down, **job)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert time.monotonic() - started < 20

    # a server that accepts and never answers: the hook gives up within its bound
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        proc = srun_check(tmp_path, unset, AUTOTUNER_SERVER=url, **job)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert time.monotonic() - started < 20

    # a broken hook executable does not stop the task either
    proc = srun_check(tmp_path, unset, AUTOTUNER_SERVER=down, AUTOTUNER_HOOK="/bin/false", **job)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


def test_task_prolog_serves_the_cached_config_while_the_service_is_down(task_prolog, served, tmp_path):
    server, config = served
    job = {"AUTOTUNER_TOKEN": TOKENS["read"], "AUTOTUNER_CLUSTER": "cpu-box", "AUTOTUNER_WORKLOAD": "small"}
    assert srun_check(tmp_path, config["exports"], AUTOTUNER_SERVER=server.url, **job).returncode == 0
    server.kill(signal.SIGKILL)  # (this module's last use of the service)
    # the same URL, now refused: the last config this node cached for it
    proc = srun_check(tmp_path, config["exports"], AUTOTUNER_SERVER=server.url, **job)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


def _processes_mentioning(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_trial_never_gets_the_served_config_from_the_sites_task_prolog(
    task_prolog, served, tmp_path, monkeypatch
):
    """The TaskProlog runs for the batch step too, before the launch script's own `export
    AUTOTUNER_DISABLE=1`: the served config went into the batch shell and, through srun, into every
    rank of every trial, the baseline's too (found on this cluster with the project's TaskProlog)."""
    server, config = served
    for key, value in {"AUTOTUNER_SERVER": server.url, "AUTOTUNER_TOKEN": TOKENS["read"], "AUTOTUNER_CLUSTER": "cpu-box",
                       "AUTOTUNER_WORKLOAD": "small", "AUTOTUNER_HOOK": AUTOTUNER,
                       "AUTOTUNER_HOOK_ENV": str(tmp_path / "no-hook.env"),
                       "AUTOTUNER_CACHE_DIR": str(tmp_path / "hook-cache")}.items():  # fmt: skip
        monkeypatch.setenv(key, value)  # the tuner runs where a job would be configured for the hook
    rank = tmp_path / "rank"
    rank.write_text('#!/bin/sh\nenv > "$PWD/rank-env.txt"\n')  # the trial's interpreter: says what it got
    rank.chmod(0o755)
    executor = SlurmExecutor(python=str(rank), gpus_per_node=0, exclusive=False)
    launch = LaunchRequest(name="s1-l1", spec={**TINY_SPEC, "device": "cpu"}, env={"NCCL_NSOCKS_PERTHREAD": "2"},
                           workdir=tmp_path / "launch-0001", nproc_per_node=1, timeout_s=60)  # fmt: skip
    job_id, _ = executor.submit(launch)
    deadline = time.monotonic() + 90
    while not executor.describe(job_id, launch).state.is_terminal():
        assert time.monotonic() < deadline, f"job {job_id} did not end in 90 s"
        time.sleep(0.5)
    seen = dict(
        line.split("=", 1)
        for line in (launch.workdir / "rank-env.txt").read_text().splitlines()
        if "=" in line
    )
    served_only = set(config["exports"]) - set(launch.env)
    assert served_only
    assert {k: v for k, v in seen.items() if k in served_only} == {}, "a served variable reached the trial"
    assert seen["NCCL_NSOCKS_PERTHREAD"] == "2"  # what the launch asked for, and only that
    assert seen["AUTOTUNER_DISABLE"] == "1"


def test_a_queued_job_says_what_it_waits_on_and_is_given_up_at_the_queue_timeout(slurm_cluster, tmp_path):
    """A job that cannot start (here: another job holds its node whole, as busy GPUs would) reads
    "pending" with Slurm's reason at every poll, and the queue timeout gives it up saying that reason:
    what the launch row shows. (Not a held dependency: sbatch_args refuse what would not run now.)"""
    blocker = subprocess.run(["sbatch", "--parsable", "--exclusive", f"--nodelist={slurm_cluster}",
                              "--job-name=at-test-blocker", "--output=/dev/null", "--wrap", "sleep 300"],
                             capture_output=True, text=True, check=True).stdout.strip().split(";")[0]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while slurm_state(blocker) != "RUNNING":
            assert time.monotonic() < deadline, (
                f"the blocking job {blocker} never ran: {slurm_state(blocker)}"
            )
            time.sleep(0.2)
        spec = {"workload": WORKLOAD, "warmup": 1, "iterations": 3,
                "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}]}  # fmt: skip
        launch = LaunchRequest(name="queued-1", spec=spec, env={}, workdir=tmp_path / "queued", timeout_s=120)
        executor = SlurmExecutor(sbatch_args=[f"--nodelist={slurm_cluster}"], queue_timeout_s=8)
        polls: list[tuple[LaunchState, str]] = []
        outcome = executor.run(launch, on_poll=lambda desc: polls.append((desc.state, desc.reason)))
    finally:
        subprocess.run(["scancel", blocker], check=False)
    assert (LaunchState.PENDING, "Slurm PENDING: Resources") in polls
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == "still queued after 8 s (queue_timeout_s): Slurm PENDING: Resources"
    assert slurm_state(outcome.backend_id) == "CANCELLED"
