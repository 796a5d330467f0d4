"""A store that stops answering half-way through a load (the heads read, then the rows or their
re-validations not: PostgreSQL restarting) never costs a published key its answer, and what that load
could not read is read again at the next poll; a worker started while the store is away starts, says
503 for what it has not loaded, and serves once the store answers (review r1)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.cache import SharedGeneration
from api.settings import Settings
from autotuner.store import Store, ValidationState
from tests.api.test_cache_store_away import unreachable

FIELDS = dict(env={}, fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise")
HOUR = 3600.0  # the poller never ticks: each test polls by hand (`refresh`), so every step is deterministic


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'at.db'}")
    s.upsert_workload("w", {"name": "w", "tables": []})
    yield s
    s.dispose()


def blink(store: Store, names: tuple[str, ...]) -> dict[str, bool]:
    """Make `names` of `store` raise as a server that closed the connection does, while `down["on"]`
    (words store_unavailable alone does not take for a store away)."""
    return unreachable(store, names, "server closed the connection unexpectedly")


def poll(client: TestClient) -> None:
    """One tick of the cache's poller (what its thread does every refresh_s): the store's failure is
    swallowed there, as the poller swallows it."""
    try:
        client.app.state.cache.refresh()
    except Exception:
        pass


def version(client: TestClient) -> tuple[int, object]:
    answer = client.get("/v1/configs/c/w")
    return answer.status_code, answer.json().get("version", answer.json().get("detail"))


def client_of(store: Store, tmp_path) -> TestClient:
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False, config_refresh_s=HOUR)
    return TestClient(create_app(settings, store=store))


@pytest.mark.parametrize("away", [("configs_by_id", "config_labels"), ("configs_by_id",)])
def test_a_store_gone_between_the_heads_and_the_rows_keeps_the_key_and_loads_it_when_back(
    store, tmp_path, away
):
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    with client_of(store, tmp_path) as client:
        assert version(client) == (200, 1)
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)  # v2, by another process
        down = blink(store, away)
        poll(client)  # the heads answer, the rows do not
        # Was 404 "no config published" (both away: the key left out), or 500 "cannot be served" (the
        # rows away, their labels not: a blink taken for a bad row): the hook drops its kept config.
        assert version(client) == (200, 1)
        assert client.app.state.cache.unservable() == []
        down["on"] = False
        poll(client)  # the generation did not move since: loaded all the same
        assert version(client) == (200, 2)
        assert client.get("/v1/configs/c/other").status_code == 404  # the store's word: a real miss


def test_a_publish_met_by_a_store_gone_is_loaded_by_the_next_miss_or_poll(store, tmp_path):
    with client_of(store, tmp_path) as client:
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
        down = blink(store, ("configs_by_id", "config_labels"))
        answer = client.get("/v1/configs/c/w")  # a miss: the store's heads answer, its rows do not
        assert answer.status_code == 503, answer.text  # not loaded: retry, not "nothing published"
        assert answer.headers["Retry-After"]
        down["on"] = False
        poll(client)
        assert version(client) == (200, 1)


def test_re_validations_the_store_did_not_say_are_read_at_the_next_poll(store, tmp_path):
    study = store.create_study(name="s1", cluster="c", workload_name="w", workload_spec={"name": "w", "tables": []},
                               space={}, settings={})  # fmt: skip
    config = store.publish_config(cluster="c", workload="w", nodes=1, study_id=study.id, **FIELDS)
    row, _ = store.request_validation(config.id, "manual", "test")
    store.finish_validation(
        row.id, ValidationState.FAILED, result={"why": "slower"}, action="flagged (pinned)"
    )
    flagged = store.public_config(config)["flagged"]
    assert flagged
    down = blink(store, ("validation_views",))
    with client_of(store, tmp_path) as client:  # loads at start, its re-validations unread
        assert client.get("/v1/configs/c/w").json()["flagged"] is None  # served as published meanwhile
        down["on"] = False
        poll(client)  # the generation did not move: was never rendered again (served unflagged for good)
        assert client.get("/v1/configs/c/w").json()["flagged"] == flagged
        assert not client.app.state.cache.get("c", "w", 1).unverified


@pytest.mark.parametrize("worker", [True, False], ids=["serve-worker", "started-alone"])
def test_a_service_started_while_its_store_is_away_answers_503_and_serves_when_it_is_back(
    tmp_path, monkeypatch, worker
):
    database = tmp_path / "db" / "at.db"
    database.mkdir(
        parents=True
    )  # not a database file: SQLite "unable to open database file", as a server down
    url = f"sqlite:///{database}"
    if worker:  # what `autotuner serve` sets for its workers, once it made the schema (api/cli.py)
        SharedGeneration.create(tmp_path / "generation")
        monkeypatch.setenv("AUTOTUNER_GENERATION_FILE", str(tmp_path / "generation"))
    else:
        monkeypatch.delenv("AUTOTUNER_GENERATION_FILE", raising=False)
    settings = Settings(data_dir=tmp_path, database_url=url, public_read=True, scheduler=False,
                        config_refresh_s=HOUR)  # fmt: skip
    with TestClient(create_app(settings)) as client:  # was: the lifespan raised (a crash loop under serve)
        answer = client.get("/v1/configs/c/w")
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"]
        database.rmdir()  # the store is back (made by whoever runs it: here, another process's Store)
        store = Store(url)
        store.upsert_workload("w", {"name": "w", "tables": []})
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
        assert version(client) == (200, 1)  # a miss asks the store, which answers now
        assert client.get("/v1/configs/c/other").status_code == 404
        store.dispose()
