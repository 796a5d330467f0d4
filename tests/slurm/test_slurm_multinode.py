"""Two nodes through real Slurm: the emulated nodes n1, n2 of `deploy/slurm/slurm-up.sh --nodes 2` (a
slurmd each in network + UTS namespaces of its own, on a bridge with this host; emulation on one machine).
`srun -N2` runs on both; a study with `--nnodes 2` runs its launches as two-node sbatch jobs (srun starts
torchrun on each node, c10d rendezvous on the first) and publishes; accounting (sacct) shows the jobs on
2 nodes; the TaskProlog hands the study's published config to the tasks on both nodes."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from autotuner.store import Store
from tests.api.service import TOKENS, make_server
from tests.helpers import skip_or_fail
from tests.slurm.cluster import EMU_HOST_ADDR, EMU_PARTITION, accounting
from tests.slurm.test_slurm_e2e import AUTOTUNER, SPACE, WORKLOAD

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CLUSTER = "slurm-emu"


def srun_two_nodes(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One task on each of two emulated nodes (srun waits for them if a job of an earlier test holds one)."""
    return subprocess.run(["srun", f"--partition={EMU_PARTITION}", "--nodes=2", "--ntasks-per-node=1", "--time=2",
                           "--export=ALL", *argv], env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_srun_n2_runs_one_task_on_each_emulated_node(emu_nodes):
    proc = srun_two_nodes("hostname")
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.split()
    assert len(names) == 2, proc.stdout
    assert len(set(names)) == 2, proc.stdout  # two nodes, each with its own name
    # each one a network of its own: its own address on the bridge, the controller reachable from it
    proc = srun_two_nodes(
        "sh", "-c", "echo \"$(hostname) $(ip -4 -o addr show dev eth0 | awk '{print $4}')\""
    )
    assert proc.returncode == 0, proc.stderr
    addresses = dict(line.split() for line in proc.stdout.splitlines())
    assert sorted(addresses) == sorted(names), proc.stdout
    assert len(set(addresses.values())) == 2
    assert all(a.startswith(EMU_HOST_ADDR.rsplit(".", 1)[0] + ".") for a in addresses.values()), addresses


@pytest.fixture(scope="module")
def two_node_study(emu_nodes, tmp_path_factory):
    """A tiny study through real Slurm on two emulated nodes (one rank each), run once for the module:
    (the tuner's output and exit code, its database URL)."""
    tmp = tmp_path_factory.mktemp("two-node")
    (tmp / "w.json").write_text(json.dumps(WORKLOAD))
    (tmp / "s.json").write_text(json.dumps(SPACE))
    db = f"sqlite:///{tmp / 'at.db'}"
    argv = [sys.executable, "-m", "autotuner", "tune", "--executor", "slurm", "--executor-option",
            f"partition={EMU_PARTITION}", "--db", db, "--workdir", str(tmp / "runs"), "--cluster", CLUSTER,
            "--workload", str(tmp / "w.json"), "--space", str(tmp / "s.json"), "--study", "two-node",
            "--nnodes", "2", "--nproc", "1", "--trials", "1", "--candidates-per-launch", "2",
            "--iterations", "3", "--warmup", "1", "--confirm-rounds", "2", "--launch-timeout", "240"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "AUTOTUNER_DATA_DIR": str(tmp)})  # fmt: skip
    return proc.stdout + proc.stderr, proc.returncode, db


def test_two_node_study_runs_two_node_sbatch_jobs_and_publishes(two_node_study, emu_nodes):
    output, returncode, db = two_node_study
    assert returncode == 0, output
    assert f"published {CLUSTER}/tiny version 1" in output

    store = Store(db)
    study = store.study("two-node")
    assert study.state == "done"
    launches = store.launches(study.id)
    assert [launch.kind for launch in launches][:2] == ["baseline", "search"]
    if study.best_candidate_id != study.baseline_candidate_id:  # else nothing to confirm (see test_slurm_e2e)
        assert any(launch.kind == "confirm" for launch in launches)
    for launch in launches:
        assert launch.state == "succeeded", (launch.seq, launch.error, launch.log_tail)
        assert launch.executor == "slurm", launch.backend_id
        assert launch.backend_id.isdigit(), launch.backend_id
        assert "#SBATCH --nodes=2" in launch.request
        assert f"#SBATCH --partition={EMU_PARTITION}" in launch.request
        # one rank on each node (rank 0 gathers every rank's host name), both through one rendezvous
        summary = launch.summary
        assert summary["nnodes"] == 2, summary
        assert summary["world_size"] == 2, summary
        assert len(set(summary["hosts"])) == 2
        assert set(summary["hosts"]) <= set(_emu_partition_nodes())
        assert summary["env"]["NCCL_NSOCKS_PERTHREAD"] == "2"  # through sbatch and srun to both nodes
    config = store.served_config(CLUSTER, "tiny", nodes=2)
    assert config is not None
    assert config.nodes == 2
    assert config.version == 1
    store.dispose()


