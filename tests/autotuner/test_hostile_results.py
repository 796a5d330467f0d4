"""A study survives what a launch directory may hold: a result with a wrong-typed or infinite figure,
a result that is not a file, an error message or log of megabytes. The bad launch or candidate fails
with the reason, every other one is recorded, the study concludes, and nothing stays "running"."""

from __future__ import annotations

import json
import math
import os

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from autotuner.executors import Landscape, ReplayExecutor
from autotuner.executors.results import MAX_TEXT
from autotuner.store import Store
from autotuner.tuning import StudyDriver
from tests.autotuner.test_driver import study_with
from tests.helpers import LANDSCAPE

BIG = 4 << 20  # 4 MiB of error message and of one log line


def infinite_first(launch, result):
    result["candidates"][0]["samples_per_s"] = math.inf
    launch.result_path.write_text(json.dumps(result))


def a_fifo(launch, result):
    launch.result_path.unlink()
    os.mkfifo(launch.result_path)


def megabytes_of_error(launch, result):
    launch.result_path.write_text(json.dumps({"schema_version": 1, "status": "error", "error": "E" * BIG}))
    launch.log_path.write_text("L" * BIG + "\nthe last line\n")


class TamperingReplay(ReplayExecutor):
    """Replays the landscape, then rewrites what the first search launches left (by launch name)."""

    def __init__(self, tamper: dict, **kwargs):
        super().__init__(Landscape.load(LANDSCAPE), **kwargs)
        self.tamper = tamper

    def schedule(self, dryrun):
        backend_id = super().schedule(dryrun)
        seq = int(dryrun.launch.name.rsplit("-l", 1)[1])
        if seq in self.tamper:
            self.tamper[seq](dryrun.launch, json.loads(dryrun.launch.result_path.read_text()))
        return backend_id


def test_a_study_concludes_past_hostile_results_and_says_why_each_failed(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=4)
    executor = TamperingReplay({2: infinite_first, 3: a_fifo, 4: megabytes_of_error}, seed=7)
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()
    assert final.state == "done", final.error
    launches = {launch.seq: launch for launch in store.launches(study.id)}
    assert all(launch.state in ("succeeded", "failed") for launch in launches.values())

    # the infinite figure: its candidate failed alone, its neighbours recorded
    first, *rest = store.candidates(study.id, launch_id=launches[2].id)
    assert launches[2].state == "succeeded"
    assert first.state == "failed"
    assert first.samples_per_s is None
    assert "samples_per_s is Infinity, expected a finite number > 0" in first.error
    assert rest
    assert all(c.state == "ok" and math.isfinite(c.samples_per_s) for c in rest)
    best = store.candidate(final.best_candidate_id)
    assert best is not None
    assert math.isfinite(best.samples_per_s)

    # the FIFO: the launch failed at once with the reason (a blocking read would hang this test)
    assert launches[3].state == "failed"
    assert launches[3].error == "its result cannot be used: result.json is not a regular file"

    # megabytes of error and log: stored and served bounded
    assert launches[4].state == "failed"
    assert len(launches[4].error) < MAX_TEXT + 100
    assert launches[4].log_tail.endswith("the last line")
    assert len(launches[4].log_tail) < MAX_TEXT + 100
    assert all(len(c.error) < MAX_TEXT + 100 for c in store.candidates(study.id, launch_id=launches[4].id))

    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        served = client.get(f"/v1/studies/{study.id}/launches")
        assert served.status_code == 200
        assert len(served.content) < 200_000
        errors = {launch["seq"]: launch["error"] for launch in served.json()}
        assert "not a regular file" in errors[3]
        assert client.get(f"/v1/studies/{study.id}/insights").status_code == 200


def test_rows_an_older_version_stored_unchecked_are_served_without_the_bad_figures(store: Store, tmp_path):
    """Before results were checked, a wrong-typed figure went into the store as it came: those rows are
    served with the figure left out (null), never a 500 for the whole page."""
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    launch = store.launches(study.id)[0]
    (baseline,) = store.candidates(study.id, launch_id=launch.id)
    metrics = {**baseline.metrics, "breakdown_ms": {"compute": "slow"}, "dense_allreduce_bytes": "lots"}
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE at_launches SET summary = :s WHERE id = :id"),
                     {"s": json.dumps({"setup_s": "soon", "wall_s": [1]}), "id": launch.id})  # fmt: skip
        conn.execute(text("UPDATE at_candidates SET metrics = :m WHERE id = :id"),
                     {"m": json.dumps(metrics), "id": baseline.id})  # fmt: skip
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        launches = client.get(f"/v1/studies/{study.id}/launches")
        assert launches.status_code == 200
        served = {row["id"]: row for row in launches.json()}[launch.id]
        assert (served["setup_s"], served["wall_s"]) == (None, None)
        trials = client.get(f"/v1/studies/{study.id}/trials", params={"limit": 500})
        assert trials.status_code == 200
        row = {t["id"]: t for t in trials.json()["data"]}[baseline.id]
        assert (row["breakdown_ms"], row["dense_allreduce_bytes"]) == (None, None)
        insights = client.get(f"/v1/studies/{study.id}/insights")
        assert insights.status_code == 200
        assert baseline.id not in [b["id"] for b in insights.json()["breakdown"]]


