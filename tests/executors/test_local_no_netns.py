"""A local launch whose network namespace cannot be made says so (EXIT_NO_NETNS's reason), rather
than "gone without an exit code": the script stops before it writes its exit_code file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import node_network
from tests.executors.test_fabric import SPEC, netns_capable  # noqa: F401 (a fixture)


@pytest.mark.netns
def test_a_namespace_that_cannot_be_made_fails_the_launch_saying_why(netns_capable, tmp_path):  # noqa: F811
    launch = LaunchRequest(name="s9-l1", spec=SPEC, env={}, workdir=tmp_path / "launch-0001",
                           python=sys.executable, timeout_s=60)  # fmt: skip
    taken = node_network(
        launch, None
    ).prefix  # the launch's own namespace, made first: `ip netns add` refuses it
    subprocess.run(["ip", "netns", "add", taken], check=True)
    try:
        outcome = LocalExecutor(fabric=Fabric("1gbit")).run(launch, poll_s=0.05)
    finally:
        subprocess.run(["ip", "netns", "del", taken], check=False)
    assert outcome.state == LaunchState.FAILED
    assert "could not create or shape the network namespace for the emulated fabric" in outcome.reason


@pytest.mark.netns
def test_a_rate_tc_refuses_fails_the_launch_not_measured_unshaped(netns_capable, tmp_path):  # noqa: F811
    launch = LaunchRequest(name="s9-l2", spec=SPEC, env={}, workdir=tmp_path / "launch-0002",
                           python=sys.executable, timeout_s=60)  # fmt: skip
    fabric = Fabric("2gbit")
    object.__setattr__(fabric, "burst", "nonsense")  # what tc refuses, as it did a 12-digit rate
    outcome = LocalExecutor(fabric=fabric).run(launch, poll_s=0.05)
    assert outcome.state == LaunchState.FAILED
    assert "could not create or shape the network namespace" in outcome.reason
    assert (
        node_network(launch, None).prefix
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )


def test_a_fabric_with_nodes_as_hostids_is_refused_it_would_not_be_applied():
    with pytest.raises(ValueError, match="a fabric is not emulated with nodes=hostids"):
        LocalExecutor(fabric=Fabric("2gbit"), nodes="hostids", gpus=0).dryrun(
            LaunchRequest(name="s1-l1", spec=SPEC, env={}, workdir=Path("/tmp/x"), nnodes=2, nproc_per_node=1)
        )
    with pytest.raises(ValueError, match="fabric rate"):
        Fabric("999999999999gbit")
