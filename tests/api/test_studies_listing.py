"""The studies listing reads a page in a few queries, and says of each study what its own page says:
a decided study its chosen best and baseline, a running one the current ones, a queued one none."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store

WORKLOAD = {
    "name": "w",
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 32, "pooling_factor": 1}],
}


def measured(store: Store, study_id: int, kind: str, speeds: list[float | None]) -> list[int]:
    launch = store.add_launch(study_id=study_id, kind=kind, env={}, spec={"candidates": [{}] * len(speeds)},
                              executor="replay")  # fmt: skip
    rows = [{"study_id": study_id, "launch_id": launch.id, "index": i, "kind": kind, "env": {}, "fwd_precision": "fp32",
             "bwd_precision": "fp32", "batch_size": 512, "sharding": "table_wise", "state": "ok" if v else "failed",
             "samples_per_s": v} for i, v in enumerate(speeds)]  # fmt: skip
    return [c.id for c in store.add_candidates(rows)]


@pytest.fixture
def store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")

    def study(name: str, state: str):
        return store.create_study(name=name, cluster="c", workload_name="w", workload_spec=WORKLOAD,
                                  space={"env": {}}, settings={"trials": 4}, state=state)  # fmt: skip

    done = study("done", "done")
    (base,) = measured(store, done.id, "baseline", [100.0])
    slow, _, fast = measured(store, done.id, "search", [90.0, None, 120.0])
    store.update_study(done.id, best_candidate_id=slow, baseline_candidate_id=base)  # chosen, not fastest
    running = study("running", "running")
    measured(store, running.id, "baseline", [50.0])
    measured(store, running.id, "search", [70.0, None])
    study("queued", "queued")
    yield store
    store.dispose()


def test_the_listing_says_what_each_studys_own_page_says(store, tmp_path):
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        queries: list[str] = []

        def count(conn, cursor, statement, *args) -> None:
            queries.append(statement)

        sa.event.listen(store.engine, "before_cursor_execute", count)
        listing = client.get("/v1/studies").json()
        sa.event.remove(store.engine, "before_cursor_execute", count)
        data = {s["name"]: s for s in listing["data"]}
        for name, study in data.items():
            assert study == client.get(f"/v1/studies/{study['id']}").json(), name
    assert listing["count"] == 3
    assert (data["done"]["best"]["samples_per_s"], data["done"]["baseline"]["samples_per_s"]) == (90.0, 100.0)
    assert (data["running"]["best"]["samples_per_s"], data["running"]["baseline"]["samples_per_s"]) == (
        70.0,
        50.0,
    )
    assert data["running"]["trial_counts"] == {"ok": 2, "failed": 1}
    assert (data["queued"]["best"], data["queued"]["baseline"], data["queued"]["trial_counts"]) == (
        None,
        None,
        {},
    )
    # a page, the counts, the chosen rows, the running study's two lookups, the total: not a few per study
    assert len(queries) <= 7, queries


def test_one_unreadable_outcome_or_metrics_row_never_hides_the_rest(store, tmp_path):
    """A stored outcome an older version (or a hand) wrote that no longer validates made the whole
    listing, which the dashboard polls, answer 500; so did a candidate whose metrics are not an object
    for the study's trials."""
    done = store.study("done")
    with store.engine.begin() as conn:
        conn.execute(sa.text("""UPDATE at_studies SET outcome = '{"speedup": 1.1, "ladder": [{"step": "env"}]}'
                                WHERE name = 'done'"""))  # fmt: skip
        conn.execute(sa.text("UPDATE at_candidates SET metrics = '[1]' WHERE study_id = :s"), {"s": done.id})
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        listing = client.get("/v1/studies")
        assert listing.status_code == 200, listing.text
        data = {s["name"]: s for s in listing.json()["data"]}
        assert set(data) == {"done", "running", "queued"}
        assert data["done"]["outcome"] is None
        assert "its stored outcome cannot be read" in data["done"]["error"]
        assert client.get(f"/v1/studies/{done.id}").status_code == 200
        trials = client.get(f"/v1/studies/{done.id}/trials")
        assert trials.status_code == 200, trials.text
        assert {t["breakdown_ms"] for t in trials.json()["data"]} == {None}
