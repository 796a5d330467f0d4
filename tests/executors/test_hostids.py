"""Emulated nodes as NCCL host ids (nodes=hostids): the plan (golden) on CPU, one shared GPU and GPUs of
their own, the refusal where ranks of one host would share a GPU, and a real 2-agent launch on CPU."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import check_gpu_sharing, hostid_agents, visible_gpus
from tests.helpers import TINY_SPEC

GOLDEN = Path(__file__).parent / "golden"


def request(workdir: Path, nnodes: int = 2, nproc: int = 1, **kw) -> LaunchRequest:
    defaults = dict(name="s1-l7", spec=TINY_SPEC, env={"NCCL_NSOCKS_PERTHREAD": "4"}, workdir=workdir,
                    nnodes=nnodes, nproc_per_node=nproc, python="/opt/py/bin/python", timeout_s=120)  # fmt: skip
    return LaunchRequest(**{**defaults, **kw})


@pytest.mark.parametrize(
    ("gpus", "nproc", "golden"),
    [(0, 1, "local-2-hostids-cpu.sh"), (1, 1, "local-2-hostids-1gpu.sh"), (4, 2, "local-2-hostids-4gpus.sh")],
)
def test_the_hostids_plan_is_golden(gpus, nproc, golden):
    launch = request(Path("/srv/autotuner/study-1/launch-0007"), nproc=nproc)
    script = LocalExecutor(nodes="hostids", gpus=gpus, rdzv_port=29533).dryrun(launch).rendered
    assert (
        re.sub(r"--rdzv-id=s1-l7-[0-9a-f]{6}", "--rdzv-id=s1-l7-TAG", script) == (GOLDEN / golden).read_text()
    )


def test_each_node_is_a_host_of_its_own_and_shared_gpus_turn_off_direct_paths():
    shared = hostid_agents("s2-l1", 2, 1, "py", "tag", ["-m", "trials.run"], 29500, devices=["0"])
    own = hostid_agents("s2-l1", 2, 1, "py", "tag", ["-m", "trials.run"], 29500, devices=["0", "1"])
    hostids = [next(a for a in cmd if a.startswith("NCCL_HOSTID=")) for cmd in shared]
    assert hostids == ["NCCL_HOSTID=s2-l1-node0", "NCCL_HOSTID=s2-l1-node1"]
    assert all("NCCL_NET=Socket" in cmd and "NCCL_SOCKET_IFNAME=lo" in cmd for cmd in shared + own)
    assert all("NCCL_P2P_DISABLE=1" in cmd and "NCCL_SHM_DISABLE=1" in cmd for cmd in shared)
    assert [next(a for a in cmd if a.startswith("CUDA_VISIBLE_DEVICES=")) for cmd in own] == [
        "CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"]  # fmt: skip
    assert not any("NCCL_P2P_DISABLE=1" in cmd for cmd in own)


@pytest.mark.parametrize(
    ("mode", "nnodes", "nproc", "gpus"),
    [("one", 1, 2, 1), ("ranks", 2, 1, 1), ("hostids", 2, 2, 1), ("namespaces", 2, 2, 1)],
)
def test_ranks_of_one_host_on_one_gpu_are_refused_with_the_fix(mode, nnodes, nproc, gpus):
    with pytest.raises(ValueError, match=r"NCCL refuses two ranks of one host on one GPU.*nodes=hostids"):
        check_gpu_sharing(mode, nnodes, nproc, gpus)


@pytest.mark.parametrize(
    ("mode", "nnodes", "nproc", "gpus"), [("hostids", 4, 1, 1), ("one", 1, 2, 2), ("one", 1, 8, 0)]
)
def test_nodes_may_share_gpus_and_cpu_ranks_are_never_refused(mode, nnodes, nproc, gpus):
    check_gpu_sharing(mode, nnodes, nproc, gpus)


def test_a_cpu_spec_is_not_refused_on_a_gpu_machine(tmp_path):
    launch = request(tmp_path, nnodes=1, nproc=2, spec={**TINY_SPEC, "device": "cpu"})
    assert "--nproc-per-node=2" in LocalExecutor(gpus=1).dryrun(launch).rendered
    with pytest.raises(ValueError, match="Duplicate|refuses"):
        LocalExecutor(gpus=1).dryrun(request(tmp_path, nnodes=1, nproc=2))


@pytest.mark.slow
def test_two_agents_one_rendezvous_each_rank_its_own_host_id(tmp_path):
    launch = request(tmp_path, python=sys.executable, timeout_s=240)
    outcome = LocalExecutor(nodes="hostids", gpus=0).run(launch)
    assert outcome.state == LaunchState.SUCCEEDED, launch.log_path.read_text()[-3000:]
    result = json.loads(launch.result_path.read_text())
    assert result["world_size"] == 2
    assert result["nnodes"] == 2
    assert result["env_per_rank"]["NCCL_HOSTID"] == ["s1-l7-node0", "s1-l7-node1"]
    assert result["env_consistent"]
    assert result["env"]["NCCL_NET"] == "Socket"


@pytest.mark.parametrize("nodes", ["hostids", "namespaces"])
@pytest.mark.parametrize(
    ("visible", "shares"),
    [
        ("4,5,6,7", ["4,5", "6,7"]),  # a tuner given GPUs 4-7 ran its nodes on 0-3: someone else's
        ("GPU-aa11,GPU-bb22,GPU-cc33,GPU-dd44", ["GPU-aa11,GPU-bb22", "GPU-cc33,GPU-dd44"]),
    ],
)
def test_emulated_nodes_get_their_share_of_the_gpus_the_tuner_was_given(monkeypatch, nodes, visible, shares):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    fabric = Fabric("1gbit") if nodes == "namespaces" else None
    launch = request(Path("/srv/autotuner/study-1/launch-0007"), nproc=2)
    script = LocalExecutor(nodes=nodes, fabric=fabric).dryrun(launch).rendered
    assert re.findall(r"CUDA_VISIBLE_DEVICES=(\S+)", script) == shares


def test_the_visible_gpus_end_where_cuda_stops_reading():
    assert visible_gpus.__doc__  # what CUDA does with CUDA_VISIBLE_DEVICES: stops at an empty or -1 entry
    with pytest.MonkeyPatch.context() as patch:
        for visible, devices in [("0,-1,2", ["0"]), ("", []), (" 3 , 1", ["3", "1"]), ("-1", [])]:
            patch.setenv("CUDA_VISIBLE_DEVICES", visible)
            assert visible_gpus() == devices


def test_an_interpreter_under_a_path_with_an_equals_sign_still_runs(tmp_path):
    """env(1) took /x/proj=v2/bin/python for one more variable and ran '-m': exit 127 for every launch of
    nodes=hostids and nodes=namespaces (found by fuzzing). The plan's own script, run under sh, with an
    interpreter that records how it was called."""
    import os
    import subprocess

    python = tmp_path / "proj=v2" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$RAN"\n')
    python.chmod(0o755)
    workdir = tmp_path / "launch-0001"
    workdir.mkdir()
    launch = request(workdir, python=str(python))
    script = LocalExecutor(nodes="hostids", gpus=0, rdzv_port=29533).dryrun(launch).rendered
    ran = tmp_path / "ran"
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RAN": str(ran)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    calls = ran.read_text().splitlines()
    assert len(calls) == 2
    assert all(call.startswith("-m torch.distributed.run --nnodes=2") for call in calls)
