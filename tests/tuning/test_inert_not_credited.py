"""A variable that cannot act where the study measures (inert: searched only when the space forces it
in) is never credited: it is no ladder step, and a config that differs from the baseline only in such
variables is the baseline (they are never exported), published as such at 1.0x. Found by a review: on
gloo, the socket variable's rows read 8% faster (drift in the recording), the ladder kept it, and the
baseline went out as "faster with 95% confidence"."""

from __future__ import annotations

import pytest

from tests.tuning.synthetic import replay, run, study, synth

SPACE = {"env": {"NCCL_NSOCKS_PERTHREAD": [None, 4]}, "force_inert": ["NCCL_NSOCKS_PERTHREAD"],
         "precisions": [["fp32", "fp32"]], "batch_sizes": [64]}  # fmt: skip
ONLY_INERT = ("the finalist differs from the baseline only in variables that cannot act here "
              "(NCCL_NSOCKS_PERTHREAD: never exported, so what jobs would get is the baseline): published the "
              "baseline (no changes)")  # fmt: skip


def drifted(env, c):
    return 10000.0 * (1.08 if env.get("NCCL_NSOCKS_PERTHREAD") == "4" else 1.0)


@pytest.mark.parametrize("ladder_rounds", [3, 0])
def test_an_inert_variable_is_never_credited(store, tmp_path, ladder_rounds):
    landscape = synth(tmp_path / "land.json", drifted)
    s = study(
        store, tmp_path, SPACE, landscape, trials=2, candidates_per_launch=3, ladder_rounds=ladder_rounds
    )
    assert "NCCL_NSOCKS_PERTHREAD" in s.inert
    outcome = run(store, s.id, replay(landscape)).outcome
    assert outcome["decision"] == ONLY_INERT
    assert outcome["finalist"]["significant"]  # the drift, confirmed: not what a config may claim
    if ladder_rounds:
        (step,) = outcome["ladder"]
        assert (step["step"], step["kept"], step["verdict"]) == ("env", False, "inert here: not credited")
        assert step["changed"] == {"NCCL_NSOCKS_PERTHREAD": [None, "4"]}
        assert "ci_low" not in step
        assert not [launch for launch in store.launches(s.id) if launch.kind == "ladder"]  # never launched
    assert outcome["speedup"] == 1.0
    assert "ci_low" not in outcome
    config = store.served_config("cpu-box", "small")
    assert config.env == {}
    assert config.evidence["speedup"] == 1.0
    assert config.evidence["decision"] == ONLY_INERT
    assert store.candidate(outcome["chosen_candidate"]).env == {}
