"""A local launch whose network namespace cannot be made says so (EXIT_NO_NETNS's reason), rather
than "gone without an exit code": the script stops before it writes its exit_code file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from tests.executors.test_fabric import SPEC, netns_capable  # noqa: F401 (a fixture)


@pytest.mark.netns
def test_a_namespace_that_cannot_be_made_fails_the_launch_saying_why(netns_capable, tmp_path):  # noqa: F811
    taken = "at-s9-l1"  # the launch's own namespace name, made first: `ip netns add` refuses it
    subprocess.run(["ip", "netns", "add", taken], check=True)
    try:
        launch = LaunchRequest(name="s9-l1", spec=SPEC, env={}, workdir=tmp_path / "launch-0001",
                               python=sys.executable, timeout_s=60)  # fmt: skip
        outcome = LocalExecutor(fabric=Fabric("1gbit")).run(launch, poll_s=0.05)
    finally:
        subprocess.run(["ip", "netns", "del", taken], check=False)
    assert outcome.state == LaunchState.FAILED
    assert "could not create the network namespace for the emulated fabric" in outcome.reason
