"""A confirmation that did not happen says why: confirm_rounds=0, the baseline measured fastest, or
confirmation launches that measured too little (it read "confirm_rounds=0 or the baseline was best"
with confirm_rounds=3, found by a statistics review)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autotuner.tuning import confirm

BEST = SimpleNamespace(id=7, env={}, samples_per_s=1300.0)
BASELINE = SimpleNamespace(id=1, env={}, samples_per_s=1000.0)


@pytest.mark.parametrize(
    ("rounds", "best", "chosen", "says"),
    [
        (3, BEST, BASELINE.id, "not confirmed: fewer than 2 of 3 confirmation rounds could be measured (see the "
                               "launch logs): nothing published (the config served before, if any, stays)"),
        (0, BEST, BEST.id, "not confirmed (confirm_rounds=0): published the search's best as measured"),
        (3, BASELINE, BASELINE.id, "the baseline was the fastest setting measured: published the baseline (no changes)"),
    ],
)  # fmt: skip
def test_an_unconfirmed_decision_names_what_happened(monkeypatch, rounds, best, chosen, says):
    check_decision(monkeypatch, rounds, best, chosen, says, searched=True)


def test_a_baseline_best_by_default_is_not_said_to_be_the_fastest(monkeypatch):
    # every search launch failed: nothing was compared with the baseline, and nothing is published
    says = ("nothing but the baseline was measured (every search launch failed or was left out: see the launch "
            "logs): nothing published (the config served before, if any, stays)")  # fmt: skip
    outcome = check_decision(monkeypatch, 3, BASELINE, BASELINE.id, says, searched=False)
    assert not confirm.publishes(outcome)
    # a study asked to search nothing (trials 0) records the baseline, as asked
    says = "no search was asked for (trials 0): published the baseline (no changes)"
    assert confirm.publishes(check_decision(monkeypatch, 3, BASELINE, BASELINE.id, says, searched=None))


def check_decision(monkeypatch, rounds, best, chosen, says, searched):
    asked = []

    def failed_rounds(*args, **kwargs):  # what compare returns when fewer than 2 rounds were measured
        asked.append(args[3])
        return None, None

    monkeypatch.setattr(confirm, "compare", failed_rounds)
    monkeypatch.setattr(confirm.Setting, "of", staticmethod(lambda row: row))
    ctx = SimpleNamespace(settings=SimpleNamespace(confirm_rounds=rounds))
    outcome = confirm.decide(ctx, best, BASELINE, searched=searched)
    assert outcome.decision == says
    assert outcome.chosen_candidate == chosen
    assert asked == ([3] if rounds and best is BEST else [])
    assert confirm.publishes(outcome) == ("nothing published" not in says)
    return outcome
