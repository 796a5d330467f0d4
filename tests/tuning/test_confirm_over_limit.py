"""A finalist measured over the quantization-error limit in its confirmation, with no ladder after it,
is not adopted, whatever it gains, as a ladder step or a re-confirmation over the limit is not (found
by a review: with ladder_rounds 0 such a finalist was published, its evidence quoting the search's
error, under it). With the ladder, the knob over the limit is dropped there and the rest confirmed."""

from __future__ import annotations

from tests.tuning.synthetic import OverLimit, run, study, synth

SPACE = {"precisions": [["fp32", "fp32"], ["fp8", "bf16"]], "batch_sizes": [64], "max_quant_error": 0.05}


def test_a_finalist_over_the_limit_in_its_confirmation_is_not_published(store, tmp_path):
    landscape = synth(tmp_path / "land.json", lambda env, c: 10000.0 * (1.3 if c["fwd_precision"] == "fp8" else 1.0),
                      quant=lambda c: 0.04 if c["fwd_precision"] == "fp8" else 0.0)  # fmt: skip
    s = study(store, tmp_path, SPACE, landscape, trials=1, candidates_per_launch=2, ladder_rounds=0)
    final = run(store, s.id, OverLimit(landscape, "fp8", lambda t: t == "confirm"))  # 0.04 in the search
    confirmed = store.candidates(s.id, kinds=["confirm"])
    assert {c.state for c in confirmed if c.fwd_precision == "fp8"} == {"infeasible"}
    outcome = final.outcome
    assert outcome["decision"] == (
        "the finalist, confirmed, is over the quantization-error limit (quantization error 0.08 > tolerance "
        "0.05): published the baseline (no changes)"
    )
    assert outcome["speedup"] == 1.0
    assert outcome["finalist"]["significant"]  # it was faster: that is not what decides
    config = store.served_config("cpu-box", "small")
    assert (config.fwd_precision, config.bwd_precision) == ("fp32", "fp32")
    assert config.evidence["decision"] == outcome["decision"]


def test_with_the_ladder_the_knob_over_the_limit_is_dropped_and_the_rest_published(store, tmp_path):
    """The ladder judges each knob's error: the precision step over the limit is dropped, the batch
    step's gain confirmed again and published (not the baseline for the whole finalist)."""
    space = {**SPACE, "batch_sizes": [64, 256], "allow_batch_change": True}

    def rate(env, c):
        return (
            10000.0 * (1.3 if c["fwd_precision"] == "fp8" else 1.0) * (2.0 if c["batch_size"] == 256 else 1.0)
        )

    landscape = synth(
        tmp_path / "land.json", rate, quant=lambda c: 0.04 if c["fwd_precision"] == "fp8" else 0.0
    )
    s = study(store, tmp_path, space, landscape, trials=2, candidates_per_launch=4, ladder_rounds=2)
    final = run(store, s.id, OverLimit(landscape, "fp8", bool))  # every launch after the search (untagged)
    outcome = final.outcome
    verdicts = {step["step"]: step["verdict"] for step in outcome["ladder"]}
    assert verdicts["precision"].startswith("over the limit"), outcome["ladder"]
    assert verdicts["batch"] == "kept"
    config = store.served_config("cpu-box", "small")
    assert (config.fwd_precision, config.batch_size) == ("fp32", 256), outcome["decision"]
