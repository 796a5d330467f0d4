"""The convergence check's held-out set, as the engine plans it, is one the trial accepts at any scale:
the trial refuses fewer than MIN_EVAL_SAMPLES_PER_RANK a rank (exit 2), and a study at 32 nodes of 8
GPUs planned 8,192 (32 a rank), so its every quality launch would have failed."""

import pytest

from autotuner.tuning.settings import eval_samples, most_samples
from trials.spec import MIN_EVAL_SAMPLES_PER_RANK, parse_spec, world_problem

DLRM = {"name": "w", "tables": [{"name": "t0", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}],
        "dense": {"in_features": 4, "arch": [16], "over_arch": [8, 1]}}  # fmt: skip
FP32 = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64}


@pytest.mark.parametrize("ranks", [1, 2, 16, 128, 256, 1024])
@pytest.mark.parametrize("budget", [4096, 65536, 1 << 22])
def test_the_planned_held_out_set_passes_the_trials_check_at_any_scale(ranks, budget):
    held_out = eval_samples(budget, ranks)
    spec = parse_spec({"workload": DLRM, "candidates": [FP32], "quality": {"eval_samples": held_out}})
    world_problem(spec, ranks)  # raises SpecError when too thin a rank
    assert held_out // ranks >= MIN_EVAL_SAMPLES_PER_RANK
    assert most_samples(budget, ranks) == (int(budget * 1.5), held_out)


def test_a_small_world_keeps_the_held_out_set_it_had():
    assert eval_samples(65536, 8) == 8192  # unchanged where the floor already held
    assert eval_samples(1 << 20, 8) == (1 << 20) // 8
