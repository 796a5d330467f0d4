"""A real re-validation on 2 local CPU ranks (torchrun, gloo) of a config of the demo's job: the demo's
workload, space and settings, a config that changes its batch (the demo's study finds 1024 faster than
the job's 512), measured against the baseline in interleaved rounds in one launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotuner.cli.demo import DEMO_SETTINGS
from autotuner.executors import make_executor
from autotuner.store import Store, ValidationState
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.revalidate import Revalidation, request

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


@pytest.mark.slow
def test_a_real_two_rank_revalidation_of_a_demo_config(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    # the demo's settings; no search (its baseline is what this needs) and fewer iterations, for time
    settings = StudySettings(**{**DEMO_SETTINGS, "trials": 0, "iterations": 12, "warmup": 3, "confirm_rounds": 3},
                             workdir=str(tmp_path / "runs"))  # fmt: skip
    workload = json.loads((EXAMPLES / "workload-demo.json").read_text())
    space = yaml.safe_load((EXAMPLES / "space-demo.yaml").read_text())
    study = create_study(store, cluster="demo-cpu", workload=workload, space=space, settings=settings)
    final = StudyDriver(store, study.id, make_executor(settings), poll_s=0.2).run()
    assert final.state == "done", final.error
    v1 = store.served_config("demo-cpu", "demo-dlrm")
    assert v1.batch_size == 512
    assert v1.env == {}  # the job's own; NCCL_NET=Socket is inert on gloo
    v2 = store.publish_config(cluster="demo-cpu", workload="demo-dlrm", nodes=1, env={}, fwd_precision="fp32",
                              bwd_precision="fp32", batch_size=1024, sharding=v1.sharding, pipeline=v1.pipeline,
                              evidence={"decision": "batch 1024, as the demo's ladder finds it"}, study_id=study.id)  # fmt: skip

    row, _ = request(store, v2)
    done = Revalidation(store, row.id, make_executor(settings), poll_s=0.2).run()
    result = done.result
    print(f"\nreal 2-rank re-validation of v2: {done.state}, {result['why']}, wall {result['wall_s']:.1f} s")
    assert done.state in (ValidationState.HELD, ValidationState.FAILED, ValidationState.UNRESOLVED), (
        done.state, done.error, result
    )  # fmt: skip
    # the study's 3 rounds, and where they cannot tell, 3 more (a second look, judged over all 6)
    assert result["rounds"] == result["rounds_asked"]
    assert result["rounds"] in (3, 6)
    assert (done.state == ValidationState.HELD) == (result["ci_low"] > 1.0)
    # published by hand with no figure: it fails only when shown slower
    assert (done.state == ValidationState.FAILED) == (result["ci_high"] < 1.0)
    # both settings share one process environment (the inert NCCL_NET at the baseline's value): one
    # launch, the two alternating in ABBA order, each measured for real
    launches = [la for la in store.launches(study.id) if la.kind == "revalidate"]
    assert len(launches) == result["rounds"] // 3
    for launch in launches:
        assert launch.state == "succeeded"
        assert launch.env == {"NCCL_NET": "Socket"}
        assert launch.executor == "local"
        assert launch.summary["world_size"] == 2
        assert launch.summary["backend"] == "gloo"
    assert [c["batch_size"] for c in launches[0].spec["candidates"]] == [1024, 512, 512, 1024, 1024, 512]
    assert done.fingerprint == {"nodes": "1"}  # a CPU box: no driver, GPU or NCCL to record
    assert 0 < result["wall_s"] < 600
    served = store.served_config("demo-cpu", "demo-dlrm")
    if done.state != ValidationState.FAILED:  # this machine's noise can hide a 1.3x gain in 3 rounds
        assert served.id == v2.id
        assert done.action.startswith("kept v2")
    else:  # shown slower: the baseline comes back
        assert served.version == 3
        assert served.batch_size == 512
        assert done.new_config_id == served.id
    store.dispose()
