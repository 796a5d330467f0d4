"""How often a re-validation concludes, and how often wrongly, by simulation (seeded): the study's 3
interleaved rounds at 5% launch noise, through the re-validation's own looks (`looked`: where the
first cannot tell, 3 rounds more, each look's interval at LOOK_CONFIDENCE) and its verdict.

Failing whatever was not shown faster replaced an unchanged 1.10x version about 3 times in 4;
failing only on evidence against it (shown slower, or its gain shown gone) does so about 1 time in
1,000. One look at 95% then left most real changes unconcluded (a version now 0.95x failed 29% of
the time); the second look concludes far more often without concluding wrongly more often."""

from __future__ import annotations

import math
import random

from autotuner.store import ValidationState
from autotuner.tuning.revalidate import LOOK_CONFIDENCE, looked, verdict
from autotuner.tuning.stats import paired_speedup

DRAWS = 4000
ROUNDS = 3


def _one(rng: random.Random, truth: float, noise: float, published_low: float, looks: bool) -> str:
    tuned: list[float] = []
    base: list[float] = []

    def look(asked: int) -> tuple[str, dict]:
        while len(tuned) < asked:  # the rounds a look lacks, measured as it asks for them
            tuned.append(truth * math.exp(rng.gauss(0, noise)))
            base.append(math.exp(rng.gauss(0, noise)))
        return verdict(paired_speedup(tuned[:asked], base[:asked], LOOK_CONFIDENCE), [], [],
                       claimed=published_low)  # fmt: skip

    if not looks:  # as before: one look at 95% over the study's rounds
        look(ROUNDS)  # draws them
        return verdict(paired_speedup(tuned, base), [], [], claimed=published_low)[0]
    state, _, asked = looked(look, ROUNDS)
    assert (asked == 2 * ROUNDS) == (look(ROUNDS)[0] == ValidationState.UNRESOLVED)  # a second only then
    return state


def _states(truth: float, noise: float, published_low: float, looks: bool = True) -> dict[str, float]:
    rng = random.Random(20261207)
    counts: dict[str, int] = {}
    for _ in range(DRAWS):
        state = _one(rng, truth, noise, published_low, looks)
        counts[state] = counts.get(state, 0) + 1
    return {state: n / DRAWS for state, n in counts.items()}


def test_an_unchanged_gain_is_rarely_failed_and_a_lost_one_never_held():
    unchanged = _states(truth=1.10, noise=0.05, published_low=1.05)
    assert unchanged.get(ValidationState.FAILED, 0.0) < 0.01
    lost = _states(truth=1.0, noise=0.05, published_low=1.05)
    assert lost.get(ValidationState.HELD, 0.0) < 0.035  # the one-sided 2.5% of one look at 95%
    assert lost[ValidationState.FAILED] > 0.15  # shown gone at times; else unresolved, kept
    slower = _states(truth=0.85, noise=0.05, published_low=1.05)
    assert slower[ValidationState.FAILED] > 0.95


def test_the_second_look_concludes_far_more_often_than_one_look_did():
    for truth, concluded in ((1.10, ValidationState.HELD), (0.95, ValidationState.FAILED)):
        two = _states(truth=truth, noise=0.05, published_low=1.05)
        one = _states(truth=truth, noise=0.05, published_low=1.05, looks=False)
        assert two[concluded] > one[concluded] + 0.25, (truth, one, two)
