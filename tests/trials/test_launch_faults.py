"""A launch that a rank leaves mid-way keeps what it measured, for real on 2 CPU ranks (gloo): a peer
that dies (the kernel's OOM killer), the launcher's SIGTERM, a sharding that fails on one rank only, and
a result that cannot be written. tests/trials/fault_at_candidate.py injects each fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from autotuner.executors.results import parse_result
from tests.trials.test_launch import SCHEMA, TABLES
from trials.result import RESULT_MARKER

REPO = Path(__file__).parents[2]
FAULTS = Path(__file__).parent / "fault_at_candidate.py"
DENSE = {"in_features": 4, "arch": [16, 40], "over_arch": [8, 1]}


def cand(batch: int, sharding: str | None = None, fwd: str = "fp32") -> dict:
    return {"fwd_precision": fwd, "bwd_precision": fwd, "batch_size": batch,
            **({"sharding": sharding} if sharding else {})}  # fmt: skip


def spec_of(*candidates: dict, dense: bool = False) -> dict:
    workload = {
        "name": "unit",
        "tables": TABLES,
        "sharding": "table_wise",
        **({"dense": DENSE} if dense else {}),
    }
    return {"workload": workload, "warmup": 1, "iterations": 2, "candidates": list(candidates)}


def launch(tmp_path: Path, spec: dict, fault: str, at: int, *args: str, nproc: int = 2, pg_timeout_s: int = 30,
           mark: Path | None = None) -> subprocess.Popen[str]:  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "AUTOTUNER_TRIAL_PG_TIMEOUT_S": str(pg_timeout_s), "FAULT": fault, "FAULT_AT": str(at),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           **({"FAULT_MARK": str(mark)} if mark else {})}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(FAULTS),
         "--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "result.json"), "--quiet", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )  # fmt: skip


def finished(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[str, str, dict | None]:
    out, err = proc.communicate(timeout=240)
    result = tmp_path / "result.json"
    return out, err, (json.loads(result.read_text()) if result.exists() else None)


def wait_for(path: Path, proc: subprocess.Popen[str], deadline_s: float) -> None:
    """Until `path` exists (the fault fired), the launch ended, or the deadline passed."""
    end = time.monotonic() + deadline_s
    while not path.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    assert path.exists(), f"the fault did not fire within {deadline_s} s (exit {proc.poll()})"


@pytest.mark.slow
def test_a_peer_that_dies_mid_launch_leaves_the_candidates_measured_before(tmp_path: Path):
    spec = spec_of(cand(64), cand(128), cand(256))
    _, err, result = finished(launch(tmp_path, spec, "exit", 1), tmp_path)
    assert result is not None, err[-3000:]
    assert result["status"] == "partial", err[-3000:]
    assert [c["status"] for c in result["candidates"]] == ["ok", "failed", "failed"]
    assert result["candidates"][0]["samples_per_s"] > 0
    # Rank 0 hears of it first from gloo (its word for the peer that went away) or, on a loaded machine
    # where torchrun saw rank 1 exit before rank 0 ran again, from the launcher's SIGTERM: both are kept.
    if "SIGTERM" in result["launch_error"]:
        assert "trials.run: the launcher stopped the launch (SIGTERM)" in err
    else:
        assert "Connection" in result["launch_error"], result["launch_error"]
        assert "trials.run: launch failed on rank 0" in err
    assert result["candidates"][1]["error"].startswith("the launch failed during it: ")
    assert result["candidates"][2]["error"].startswith("not measured: the launch failed (")
    jsonschema.validate(result, SCHEMA)
    parsed = parse_result((tmp_path / "result.json").read_bytes(), spec, 2)  # the engine takes it
    assert [c["status"] for c in parsed["candidates"]] == ["ok", "failed", "failed"]


@pytest.mark.slow
def test_the_launchers_sigterm_leaves_the_candidates_measured_before(tmp_path: Path):
    """torchrun SIGTERMs the survivors when a rank dies (Slurm and Kubernetes at a time limit): rank 0,
    waiting inside a collective for the rank that hangs, still writes what it measured."""
    spec = spec_of(cand(64), cand(128), cand(256))
    mark = tmp_path / "fault"
    proc = launch(tmp_path, spec, "hang", 2, "--print-result", pg_timeout_s=300, mark=mark)
    try:
        wait_for(mark, proc, 180)
        os.kill(int(Path(f"{mark}.pid0").read_text()), signal.SIGTERM)
        out, err, result = finished(proc, tmp_path)
    finally:
        proc.kill()
    assert result is not None, err[-3000:]
    assert result["status"] == "partial"
    assert [c["status"] for c in result["candidates"]] == ["ok", "ok", "failed"]
    assert "SIGTERM" in result["launch_error"]
    assert result["candidates"][2]["error"].startswith("the launch failed during it: the launcher stopped")
    printed = [line for line in out.splitlines() if line.startswith(RESULT_MARKER)]
    assert len(printed) == 1
    assert json.loads(printed[0].split(" ", 1)[1]) == result
    jsonschema.validate(result, SCHEMA)


@pytest.mark.slow
def test_a_sharding_that_fails_on_one_rank_fails_its_candidates_on_every_rank(tmp_path: Path):
    """Rank 1 runs out of memory building the row-wise tables; rank 0 built its own. Each went its way
    (rank 0 into DDP's collectives, rank 1 to the next sharding), and their collectives no longer
    matched: corrupt data, a segfault, no result. They agree now, and go on together."""
    spec = spec_of(cand(64, "row_wise"), cand(64, "row_wise", "fp16"), cand(64), dense=True)
    proc = launch(tmp_path, spec, "build", 0)
    _, err, result = finished(proc, tmp_path)
    assert result is not None, err[-3000:]
    assert proc.returncode == 1, err[-3000:]  # rank 0's: some candidate failed
    assert result["status"] == "partial"
    assert [c["status"] for c in result["candidates"]] == ["failed", "failed", "ok"]
    for failed in result["candidates"][:2]:
        assert failed["error"].startswith(
            "sharding row_wise failed: rank 1: RuntimeError: DefaultCPUAllocator"
        )
    assert result["candidates"][2]["samples_per_s"] > 0
    jsonschema.validate(result, SCHEMA)


@pytest.mark.slow
def test_a_result_that_cannot_be_written_exits_3_naming_the_path(tmp_path: Path):
    proc = launch(tmp_path, spec_of(cand(64)), "write", 0, "--print-result", nproc=1)
    out, err, result = finished(proc, tmp_path)
    assert result is None
    assert proc.returncode != 0
    assert "exitcode  : 3 " in err, err[-3000:]  # rank 0's, as torchrun reports it: the launch failed
    assert f"trials.run: cannot write the result to {tmp_path / 'result.json'}: " in err
    assert "No space left on device" in err
    printed = [line for line in out.splitlines() if line.startswith(RESULT_MARKER)]
    assert json.loads(printed[0].split(" ", 1)[1])["status"] == "ok"  # k8s reads this line, not the file
