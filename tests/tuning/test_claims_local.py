"""A real study on 2 CPU ranks (local torchrun): what it publishes rests on a ladder and a quality check."""

from __future__ import annotations

import pytest

from autotuner.executors import make_executor
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study

WORKLOAD = {"name": "dlrm-tiny", "batch_size": 64,
            "tables": [{"name": f"t{i}", "num_embeddings": 2000, "embedding_dim": 32, "pooling_factor": 4} for i in range(2)],
            "dense": {"in_features": 13, "arch": [32], "over_arch": [32, 1]}}  # fmt: skip
SPACE = {"env": {"NCCL_NSOCKS_PERTHREAD": [None, 2]}, "fixed_env": {"NCCL_NET": "Socket"},
         "precisions": [["fp32", "fp32"], ["int8", "int8"]],
         "batch_sizes": [64, 256], "allow_batch_change": True}  # fmt: skip


@pytest.mark.slow
def test_a_local_study_publishes_only_what_its_ladder_and_quality_check_allow(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    settings = StudySettings(executor="local", trials=1, candidates_per_launch=4, iterations=8, warmup=2,
                             confirm_rounds=2, ladder_rounds=2, quality_samples=16384, workdir=str(tmp_path / "runs"))  # fmt: skip
    study = create_study(store, cluster="box", workload=WORKLOAD, space=SPACE, settings=settings)
    assert "NCCL_NSOCKS_PERTHREAD" in study.inert  # CPU ranks: gloo, said before the first launch
    final = StudyDriver(store, study.id, make_executor(settings), poll_s=0.1).run()
    assert final.state == "done", final.error
    outcome = final.outcome
    kinds = [launch.kind for launch in store.launches(study.id)]
    assert kinds[:2] == ["baseline", "search"]
    assert "NCCL_NSOCKS_PERTHREAD" not in store.launches(study.id)[1].env
    config = store.served_config("box", "dlrm-tiny")
    assert config.env == {}  # nothing NCCL-related is handed to a job that runs on gloo, not even fixed_env
    assert {"NCCL_NSOCKS_PERTHREAD", "NCCL_NET"} <= set(config.evidence["inert"])
    for step in outcome.get("ladder", []):  # on a noisy CPU the finalist may or may not be confirmed
        assert step["kept"] == (step.get("ci_low", 0) > 1)
        assert step["step"] in ("precision", "batch")
    kept = {s["step"] for s in outcome.get("ladder", []) if s["kept"]}
    quality = outcome.get("quality") or {}
    if "baseline_logloss" in quality:  # a training knob was kept: the convergence check ran, for real
        assert kinds.count("quality") == 1
        assert quality["samples"] == 16384
        refused = set(quality["refused"])
        if outcome["decision"].startswith("tuned config is faster"):  # published what was kept and allowed
            assert (config.batch_size == 256) == ("batch" in kept - refused)
            assert (config.fwd_precision == "int8") == ("precision" in kept - refused)
    store.dispose()
