"""The convergence check, for real on 2 CPU ranks: int8 comms train as fp32 do, a damaged codec does not."""

from __future__ import annotations

import jsonschema
import pytest
import torch

from tests.trials.test_launch import SCHEMA, run_trial
from trials.convergence import auc, checkpoint_steps, teacher_samples
from trials.spec import (
    MAX_SAMPLE_BYTES,
    SAMPLE_WORK_BYTES,
    TEACHER_CHUNK_BYTES,
    TEACHER_DIM,
    parse_workload,
    quality_bytes,
    quality_problem,
)

TABLES = [
    {"name": f"t{i}", "num_embeddings": 5000, "embedding_dim": 32, "pooling_factor": 8} for i in range(4)
]
WORKLOAD = {"name": "dlrm", "tables": TABLES, "dense": {"in_features": 13, "arch": [64, 32], "over_arch": [64, 1]},
            "optimizer": {"embedding": "exact_adagrad", "embedding_lr": 0.05, "dense": "adagrad", "dense_lr": 0.01}}  # fmt: skip
LIMIT = 0.002  # the space's default max_logloss_delta


def test_auc_is_the_chance_a_positive_outranks_a_negative():
    assert auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0.0, 0.0, 1.0, 1.0])) == 0.75
    assert auc(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])) == 0.5  # a tie counts half


def test_checkpoints_are_evenly_spaced_over_the_common_budget_and_go_on_past_it():
    assert checkpoint_steps(128, 128, 1) == [128]  # one score at the end: as before checkpoints
    assert checkpoint_steps(128, 128, 4) == [32, 64, 96, 128]
    assert checkpoint_steps(64, 96, 4) == [16, 32, 48, 64, 80, 96]  # a bigger batch trained 1.5x as far
    assert checkpoint_steps(64, 90, 4) == [16, 32, 48, 64, 80, 90]  # its own last step is always one
    assert checkpoint_steps(10, 10, 4) == [2, 5, 8, 10]
    with pytest.raises(ValueError, match="one batch per rank"):
        checkpoint_steps(0, 4, 4)


def test_the_teacher_task_is_the_same_for_every_candidate():
    workload = parse_workload(WORKLOAD)
    a, b = teacher_samples(workload, 4096, seed=3), teacher_samples(workload, 4096, seed=3)
    assert torch.equal(a.labels, b.labels)
    assert all(torch.equal(x, y) for x, y in zip(a.ids, b.ids, strict=True))
    assert 0.2 < a.labels.mean() < 0.8  # neither class is rare
    other = teacher_samples(workload, 4096, seed=4)  # another split: other samples, the same teacher
    assert not torch.equal(a.labels, other.labels)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    spec = {
        "workload": WORKLOAD,
        "quality": {"train_samples": 65536, "eval_samples": 16384},
        "extra": {"damaged_codec": "fp16"},  # fp16 stands for a codec that keeps one byte of four
        "candidates": [
            {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256},
            {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256, "model_seed": 1},
            {"fwd_precision": "int8", "bwd_precision": "int8", "batch_size": 256},
            {"fwd_precision": "fp16", "bwd_precision": "fp16", "batch_size": 256},
        ],
    }
    proc, result = run_trial(tmp_path_factory.mktemp("quality"), spec)
    assert result is not None, proc.stderr[-3000:]
    return result


@pytest.mark.slow
def test_int8_passes_and_a_damaged_codec_is_refused(checked):
    base, seed, int8, damaged = (c["quality"] for c in checked["candidates"])
    assert base["train_samples"] == 65536
    assert base["eval_samples"] == 16384
    assert base["train_steps"] == 128
    assert abs(int8["logloss"] - base["logloss"]) <= LIMIT, (int8, base)
    assert damaged["damaged_codec"], (damaged, base)
    assert damaged["logloss"] - base["logloss"] > LIMIT, (damaged, base)
    assert base["auc"] > 0.6  # the model learned the teacher's task
    assert seed["logloss"] != base["logloss"]  # another initialization, another model


@pytest.mark.slow
def test_a_quality_result_matches_the_schema(checked):
    """A quality launch's candidates carry their figures under `quality`, not a timing's."""
    jsonschema.validate(checked, SCHEMA)
    assert all(c["status"] == "ok" for c in checked["candidates"])


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """Paired seeds, checkpoints, a longer budget and a learning-rate scale, for real (issue 24)."""
    fp32 = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256}
    spec = {
        "workload": WORKLOAD,
        "quality": {"train_samples": 32768, "eval_samples": 8192, "checkpoints": 4},
        "candidates": [
            {**fp32, "model_seed": 0},
            {**fp32, "model_seed": 1},
            {**fp32, "model_seed": 0},  # seed 0 again: the same init and order give the same model
            {
                **fp32,
                "batch_size": 512,
                "model_seed": 0,
                "train_samples": 49152,
                "lr_scale": 2.0,
                "stop_at": 0,
            },
        ],
    }
    proc, result = run_trial(tmp_path_factory.mktemp("paired"), spec)
    assert result is not None, proc.stderr[-3000:]
    return result