def test_sacct_shows_the_study_jobs_on_two_nodes(two_node_study):
    _, returncode, db = two_node_study
    assert returncode == 0
    if not accounting():
        skip_or_fail(
            "slurm", "no accounting, no sacct: start the cluster with WITH_DBD=1 deploy/slurm/slurm-up.sh"
        )
    store = Store(db)
    job_ids = [launch.backend_id for launch in store.launches(store.study("two-node").id)]
    store.dispose()
    want = {job: f"{job}|2|COMPLETED|{EMU_PARTITION}" for job in job_ids}
    got: dict[str, str] = {}
    deadline = time.monotonic() + 30  # slurmctld hands finished jobs to slurmdbd asynchronously
    while time.monotonic() < deadline:
        proc = subprocess.run(["sacct", "--jobs", ",".join(job_ids), "--allocations", "--noheader", "--parsable2",
                               "--format=JobID,NNodes,State,Partition"],
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        got = {line.split("|")[0]: line for line in proc.stdout.splitlines()}
        if got == want:
            return
        time.sleep(0.5)
    assert got == want, proc.stderr


HOST_AND_ENV = r"""
import json, os, socket, sys
want = json.loads(sys.argv[1])
got = {k: os.environ.get(k) for k in want}
print(json.dumps({"host": socket.gethostname(), "procid": os.environ.get("SLURM_PROCID"), "ok": got == want}))
sys.exit(0 if got == want else 1)
"""


def test_task_prolog_exports_the_tuned_config_into_tasks_on_both_nodes(task_prolog, two_node_study, tmp_path):
    """The study's own published config, served by a real service on the bridge address (what the nodes'
    namespaces reach; 127.0.0.1 there is the node's own loopback), into a job on two nodes."""
    _, returncode, db = two_node_study
    assert returncode == 0
    server = make_server(tmp_path / "service", AUTOTUNER_HOST=EMU_HOST_ADDR, AUTOTUNER_DATABASE_URL=db)
    server = dataclasses.replace(server, url=server.url.replace("127.0.0.1", EMU_HOST_ADDR))
    server.start()
    try:
        with server.client("read") as client:
            response = client.get(f"/v1/configs/{CLUSTER}/tiny", params={"nodes": 2})
        assert response.status_code == 200, response.text
        exports = response.json()["exports"]
        assert exports["AUTOTUNER_CONFIG"] == f"{CLUSTER}/tiny/2n/v1"
        assert "AUTOTUNER_BATCH_SIZE" in exports

        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
        env.update({"AUTOTUNER_HOOK": AUTOTUNER, "AUTOTUNER_HOOK_ENV": str(tmp_path / "no-hook.env"),
                    "AUTOTUNER_CACHE_DIR": str(tmp_path / "hook-cache"), "AUTOTUNER_SERVER": server.url,
                    "AUTOTUNER_TOKEN": TOKENS["read"], "AUTOTUNER_CLUSTER": CLUSTER, "AUTOTUNER_WORKLOAD": "tiny"})  # fmt: skip
        proc = srun_two_nodes(sys.executable, "-c", HOST_AND_ENV, json.dumps(exports), env=env)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        tasks = [json.loads(line) for line in proc.stdout.splitlines()]
        assert sorted(t["procid"] for t in tasks) == ["0", "1"], tasks
        assert all(t["ok"] for t in tasks), tasks
        assert len({t["host"] for t in tasks}) == 2, tasks  # one task on each node, both with the config
    finally:
        server.kill(signal.SIGTERM)


def _emu_partition_nodes() -> list[str]:
    proc = subprocess.run(["sinfo", "--noheader", f"--partition={EMU_PARTITION}", "--Node", "--format=%N"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    return proc.stdout.split()


def test_the_host_partition_is_unchanged_by_the_emulated_nodes(slurm_cluster, emu_nodes):
    """The host stays the default partition's node: jobs that name no partition run there, as before."""
    proc = subprocess.run(["srun", "--time=1", "hostname", "-s"], capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == slurm_cluster
    assert slurm_cluster not in emu_nodes
