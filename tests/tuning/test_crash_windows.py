"""A runner stopped (SIGKILL, a restart's SIGTERM) between two writes that belong together: resumed,
the study does nothing twice. Publishing and storing the outcome: one version, not two of the same
config. A launch's candidates and its end: one write, so its measurements are never ingested twice."""

from __future__ import annotations

import pytest

from autotuner.store import Store
from autotuner.tuning import StudyDriver
from tests.autotuner.test_driver import replay, study_with


class Stopped(BaseException):
    """The process stopping: no `except Exception` of the driver sees it."""


def test_a_study_stopped_right_after_publishing_publishes_once_when_resumed(
    store: Store, tmp_path, monkeypatch
):
    study = study_with(store, tmp_path)
    real = Store.update_study

    def stop_at_the_outcome(self, study_id, **fields):
        if "outcome" in fields and "state" not in fields:
            monkeypatch.setattr(Store, "update_study", real)
            raise Stopped
        return real(self, study_id, **fields)

    monkeypatch.setattr(Store, "update_study", stop_at_the_outcome)
    with pytest.raises(Stopped):
        StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert len(store.configs_of_study(study.id)) == 1

    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    versions = store.configs_of_study(study.id)
    assert [c.version for c in versions] == [1]
    assert final.outcome["published_version"] == 1


def test_a_launchs_candidates_and_its_end_are_stored_together_or_not_at_all(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": []}, executor="replay",
                              attempt=1, nnodes=1)  # fmt: skip
    row = {"study_id": study.id, "launch_id": launch.id, "index": 0, "kind": "baseline", "env": {},
           "fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64, "sharding": "table_wise", "state": "ok",
           "metrics": {}}  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017, PT011 (the backend's own error for a bad row)
        store.finish_launch(
            launch.id, [row, {**row, "index": None, "fwd_precision": None}], state="succeeded"
        )
    assert store.candidates(study.id) == []
    assert store.launch(launch.id).state != "succeeded"
    saved = store.finish_launch(launch.id, [row], state="succeeded")
    assert [c.index for c in saved] == [0]
    assert store.launch(launch.id).state == "succeeded"
