"""The baseline is the job as it runs today, its comm precision included (`comm_precision` in the
workload). It was always fp32/fp32: a job already on fp16 comms was measured against a setting it does
not run, and when that "baseline" won, the published "no changes" config moved the job to fp32."""

from __future__ import annotations

from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudySettings, create_study
from tests.autotuner.test_driver import LANDSCAPE, RECORDED, replay

FP16_JOB = {**RECORDED["workload"], "comm_precision": ["fp16", "fp16"]}
SPACE = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64]}


def test_the_baseline_runs_the_jobs_own_comm_precision_and_no_changes_keeps_it(store: Store, tmp_path):
    settings = StudySettings(executor="replay", trials=1, confirm_rounds=2, ladder_rounds=0, seed=7,
                             workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    study = create_study(store, cluster="cpu-box", workload=FP16_JOB, space=SPACE, settings=settings)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    baseline = store.launches(study.id)[0]
    assert baseline.kind == "baseline"
    assert [(c["fwd_precision"], c["bwd_precision"]) for c in baseline.spec["candidates"]] == [
        ("fp16", "fp16")
    ]
    config = store.served_config("cpu-box", RECORDED["workload"]["name"])
    assert config is not None
    assert (config.fwd_precision, config.bwd_precision) == (
        "fp16",
        "fp16",
    )  # was fp32: the job's training moved
