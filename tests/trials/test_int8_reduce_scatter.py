"""int8 comms on a reduce-scatter sharding, in a real 2-rank launch: refused with the reason before a
step runs (FBGEMM's int8 codec would assert inside TorchRec's reduce-scatter), the rest measured."""

from __future__ import annotations

import pytest

from tests.trials.test_launch import run_trial

TABLES = [
    {"name": f"t{i}", "num_embeddings": 2000, "embedding_dim": 32, "pooling_factor": 4} for i in range(2)
]


def cand(fwd: str, bwd: str, sharding: str | None = None) -> dict:
    return {"fwd_precision": fwd, "bwd_precision": bwd, "batch_size": 64,
            **({"sharding": sharding} if sharding else {})}  # fmt: skip


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    spec = {
        "workload": {"name": "rs", "tables": TABLES, "sharding": "row_wise"},
        "candidates": [
            cand("int8", "int8"),
            cand("fp16", "fp16"),  # the same reduce-scatter in a precision it can carry
            cand("fp16", "int8"),  # int8 only in the backward (the reduce-scatter's all-gather)
            cand("int8", "fp32", "table_row_wise"),
            cand("int8", "int8", "table_wise"),  # int8 on an all-to-all: measured
        ],
        "warmup": 1,
        "iterations": 2,
    }
    proc, result = run_trial(tmp_path_factory.mktemp("int8rs"), spec)
    assert result is not None, proc.stderr[-3000:]
    return result


@pytest.mark.slow
def test_int8_on_a_reduce_scatter_is_reported_failed_with_the_reason(result):
    cands = result["candidates"]
    assert [c["status"] for c in cands] == ["failed", "ok", "failed", "failed", "ok"]
    for c in (cands[0], cands[2], cands[3]):
        sharding = c["sharding"] or "row_wise"
        # refused up front by the trial (a ValueError), not FBGEMM's assertion inside TorchRec
        assert c["error"].startswith(f"rank 0: ValueError: int8 comms cannot run with {sharding} sharding")
        assert "reduce-scatter" in c["error"]
        assert "cannot be summed" in c["error"]


@pytest.mark.slow
def test_the_candidates_that_can_run_are_measured(result):
    fp16_rs, int8_tw = result["candidates"][1], result["candidates"][4]
    assert (fp16_rs["effective_fwd_precision"], fp16_rs["sharding"]) == ("fp16", "row_wise")
    assert (int8_tw["effective_fwd_precision"], int8_tw["effective_bwd_precision"]) == ("int8", "int8")
    assert 0 < int8_tw["quant_error"]["fwd_rel_l2"] < 0.01
