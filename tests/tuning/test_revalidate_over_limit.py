"""A re-validation whose published config is measured over the quantization-error limit fails with
that as its reason, whatever it gains (found by a review: it said "held" on throughput alone)."""

from __future__ import annotations

from autotuner.store import ValidationState
from autotuner.tuning.revalidate import Revalidation, request
from tests.tuning.synthetic import OverLimit, replay, run, study, synth

SPACE = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64], "max_quant_error": 0.05}


def test_a_config_over_the_limit_now_fails_its_revalidation(store, tmp_path):
    landscape = synth(tmp_path / "land.json", lambda env, c: 10000.0 * (1.3 if c["fwd_precision"] == "fp16" else 1.0),
                      quant=lambda c: 0.01 if c["fwd_precision"] == "fp16" else 0.0)  # fmt: skip
    s = study(store, tmp_path, SPACE, landscape, trials=1, candidates_per_launch=2)
    run(store, s.id, replay(landscape))
    v1 = store.served_config("cpu-box", "small")
    assert v1.fwd_precision == "fp16"
    row, _ = request(store, v1, reason="a codec upgrade")
    done = Revalidation(
        store, row.id, OverLimit(landscape, "fp16", lambda t: t.startswith("revalidate")), poll_s=0.01
    ).run()
    assert done.state == ValidationState.FAILED
    assert done.result["why"].startswith(
        "over the quantization-error limit now: quantization error 0.08 > tolerance 0.05 (1.29x"
    ), done.result
    assert done.result["significant"]  # still faster: not what decides
    v2 = store.served_config("cpu-box", "small")
    assert (v2.version, v2.fwd_precision) == (2, "fp32")  # replaced by the baseline, with the reason
    assert "over the quantization-error limit now" in v2.evidence["decision"]
