"""The service runs only the executors it enables (AUTOTUNER_EXECUTORS). A study that `autotuner tune`
started on the same store, then left (Ctrl-C, killed), was taken over by the service's scheduler and
run to its end on whatever executor it named: `local` ran torchrun ranks on the service's host, where
the operator had enabled only `slurm`. Its re-validations likewise."""

from __future__ import annotations

import logging
import time

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store, StudyState
from autotuner.tuning import StudyDriver
from autotuner.tuning.queue import StudyQueue
from autotuner.tuning.revalidate import schedule_due
from tests.api.service import make_server
from tests.autotuner.test_driver import replay, study_with

DEAD = "gone-host:1:0:0"  # a runner that left the study (its lease lapsed: any queue may take it up)


def left_running(store: Store, tmp_path, name: str):
    study = study_with(store, tmp_path, name=name, trials=1, confirm_rounds=0, ladder_rounds=0)
    store.move_study(study.id, StudyState.RUNNING)
    return study


def test_a_queue_runs_only_the_executors_it_enables_and_says_so_once(store: Store, tmp_path, caplog):
    study = left_running(store, tmp_path, "cli-left")
    queue = StudyQueue(store, lambda settings: replay(), poll_s=0.01, executors=["slurm"])
    with caplog.at_level(logging.WARNING, "autotuner.queue"):
        assert queue.runnable() == []
        queue.run_once()
        queue.run_once()
    said = [r.getMessage() for r in caplog.records if "does not run" in r.getMessage()]
    assert said == [f"study {study.id} (cli-left) runs on executor replay, which this service does not run "
                    "(AUTOTUNER_EXECUTORS: slurm): neither it nor its configs' re-validations run here; run them "
                    "where replay runs (`autotuner tune --study cli-left`, `autotuner revalidate`)"]  # fmt: skip
    assert store.launches(study.id) == []
    assert store.study(study.id).state == StudyState.RUNNING
    # where it is enabled (and for `autotuner tune`, which enables any) it runs
    assert [s.id for s in StudyQueue(store, lambda settings: replay(), executors=["replay"]).runnable()] == [
        study.id
    ]
    assert [s.id for s in StudyQueue(store, lambda settings: replay()).runnable()] == [study.id]


def published_by_replay(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=2, ladder_rounds=0)
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    return store.served_configs()[0]


def test_the_schedule_asks_no_revalidation_the_service_could_not_run(store: Store, tmp_path):
    published_by_replay(store, tmp_path)
    later = None  # every served version is due at once with a schedule of 0 s
    assert schedule_due(store, 0.0, later, runs=lambda study: False) == []
    assert len(schedule_due(store, 0.0, later, runs=lambda study: True)) == 1


def test_a_revalidation_asked_over_rest_for_an_executor_not_enabled_is_refused(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    config = published_by_replay(store, tmp_path)
    settings = Settings(data_dir=tmp_path, scheduler=False, executors="slurm", tokens="w-token:write")
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer w-token"}) as client:
        answer = client.post(f"/v1/configs/cpu-box/{config.workload.name}/revalidate")
    assert answer.status_code == 409, answer.text
    assert answer.json()["detail"] == (
        f"v{config.version} was measured on executor 'replay', which is not enabled here (enabled: slurm): "
        f"re-validate it with `autotuner revalidate cpu-box {config.workload.name}` where that executor runs"
    )
    assert store.validations(config_ids=[config.id]) == []
    store.dispose()


def test_the_service_leaves_a_study_on_an_executor_it_does_not_enable(tmp_path):
    server = make_server(tmp_path, AUTOTUNER_EXECUTORS="slurm")
    store = Store(f"sqlite:///{server.data_dir / 'autotuner.db'}")
    study = left_running(store, tmp_path, "cli-left")
    server.start()
    try:
        deadline = time.monotonic() + 60
        while "runs on executor replay, which this service does not run" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.1)
        assert store.launches(study.id) == []
        assert store.study(study.id).state == StudyState.RUNNING
    finally:
        server.kill()
        store.dispose()


def test_jobs_on_a_new_stack_ask_no_revalidation_the_service_could_not_run(store: Store, tmp_path, caplog):
    from api.fingerprints import FingerprintReports

    config = published_by_replay(store, tmp_path)
    for executors, asked in ((["slurm"], 0), (["replay"], 1)):
        reports = FingerprintReports(store, executors=executors)
        with caplog.at_level(logging.INFO, "autotuner.api.fingerprints"):
            reports.note(
                config.id, f"driver=999.{asked}&nodes=1".encode(), {"driver": ["550.54.15", "999.0"]}
            )
            reports.flush()
        assert (
            len([v for v in store.validations(config_ids=[config.id]) if v.trigger == "fingerprint"]) == asked
        )
    assert "not re-validated: measured on executor replay, which this service does not run" in caplog.text
