"""Scaling over emulated nodes: the inter-node link first, then a study's scaling curve.

Nodes are network namespaces on this machine with a bridge between them shaped at 1 Gbit/s (tbf),
1 rank per node (2 cores): emulation, labelled so. The link is measured with a plain
`all_to_all_single` between the two nodes (what each node sends the other, per second, against the
set rate), and, to tell the fabric from gloo, with plain TCP both ways at once and gloo one way; the study is the dense demo job at 2 nodes with `scaling_nodes` [1, 2], through the local
executor's `nodes=namespaces`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autotuner.cli.demo import DEMO_SETTINGS
from autotuner.executors import make_executor
from autotuner.executors.local.executor import node_agents
from autotuner.executors.local.netns import NodeNetwork
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.outcome import Outcome

ROOT = Path(__file__).resolve().parent.parent
RATE = "1gbit"
RATE_BYTES_PER_S = 1e9 / 8


def link(payload_mb: int = 8, iterations: int = 10) -> dict[str, Any]:
    """A plain all_to_all_single between two emulated nodes: the bytes each sends the other per second."""
    work = Path(tempfile.mkdtemp(prefix="bench-link-"))
    network = NodeNetwork(f"at-link{os.getpid() % 10000}", 2, RATE)
    out = work / "link.json"
    argv = [str(ROOT / "bench" / "link_probe.py"), "--mb", str(payload_mb), "--iterations", str(iterations), "--out", str(out)]  # fmt: skip
    try:
        for step in network.setup():
            subprocess.run(step, check=True, capture_output=True)
        agents = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                  for cmd in node_agents(network, 1, sys.executable, "link", argv)]  # fmt: skip
        for agent in agents:
            agent.wait(timeout=600)
    finally:
        for step in network.teardown():
            subprocess.run(step, check=False, capture_output=True)
    measured = json.loads(out.read_text())
    ratio = measured["bytes_per_s_each_way"] / RATE_BYTES_PER_S
    return {"rate": RATE, "label": network.label(), **measured, "ratio_to_rate": ratio, "within_10pct": abs(ratio - 1) <= 0.1,
            "tcp_ratio_to_rate": measured["tcp_duplex_bytes_per_s_each_way"] / RATE_BYTES_PER_S,
            "gloo_one_way_ratio_to_rate": measured["gloo_one_way_bytes_per_s"] / RATE_BYTES_PER_S}  # fmt: skip


def study() -> dict[str, Any]:
    """The dense demo job tuned at 2 emulated nodes, then its scaling curve at 1 and 2 nodes."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    store = Store(f"sqlite:///{tmp / 'scaling.db'}")
    workload = json.loads((ROOT / "deploy" / "examples" / "workload-demo.json").read_text())
    space = yaml.safe_load((ROOT / "deploy" / "examples" / "space-demo.yaml").read_text())
    settings = StudySettings(**{**DEMO_SETTINGS, "nproc_per_node": 1, "trials": 2}, nnodes=2, fabric=RATE,
                             quality_samples=32768, scaling_nodes=[1, 2], workdir=str(tmp / "runs"),
                             executor_options={"nodes": "namespaces"})  # fmt: skip
    row = create_study(
        store, cluster="bench-emulated", workload=workload, space=space, settings=settings, name="scaling"
    )
    started = time.monotonic()
    final = StudyDriver(store, row.id, make_executor(settings)).run()
    if final.state != "done":
        raise RuntimeError(f"study {final.state}: {final.error}")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out = (Outcome.load(final.outcome) or Outcome()).dump()
    return {"minutes": (time.monotonic() - started) / 60,
            **{k: out.get(k) for k in ("decision", "speedup", "ci_low", "ci_high", "scaling", "ladder")},
            "namespaces_left": [n for n in left.split() if n.startswith("at-")]}  # fmt: skip


def run() -> dict[str, Any]:
    return {"link": link(), "study": study()}
