"""A re-validation whose published config is measured over the quantization-error limit fails with
that as its reason, whatever it gains (found by a review: it said "held" on throughput alone)."""

from __future__ import annotations

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.executors.base import AppDryrun, LaunchRequest
from autotuner.executors.replay import ReplayRequest
from autotuner.store import ValidationState
from autotuner.tuning.revalidate import Revalidation, request
from tests.tuning.synthetic import replay, run, study, synth, tag

SPACE = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64], "max_quant_error": 0.05}


class OverNow(ReplayExecutor):
    """fp16's error, 0.01 when the study ran, measured 0.08 in the re-validation (a codec regressed)."""

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[ReplayRequest]:
        planned = super().dryrun(launch)
        if tag(launch).startswith("revalidate"):
            for c in planned.request.result["candidates"]:
                if c["fwd_precision"] == "fp16":
                    c["quant_error"] = {"fwd_rel_l2": 0.08, "bwd_rel_l2": 0.0}
        return planned


def test_a_config_over_the_limit_now_fails_its_revalidation(store, tmp_path):
    landscape = synth(tmp_path / "land.json", lambda env, c: 10000.0 * (1.3 if c["fwd_precision"] == "fp16" else 1.0),
                      quant=lambda c: 0.01 if c["fwd_precision"] == "fp16" else 0.0)  # fmt: skip
    s = study(store, tmp_path, SPACE, landscape, trials=1, candidates_per_launch=2)
    run(store, s.id, replay(landscape))
    v1 = store.served_config("cpu-box", "small")
    assert v1.fwd_precision == "fp16"
    row, _ = request(store, v1, reason="a codec upgrade")
    done = Revalidation(store, row.id, OverNow(Landscape.load(landscape), seed=7), poll_s=0.01).run()
    assert done.state == ValidationState.FAILED
    assert done.result["why"].startswith(
        "over the quantization-error limit now: quantization error 0.08 > tolerance 0.05 (1.29x"
    ), done.result
    assert done.result["significant"]  # still faster: not what decides
    v2 = store.served_config("cpu-box", "small")
    assert (v2.version, v2.fwd_precision) == (2, "fp32")  # replaced by the baseline, with the reason
    assert "over the quantization-error limit now" in v2.evidence["decision"]
