"""A launch that stalls keeps what it measured: the candidates before the one a rank hung in are in
its result, that one and the rest failed naming the stall; and candidates run in the spec's order
(paired rounds put A B B A in one launch), a run of one sharding sharing its sharded model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.executors.results import parse_result
from tests.trials.test_launch import TABLES
from trials.runner import TrialRunner
from trials.spec import parse_spec


def spec_of(*candidates: dict) -> dict:
    return {"workload": {"name": "unit", "tables": TABLES, "sharding": "table_wise"}, "warmup": 1,
            "iterations": 2, "candidates": list(candidates)}  # fmt: skip


def cand(batch: int, sharding: str | None = None) -> dict:
    return {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": batch,
            **({"sharding": sharding} if sharding else {})}  # fmt: skip


def test_candidates_run_in_the_spec_order_resharding_only_between_runs_of_one_sharding():
    runner = TrialRunner(parse_spec(spec_of(cand(64), cand(128, "row_wise"), cand(128, "row_wise"), cand(64))),
                         0.0, {})  # fmt: skip
    sharded, ran = [], []

    def shard(sharding, indices, results):
        sharded.append(sharding)
        return sharding

    def candidate(sw, index, c):
        ran.append((index, sw))
        return {"status": "ok"}

    runner._shard, runner._candidate = shard, candidate  # type: ignore[method-assign]
    runner._time([])
    # A B B A, as the engine asked: grouped by sharding it ran 0 3 1 2, so drift favoured one side
    assert ran == [(0, "table_wise"), (1, "row_wise"), (2, "row_wise"), (3, "table_wise")]
    assert sharded == ["table_wise", "row_wise", "table_wise"]


def test_a_stall_keeps_the_candidates_measured_before_it():
    runner = TrialRunner(parse_spec(spec_of(cand(64), cand(128), cand(256), cand(512))), 0.0, {})
    assert runner.stalled_result("no progress") is None  # nothing measured: the launch failed as a whole
    runner.header = {"schema_version": 1, "world_size": 2}
    assert runner.stalled_result("no progress") is None
    runner.results[0] = {"index": 0, "status": "ok"}
    runner.results[1] = {"index": 1, "status": "ok"}
    runner.current = 2
    result = runner.stalled_result("no progress for 12 s during candidate 2")
    assert result is not None
    assert result["status"] == "partial"
    assert result["world_size"] == 2
    assert [c["status"] for c in result["candidates"]] == ["ok", "ok", "failed", "failed"]
    assert (
        result["candidates"][2]["error"]
        == "the launch stalled during it: no progress for 12 s during candidate 2"
    )
    assert result["candidates"][3]["error"].startswith("not measured: the launch stalled")
    assert result["candidates"][3]["batch_size"] == 512


@pytest.mark.slow
def test_a_rank_that_hangs_in_a_candidate_leaves_the_ones_measured_before(tmp_path: Path):
    spec = spec_of(cand(64), cand(128), cand(256), cand(512))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(Path(__file__).parent / "hang_at_candidate.py"), "--spec", str(tmp_path / "spec.json"), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "AUTOTUNER_TRIAL_PG_TIMEOUT_S": "15", "HANG_AT": "2",
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert proc.returncode != 0  # the watchdog's exit 3; the result says what was measured
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "partial", proc.stderr[-3000:]
    assert [c["status"] for c in result["candidates"]] == ["ok", "ok", "failed", "failed"]
    assert result["candidates"][0]["samples_per_s"] > 0
    assert "the launch stalled during it: no progress for" in result["candidates"][2]["error"]
    assert result["stalled"].startswith("no progress for")
    parsed = parse_result(out.read_bytes(), spec, 2)  # the engine takes it: the launch ran, partly
    assert [c["status"] for c in parsed["candidates"]] == ["ok", "ok", "failed", "failed"]