# Each: a JSON column of a finished study's rows holding what no version writes there, and the listing it is on.
ODD_ROWS = {
    "study settings a list": (lambda s, st: s.update_study(st.id, settings=[1, 2]), "/v1/studies", "settings"),
    "study space a list": (lambda s, st: s.update_study(st.id, space=[]), "/v1/studies/{id}", "space"),
    "study inert a list": (lambda s, st: s.update_study(st.id, inert=[1]), "/v1/studies", "inert"),
    "launch env a list": (lambda s, st: s.update_launch(s.launches(st.id)[0].id, env=["x"]),
                          "/v1/studies/{id}/launches", "env"),
    "launch spec a list": (lambda s, st: s.update_launch(s.launches(st.id)[0].id, spec=[1, 2]),
                           "/v1/studies/{id}/launches", "candidates"),
    "best candidate env a list": (lambda s, st: s.update_candidate(st.best_candidate_id, env=[1]),
                                  "/v1/studies/{id}/trials", "env"),
}  # fmt: skip


def rows_of(body) -> list:
    """The rows of a listing (a page, a plain list) or the one row a single-row page answers."""
    if isinstance(body, dict):
        return body["data"] if "data" in body else [body]
    return body


@pytest.mark.parametrize("odd", list(ODD_ROWS))
def test_a_row_with_an_odd_column_is_listed_with_why_never_a_500_for_the_page(store: Store, tmp_path, odd):
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    damage, url, field = ODD_ROWS[odd]
    damage(store, final)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        for page in ("/v1/studies", "/v1/studies/{id}", "/v1/studies/{id}/launches", "/v1/studies/{id}/trials",
                     "/v1/studies/{id}/insights"):  # fmt: skip
            assert client.get(page.format(id=study.id)).status_code == 200, page
        body = client.get(url.format(id=study.id)).json()
    rows = rows_of(body)
    said = [r["error"] for r in rows if r.get("error") and f"stored {field}" in r["error"]]
    assert said == [f"stored {field} cannot be read (shown empty)"]


# Text no version writes where the store keeps JSON or a date (only SQLite can hold it: PostgreSQL checks
# both types on write): (table, column, text, the page that lists the row, the field it names).
RAW_TEXT = {
    "study date": ("at_studies", "created_at", "yesterday", "/v1/studies", "created_at"),
    "study outcome": ("at_studies", "outcome", "{x", "/v1/studies/{id}", "outcome"),
    "trial date": ("at_candidates", "created_at", "x", "/v1/studies/{id}/trials", "created_at"),
    "trial env": ("at_candidates", "env", "{", "/v1/studies/{id}/trials", "env"),
    "launch env": ("at_launches", "env", "[", "/v1/studies/{id}/launches", "env"),
}


@pytest.mark.parametrize("raw", list(RAW_TEXT))
def test_a_row_holding_text_that_is_no_json_or_date_is_listed_with_why(tmp_path, raw):
    store = Store(f"sqlite:///{tmp_path / 'raw.db'}")
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    table, column, value, url, field = RAW_TEXT[raw]
    with store.engine.begin() as conn:  # every row of the table: the page must list them all the same
        conn.execute(text(f"UPDATE {table} SET {column} = :v"), {"v": value})
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        for page in ("/v1/studies", "/v1/studies/{id}", "/v1/studies/{id}/launches", "/v1/studies/{id}/trials",
                     "/v1/studies/{id}/insights", "/v1/configs"):  # fmt: skip
            assert client.get(page.format(id=study.id)).status_code == 200, page
        body = client.get(url.format(id=study.id)).json()
    rows = rows_of(body)
    assert rows
    for row in rows:
        assert f"stored {field} cannot be read" in (row["error"] or ""), row
    store.dispose()


def test_a_config_whose_env_is_no_json_is_refused_with_why_and_its_history_listed(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'raw.db'}")
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, ReplayExecutor(Landscape.load(LANDSCAPE), seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    config = store.served_configs()[0]
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE at_configs SET env = '{', created_at = 'x' WHERE id = :i"), {"i": config.id}
        )
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    where = f"/v1/configs/{config.cluster.name}/{config.workload.name}"
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        served = client.get(where)
        history = client.get(f"{where}/history")
    assert served.status_code == 500
    assert "its stored env (not JSON: " in served.json()["detail"]
    assert "created_at (not a date)" in served.json()["detail"]
    assert history.status_code == 200
    assert [(v["version"], v["created_at"], v["env"]) for v in history.json()] == [(config.version, "", {})]
    assert "cannot be read" in history.json()[0]["error"]
    store.dispose()
