"""A local launch whose network namespace cannot be made says so (EXIT_NO_NETNS's reason), rather
than "gone without an exit code": the script stops before it writes its exit_code file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import node_network
from tests.executors.test_fabric import SPEC, netns_capable  # noqa: F401 (a fixture)


def test_a_namespace_that_cannot_be_made_fails_the_launch_saying_why(tmp_path, monkeypatch):
    """`ip netns add` refuses (no privileges here): an `ip` first on the PATH that does. (A namespace of
    the launch's own name, left by a killed launch, would not make it refuse: the launch sweeps its
    study's stale namespaces before it makes its own.)"""
    fake = tmp_path / "bin" / "ip"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "netns add" ] && echo "mount --make-shared /run/netns failed: '
                    'Operation not permitted" >&2 && exit 1\n[ "$1 $2" = "netns list" ] && exit 0\nexit 1\n')  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    launch = LaunchRequest(name="s9-l1", spec=SPEC, env={}, workdir=tmp_path / "launch-0001",
                           python=sys.executable, timeout_s=60)  # fmt: skip
    outcome = LocalExecutor(fabric=Fabric("1gbit")).run(launch, poll_s=0.05)
    assert outcome.state == LaunchState.FAILED
    assert "could not create or shape the network namespace for the emulated fabric" in outcome.reason
    assert "Operation not permitted" in outcome.log_tail


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
