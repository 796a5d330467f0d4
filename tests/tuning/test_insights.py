"""Parameter importance beside a random dimension (the noise floor), on one scale: no share above 100%,
and nothing ranked where too few trials leave the best tenth a single trial."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from autotuner.tuning.insights import MIN_TRIALS, importance

DISTRIBUTIONS = {
    "batch_size": CategoricalDistribution([512, 1024]),
    "NCCL_NSOCKS_PERTHREAD": CategoricalDistribution(["unset", "4"]),  # inert: changes nothing
}


def trials(n: int, seed: int = 0) -> list[optuna.trial.FrozenTrial]:
    """A batch of 1024 is 1.25x faster; the socket variable does nothing; 3% noise."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        params = {name: rng.choice(d.choices) for name, d in DISTRIBUTIONS.items()}
        value = (1.25 if params["batch_size"] == 1024 else 1.0) * rng.gauss(1.0, 0.03)
        out.append(optuna.trial.create_trial(params=params, distributions=DISTRIBUTIONS, value=value))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knobs_and_the_noise_floor_are_shares_of_one_total(seed):
    found = importance(trials(80, seed))
    assert found["reason"] is None
    shares = {p["name"]: p for p in found["params"]}
    assert sum(p["importance"] for p in shares.values()) + found["noise_floor"] == pytest.approx(1.0)
    assert all(0 <= p["importance"] <= 1 for p in shares.values())
    assert 0 <= found["noise_floor"] <= 1
    assert not shares["batch_size"]["below_noise"]
    assert shares["batch_size"]["importance"] > found["noise_floor"]


def test_too_few_trials_rank_nothing_and_say_so():
    # With the demo's 8 trials the random dimension took 97% of the total (51x the knobs, said 5121%).
    for n in (8, 20, MIN_TRIALS - 1):
        found = importance(trials(n))
        assert found["params"] == []
        assert found["reason"] == f"too few trials to rank knobs ({n} completed, {MIN_TRIALS} needed)"
        assert "noise_floor" not in found
    assert importance(trials(MIN_TRIALS))["reason"] is None


def test_nothing_to_rank_says_why():
    assert importance(trials(1))["reason"] == "needs 2 completed trials (1 so far)"
    same = [
        optuna.trial.create_trial(params=t.params, distributions=DISTRIBUTIONS, value=1.0) for t in trials(12)
    ]
    assert importance(same)["reason"] == "every completed trial has the same value"
