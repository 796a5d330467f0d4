"""The outcome as a type: what older versions stored still loads, with nothing lost, and is said the
same way (REST and its OpenAPI schema: tests/api/test_outcome_rest.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from autotuner.cli.claim_report import quality_line
from autotuner.tuning.outcome import Outcome, Quality

# As stored by older versions (bench/out/gpu-check.json, runs 1 and 3; a one-seed convergence check as
# a8b0b0f wrote it; a scaling curve from before efficiencies were recorded).
NOT_CONFIRMED = {"best_candidate": 1, "baseline_candidate": 1, "speedup": 1.0, "chosen_candidate": 1,
                 "decision": "not confirmed (confirm_rounds=0 or the baseline was best)", "published_version": 1}  # fmt: skip
ADOPTED = {
    "best_candidate": 2, "baseline_candidate": 1, "speedup": 1.2952885159314036, "ci_low": 1.2132269424090658,
    "ci_high": 1.3829006600960239, "confidence": 0.95, "rounds": 4, "tuned_samples_per_s": 1572085.0425694901,
    "baseline_samples_per_s": 1212845.424136032, "significant": True,
    "decision": "tuned config is faster with 95% confidence: published", "chosen_candidate": 2,
    "ladder": [{"step": "env", "changed": {"NCCL_NSOCKS_PERTHREAD": [None, "2"], "NCCL_SOCKET_NTHREADS": [None, "8"]},
                "kept": True, "verdict": "kept", "candidate": 9, "samples_per_s": 1572085.0425694901,
                "previous_samples_per_s": 1212845.424136032, "speedup_vs_previous": 1.2952885159314036,
                "ci_low": 1.2132269424090658, "ci_high": 1.3829006600960239, "rounds": 4,
                "cumulative": 1.2952885159314036}],
    "quality": {"skipped": "the tuned config trains as the baseline does (no precision, batch or pipeline change)"},
    "published_version": 1,
}  # fmt: skip
ONE_SEED = {
    "best_candidate": 7, "baseline_candidate": 1, "chosen_candidate": 1, "speedup": 1.0,
    "decision": "what gave a gain costs quality (batch: see the convergence check): published the baseline (no changes)",
    "finalist": {"speedup": 1.19, "ci_low": 1.07, "ci_high": 1.33, "confidence": 0.95, "rounds": 6,
                 "significant": True, "candidate": 7},
    "ladder": [{"step": "batch", "changed": {"batch": [512, 1024]}, "kept": True, "verdict": "kept", "candidate": 9,
                "samples_per_s": 23200.2, "previous_samples_per_s": 19449.7, "speedup_vs_previous": 1.189,
                "ci_low": 1.056, "ci_high": 1.34, "rounds": 5, "cumulative": 1.189}],
    "quality": {"baseline_logloss": 0.5731, "tuned_logloss": 0.5810, "delta": 0.007882833480834961,
                "seed_noise": 0.0013991594314575195, "baseline_auc": 0.765, "tuned_auc": 0.761, "samples": 131072,
                "eval_samples": 16384, "max_logloss_delta": 0.002, "knobs": {"batch": 0.007882833480834961},
                "refused": ["batch"], "data": "synthetic teacher task (a proxy: trials/convergence.py)", "cost_s": None},
    "scaling": [{"nodes": 1, "baseline_samples_per_s": 100.0, "baseline_scaling": 1.0, "tuned_samples_per_s": 120.0,
                 "tuned_scaling": 1.0},
                {"nodes": 2, "baseline_samples_per_s": 150.0, "baseline_scaling": 1.5, "tuned_samples_per_s": None,
                 "tuned_scaling": None}],
}  # fmt: skip
STORED = {"not confirmed": NOT_CONFIRMED, "adopted": ADOPTED, "one seed": ONE_SEED}


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every non-null value of a JSON document by its path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}/{key}").items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}/{i}").items()}
    return {} if value is None else {path: value}


@pytest.mark.parametrize("name", sorted(STORED))
def test_an_older_outcome_loads_with_nothing_lost(name):
    raw = copy.deepcopy(STORED[name])
    outcome = Outcome.load(raw)
    assert outcome is not None
    dumped = outcome.dump()
    kept = leaves(dumped)
    # the one-seed check's knobs were deltas alone: read as {delta, verdict}
    lost = {p: v for p, v in leaves(raw).items() if kept.get(p) != v and not p.startswith("/quality/knobs/")}
    assert lost == {}
    assert Outcome.load(dumped) == outcome  # what this version stores reads back the same
    assert raw == STORED[name]  # loading never changes what was stored


def test_a_one_seed_check_is_said_as_before():
    outcome = Outcome.load(ONE_SEED)
    assert outcome is not None
    assert outcome.quality is not None
    assert outcome.quality.knobs["batch"].verdict == "refused"
    assert outcome.quality.knobs["batch"].delta == pytest.approx(0.00788, abs=1e-5)
    assert quality_line(outcome.quality) == (
        "quality: log loss 0.5810 vs 0.5731 (delta +0.0079, another model seed moves it 0.0014; AUC 0.761 vs "
        "0.765; 131,072 samples, synthetic teacher task (a proxy: trials/convergence.py)) -> refused: batch (costs "
        "more than 0.002)"
    )
    assert outcome.scaling is not None
    assert outcome.scaling[1].tuned_efficiency is None


def test_a_results_row_of_the_bench_loads_through_the_type():
    # bench/results.json keeps a few fields of each: they load too (bench/report.py reads them so)
    quality = Quality.model_validate(
        {"delta": 0.0079, "seed_noise": 0.0014, "refused": ["batch"], "skipped": None}
    )
    assert quality.ci_low is None
    assert quality.refused == ["batch"]