@pytest.mark.slow
def test_a_seed_fixes_init_and_order_and_the_curve_is_scored_along_the_way(paired):
    seed0, seed1, again, bigger = (c["quality"] for c in paired["candidates"])
    assert seed0["logloss"] == again["logloss"]
    assert seed0["curve"] == again["curve"]  # paired: reproducible
    assert seed1["logloss"] != seed0["logloss"]
    assert seed1["model_seed"] == 1
    # every 32768/4 samples (16 steps of 2 ranks x 256), the score at the common budget among them
    assert [int(s) for s, _ in seed0["curve"]] == [8192, 16384, 24576, 32768]
    assert seed0["curve"][-1][1] == seed0["logloss"]
    assert seed0["curve"][0][1] > seed0["logloss"]
    # the bigger batch trains on past the budget at the same spacing, until it reaches its seed's
    # baseline (stop_at) or its own budget; its score is the one at the common budget
    marks = [8192, 16384, 24576, 32768, 40960, 49152]
    assert [int(s) for s, _ in bigger["curve"]] == marks[: len(bigger["curve"])]
    assert len(bigger["curve"]) >= 4
    past = [x for s, x in bigger["curve"] if s >= 32768]
    assert all(x > seed0["logloss"] for x in past[:-1])  # it went on only while short of the target
    assert past[-1] <= seed0["logloss"] or bigger["budget_samples"] == 49152
    assert bigger["train_samples"] == 32768
    assert bigger["budget_samples"] == int(bigger["curve"][-1][0])
    assert bigger["logloss"] == dict((int(s), x) for s, x in bigger["curve"])[32768]
    assert bigger["lr_scale"] == 2.0


def test_stop_at_names_an_earlier_candidate():
    from trials.spec import SpecError, parse_spec

    fp32 = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256}
    spec = {
        "workload": WORKLOAD,
        "quality": {"train_samples": 4096},
        "candidates": [fp32, {**fp32, "stop_at": 0}],
    }
    assert parse_spec(spec).candidates[1].stop_at == 0
    with pytest.raises(SpecError, match=r"candidates\[1\]\.stop_at: must name an earlier candidate"):
        parse_spec({**spec, "candidates": [fp32, {**fp32, "stop_at": 1}]})


def test_a_check_whose_samples_a_rank_cannot_hold_fails_with_why_before_building_them(tmp_path):
    """2^30 training samples over 2 ranks would be 162 GiB of samples per rank: the kernel would kill a
    rank mid-build and no result would say why."""
    spec = {"workload": WORKLOAD, "quality": {"train_samples": 1 << 30, "eval_samples": 8192},
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 256}]}  # fmt: skip
    proc, result = run_trial(tmp_path, spec)
    assert proc.returncode != 0
    assert result is not None, proc.stderr[-3000:]
    assert result["status"] == "error"
    assert result["error"].startswith(
        "ValueError: a convergence check of 1,073,741,824 training and 8,192 held-out samples over 2 rank(s) "
        "holds 162.0 GiB of samples per rank (308 bytes each), above 8 GiB"
    ), result["error"]


def test_what_a_rank_holds_is_its_share_of_both_splits():
    workload = parse_workload(WORKLOAD)
    assert workload.sample_bytes == 4 * 8 * 8 + 13 * 4  # ids (int64) per lookup, dense (fp32)
    each = workload.sample_bytes + SAMPLE_WORK_BYTES  # and its label and logit while it is built
    fixed = 4 * 5000 * TEACHER_DIM * 4 + TEACHER_CHUNK_BYTES  # the teacher's tables, one chunk
    per_rank = (MAX_SAMPLE_BYTES - fixed) // each
    assert quality_bytes(workload, per_rank * 4, 0, 4) == MAX_SAMPLE_BYTES - (MAX_SAMPLE_BYTES - fixed) % each
    assert quality_problem(workload, per_rank * 4, 0, 4) is None  # at the limit: accepted
    assert "above 8 GiB" in quality_problem(workload, (per_rank + 1) * 4, 0, 4)
    assert quality_problem(workload, (per_rank + 1) * 4, 0, 8) is None  # more ranks: each holds less
    # Held out, the first ranks hold one more: it is theirs that is counted.
    assert quality_problem(workload, per_rank * 4, 3, 4) is not None
