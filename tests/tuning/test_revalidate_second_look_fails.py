"""A second look whose launches all fail: the re-validation says how many rounds it judged, and it
tries no more launches for the rounds it lacks than the first look may for all of its own."""

from __future__ import annotations

from autotuner.store import ValidationState
from autotuner.tuning import pairs
from tests.tuning.test_revalidate import NEW_STACK, landscape, published, revalidate  # noqa: F401


def test_a_second_look_that_measures_nothing(store, published, monkeypatch):  # noqa: F811
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=False)  # the rounds straddle 1 ...
    monkeypatch.setattr("autotuner.tuning.revalidate.claimed_low", lambda evidence: None)  # ... no figure
    real, tries = pairs.run_launch, []

    def broken_after_the_first_look(ctx, plan, search):
        if tries or any(r for r in pairs.measured(ctx, *_settings(ctx, plan), plan.kind, plan.tag)[0]):
            tries.append(plan)  # the cluster broke: a launch that measured nothing
            return []
        return real(ctx, plan, search)

    def _settings(ctx, plan):  # the two settings the plan compares (one launch: both points)
        from autotuner.tuning.pairs import Setting

        a, b = plan.points[0], plan.points[1]
        return Setting(plan.env, a), Setting(plan.env, b)

    monkeypatch.setattr(pairs, "run_launch", broken_after_the_first_look)
    done = revalidate(store, v1)
    assert done.state == ValidationState.UNRESOLVED, (done.state, done.result)
    assert done.result["rounds"] == 3  # judged over the first look's rounds only
    assert "at 3 rounds" in done.action, done.action  # it said "nothing concluded at 6 rounds"
    assert len(tries) <= 3 * 3, len(tries)  # the first look may try 9 launches for its 3 rounds; it tried 18
