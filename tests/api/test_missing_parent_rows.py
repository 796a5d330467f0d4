"""A study whose cluster or workload row is gone (the sqlite3 shell checks no foreign key: a hand's
UPDATE or DELETE there) is listed with that name empty and `error` saying so, beside every other study: its missing
name raised, and the listing, the state filter and its own page were a bare 500."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.helpers import LANDSCAPE

WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]


def orphaned(path, statement: str) -> None:
    """`statement` as the sqlite3 shell runs it: foreign keys off (the store turns them on)."""
    with sqlite3.connect(path) as conn:
        conn.execute(statement)
    conn.close()


@pytest.mark.parametrize("parent", ["cluster", "workload"])
def test_a_study_whose_parent_row_is_gone_is_listed_with_why_beside_the_others(tmp_path, parent):
    store = Store(f"sqlite:///{tmp_path / 'autotuner.db'}")
    good, orphan = (
        store.create_study(name=name, cluster="cpu-box", workload_name="small", workload_spec=WORKLOAD,
                           space={"env": {}}, settings={"executor": "replay", "trials": 2}, state="done").id
        for name in ("good", "orphan")
    )  # fmt: skip
    orphaned(tmp_path / "autotuner.db", f"UPDATE at_studies SET {parent}_id = 999 WHERE id = {orphan}")
    settings = Settings(data_dir=tmp_path, tokens="r:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r"}) as client:
        pages = [client.get("/v1/studies"), client.get("/v1/studies?state=done")]
        own, other = client.get(f"/v1/studies/{orphan}"), client.get(f"/v1/studies/{good}")
    store.dispose()
    for page in pages:
        assert page.status_code == 200, page.text
        assert page.json()["count"] == 2
        listed = {s["name"]: (s["cluster"], s["workload"], s["error"]) for s in page.json()["data"]}
        said = f"stored {parent} cannot be read (shown empty)"
        assert listed == {
            "good": ("cpu-box", "small", None),
            "orphan": (
                "" if parent == "cluster" else "cpu-box",
                "" if parent == "workload" else "small",
                said,
            ),
        }
    assert own.status_code == 200, own.text
    assert (own.json()["name"], own.json()[parent], own.json()["error"]) == ("orphan", "", said)
    assert (other.status_code, other.json()["cluster"], other.json()["error"]) == (200, "cpu-box", None)
