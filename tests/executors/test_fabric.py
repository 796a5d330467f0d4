"""The emulated fabric: ranks in a network namespace whose loopback is rate-limited (tbf)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import node_network
from tests.helpers import skip_or_fail

TABLES = [
    {"name": f"t{i}", "num_embeddings": 1000, "embedding_dim": 64, "pooling_factor": 2} for i in range(4)
]
CANDIDATE = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256}
SPEC = {"workload": {"name": "w", "tables": TABLES}, "candidates": [CANDIDATE], "warmup": 2, "iterations": 6}


@pytest.fixture
def netns_capable():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        skip_or_fail("netns", "needs root, ip and tc (iproute2) to make a rate-limited network namespace")
    probe = subprocess.run(["ip", "netns", "add", "at-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip_or_fail("netns", f"cannot create a network namespace here: {probe.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", "at-probe"], check=False)


@pytest.mark.slow
@pytest.mark.netns
def test_a_slow_fabric_slows_the_all_to_all_and_leaves_no_namespace(netns_capable, tmp_path):
    def run(executor: LocalExecutor, name: str) -> dict:
        launch = LaunchRequest(name=name, spec=SPEC, env={}, workdir=tmp_path / name, python=sys.executable,
                               timeout_s=180)  # fmt: skip
        outcome = executor.run(launch)
        assert outcome.state == LaunchState.SUCCEEDED, outcome.log_tail
        return outcome.result["candidates"][0]

    open_ = run(LocalExecutor(), "open")
    slow = run(LocalExecutor(fabric=Fabric("100mbit")), "slow")
    # ~0.5 MB of pooled embeddings per rank and iteration: a few ms on loopback, tens at 100 Mbit/s.
    # Both ranks share the one shaped loopback, so the bus bandwidth cannot beat the rate by much.
    assert slow["busbw_gbps"] < 0.0125 * 1.5, slow["busbw_gbps"]
    assert slow["a2a_ms"]["median"] > 1.5 * open_["a2a_ms"]["median"]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert (
        node_network(LaunchRequest(name="slow", spec=SPEC, env={}, workdir=tmp_path / "slow"), None).prefix
        not in namespaces
    )


@pytest.mark.netns
def test_a_fabric_launch_sweeps_the_namespaces_its_study_left_first(netns_capable, tmp_path):
    """A launcher killed (SIGKILL: no trap ran) left its launch's namespace: the study's next launch
    removes it before it makes its own, as nodes=namespaces does; another study's is left alone."""
    python = tmp_path / "python"  # the trial itself does not matter here
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)

    def launch(study: str, name: str) -> LaunchRequest:
        return LaunchRequest(name=name, spec=SPEC, env={}, workdir=tmp_path / study / name, python=str(python),
                             timeout_s=60)  # fmt: skip

    stale, other = (node_network(launch(study, "s9-l1"), None).prefix for study in ("ours", "theirs"))
    for ns in (stale, other):
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        outcome = LocalExecutor(fabric=Fabric("1gbit")).run(launch("ours", "s9-l2"), poll_s=0.05)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["sh", "-c", f"ip netns del {stale}; ip netns del {other}"], capture_output=True)
    assert "could not create" not in outcome.reason  # it made its own, then ran the trial
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    assert stale not in names
    assert other in names
    assert node_network(launch("ours", "s9-l2"), None).prefix not in names  # its own removed as it ended
