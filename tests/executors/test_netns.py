"""Emulated nodes as network namespaces: the plan (golden), a real 2-node launch, and no namespace
left behind, also when the launcher is killed with SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import _study_prefix, node_network, tagged
from autotuner.executors.local.netns import NodeNetwork, sweep_command
from tests.helpers import TINY_SPEC, skip_or_fail

GOLDEN = Path(__file__).parent / "golden" / "local-2-namespaces.sh"


def request(workdir: Path, nnodes: int = 2, **kw) -> LaunchRequest:
    defaults = dict(name="s1-l7", spec=TINY_SPEC, env={"NCCL_NSOCKS_PERTHREAD": "4"}, workdir=workdir,
                    nnodes=nnodes, nproc_per_node=1, python="/opt/py/bin/python", timeout_s=120)  # fmt: skip
    return LaunchRequest(**{**defaults, **kw})


def test_the_namespace_plan_is_golden():
    launch = request(Path("/srv/autotuner/study-1/launch-0007"))
    script = LocalExecutor(fabric=Fabric("1gbit"), nodes="namespaces", gpus=0).dryrun(launch).rendered
    assert re.sub(r"--rdzv-id=s1-l7-[0-9a-f]{6}", "--rdzv-id=s1-l7-TAG", script) == GOLDEN.read_text()


def test_the_plan_keeps_to_its_own_namespaces():
    net = NodeNetwork("at-s1-l7", 3, "1gbit")
    commands = [" ".join(argv) for argv in net.setup()]
    assert all(
        c.startswith(("ip netns add at-s1-l7-", "ip -n at-s1-l7-", "ip netns exec at-s1-l7-"))
        for c in commands
    )
    assert sum("tbf rate 1gbit" in c for c in commands) == 3  # each node's way out is shaped, loopback is not
    assert not any("dev lo" in c and "tbf" in c for c in commands)
    assert [argv[-1] for argv in net.teardown()] == [
        "at-s1-l7-br",
        "at-s1-l7-n0",
        "at-s1-l7-n1",
        "at-s1-l7-n2",
    ]
    assert "grep '^at-s1-l'" in sweep_command("at-s1-l")
    with pytest.raises(ValueError, match="bad namespace prefix"):
        sweep_command("at-s1-l'; reboot")


def test_more_nodes_than_one_need_an_emulation():
    with pytest.raises(ValueError, match="nodes=ranks, nodes=hostids or nodes=namespaces"):
        LocalExecutor().dryrun(request(Path("/tmp/x")))


@pytest.fixture
def netns_capable():
    if (
        os.geteuid() != 0
        or subprocess.run(["ip", "netns", "add", "at-probe"], capture_output=True).returncode
    ):
        skip_or_fail("netns", "needs root and iproute2 to make network namespaces")
    subprocess.run(["ip", "netns", "del", "at-probe"], check=False)


def named(launch: LaunchRequest) -> str:
    """The prefix of a launch's namespaces ("at-<study's directory>-s1-l7")."""
    return node_network(launch, None).prefix


def namespaces(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def namespaces_once_exited(prefix: str, deadline_s: float = 30.0) -> list[str]:
    """The namespaces of `prefix` left once the launch scripts have exited: the script writes exit_code,
    which ends the launch for the executor, then exits, and its EXIT trap removes its namespaces. Waited
    for (a loaded machine ran the check between the two), up to a deadline."""
    deadline = time.monotonic() + deadline_s
    while (left := namespaces(prefix)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.slow
@pytest.mark.netns
def test_a_two_node_launch_runs_one_agent_per_namespace_and_cleans_up(netns_capable, tmp_path):
    launch = request(tmp_path / "l", name="t1-l1", python=sys.executable)
    outcome = LocalExecutor(fabric=Fabric("1gbit"), nodes="namespaces").run(launch)
    assert outcome.state == LaunchState.SUCCEEDED, outcome.log_tail
    result = outcome.result
    assert (result["world_size"], result["nnodes"], result["local_world_size"]) == (2, 2, 1)
    assert result["candidates"][0]["status"] == "ok"
    assert namespaces_once_exited(_study_prefix(named(launch))) == []


def start_hung(executor: LocalExecutor, workdir: Path, name: str) -> tuple[str, LaunchRequest]:
    """A 2-node launch whose last rank hangs; returns once its three namespaces exist."""
    launch = request(
        workdir, name=name, python=sys.executable, spec={**TINY_SPEC, "extra": {"inject": "hang"}}
    )
    backend_id, _ = executor.submit(launch)
    prefix = named(launch) + "-"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(namespaces(prefix)) < 3:
        time.sleep(0.2)
    assert len(namespaces(prefix)) == 3  # the bridge and two nodes
    return backend_id, launch


@pytest.mark.slow
@pytest.mark.netns
def test_namespaces_a_killed_launcher_left_are_swept_by_the_next_launch(netns_capable, tmp_path):
    executor = LocalExecutor(nodes="namespaces")
    backend_id, first = start_hung(executor, tmp_path / "a", "t2-l1")
    # SIGKILL for the launcher and every process of the launch: no trap runs, nothing cleans up
    for pid in {int(backend_id), *tagged((first.workdir / "tag").read_text().strip())}:
        os.kill(pid, signal.SIGKILL)
    assert len(namespaces(named(first) + "-")) == 3
    second = request(tmp_path / "b", name="t2-l2", python=sys.executable)
    assert executor.run(second).state == LaunchState.SUCCEEDED
    assert (
        namespaces_once_exited(_study_prefix(named(first))) == []
    )  # the next launch of the study swept them, then removed its own


@pytest.mark.slow
@pytest.mark.netns
def test_a_cancelled_launch_leaves_no_namespace(netns_capable, tmp_path):
    executor = LocalExecutor(nodes="namespaces")
    backend_id, launch = start_hung(executor, tmp_path, "t3-l1")
    executor.cancel(backend_id, launch)
    assert namespaces(_study_prefix(named(launch))) == []


@pytest.mark.netns
def test_a_launch_of_another_store_keeps_its_namespaces_through_this_ones_sweep(netns_capable, tmp_path):
    """Two stores on one host number their studies and launches alike ("s1-l7"): the namespaces are
    named after the study's directory too, so that one store's sweep of stale namespaces (at the
    start of every launch) does not remove the live nodes of the other's."""
    theirs = request(tmp_path / "store-a" / "study-1" / "launch-0007")
    ours = request(tmp_path / "store-b" / "study-1" / "launch-0008", name="s1-l8")
    assert named(theirs) != named(ours)
    live = node_network(theirs, None).node(0)
    subprocess.run(["ip", "netns", "add", live], check=True)
    try:
        subprocess.run(["sh", "-c", sweep_command(_study_prefix(named(ours)))], check=True)
        assert namespaces(live) == [live]
    finally:
        subprocess.run(["ip", "netns", "del", live], check=False)
