"""A NaN or an infinity in a stored row (an older version's, or one written by hand: SQLite keeps
9e999 as Infinity, and Python's JSON reads NaN) made every answer that carried it a 500: the studies
listing, and so the dashboard's list of every study, the good ones too (found by fuzzing the
dashboard). Such a figure is said as null, an unknown figure; the rest is answered."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.helpers import LANDSCAPE, by_hand

WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]


@pytest.fixture
def planted(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'autotuner.db'}")

    def study(name: str) -> int:
        return store.create_study(name=name, cluster="cpu-box", workload_name="small", workload_spec=WORKLOAD,
                                  space={"env": {}}, settings={"executor": "replay", "trials": 2},
                                  state="done").id  # fmt: skip

    good, infinite, nan = study("good"), study("infinite-trial"), study("nan-outcome")
    launch = store.add_launch(
        study_id=infinite, kind="search", env={}, spec={"candidates": []}, executor="replay"
    )
    rows = store.add_candidates([
        {"study_id": infinite, "launch_id": launch.id, "index": i, "kind": "search", "env": {}, "state": "ok",
         "fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64, "sharding": "table_wise",
         "iter_ms": 5.0, "samples_per_s": 1000.0}
        for i in range(2)
    ])  # fmt: skip
    by_hand(store, f"UPDATE at_candidates SET samples_per_s = 9e999 WHERE id = {rows[1].id}",
            f"""UPDATE at_studies SET outcome = '{{"speedup": NaN, "ci_low": 1.0, "ci_high": 2.0}}' WHERE id = {nan}""")  # fmt: skip
    settings = Settings(data_dir=tmp_path, tokens="r:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r"}) as client:
        yield client, good, infinite, nan, rows[1].id
    store.dispose()


def test_one_study_s_non_finite_figure_never_hides_the_others(planted):
    client, good, infinite, nan, row = planted
    listing = client.get("/v1/studies?limit=200")
    assert listing.status_code == 200, listing.text
    assert {s["id"] for s in listing.json()["data"]} == {good, infinite, nan}
    read = client.get(f"/v1/studies/{infinite}")
    assert read.status_code == 200, read.text
    assert read.json()["best"]["samples_per_s"] is None
    outcome = client.get(f"/v1/studies/{nan}")
    assert outcome.status_code == 200, outcome.text
    assert outcome.json()["outcome"]["speedup"] is None
    assert outcome.json()["outcome"]["ci_high"] == 2.0
    trials = client.get(f"/v1/studies/{infinite}/trials")
    assert trials.status_code == 200, trials.text
    assert {t["id"]: t["samples_per_s"] for t in trials.json()["data"]}[row] is None
