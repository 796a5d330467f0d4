"""A version published again on a re-validation that held carries that re-validation's interval, and
its level with it: a 97.5% interval (a look of two) is not labelled with the first study's 0.95."""

from __future__ import annotations

from types import SimpleNamespace

from autotuner.tuning.revalidate import LOOK_CONFIDENCE, republished


def test_the_interval_copied_into_the_evidence_keeps_its_level():
    older = SimpleNamespace(evidence={"speedup": 1.3, "ci_low": 1.2, "ci_high": 1.4, "confidence": 0.95, "rounds": 3},
                            study_id=1, version=1, env={}, fwd_precision="fp32", bwd_precision="fp32", batch_size=64,
                            sharding="auto", num_threads=None, pipeline=None, lr_scale=None)  # fmt: skip
    check = SimpleNamespace(id=7, result={"speedup": 1.25, "ci_low": 1.05, "ci_high": 1.5, "confidence": LOOK_CONFIDENCE,
                                          "rounds": 6})  # fmt: skip
    evidence, _, _ = republished(older, check, {}, "why")
    assert (evidence["ci_low"], evidence["ci_high"], evidence["rounds"]) == (1.05, 1.5, 6)
    assert evidence["confidence"] == LOOK_CONFIDENCE  # it read 0.95 beside the wider interval
