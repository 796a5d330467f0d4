"""A store that does not answer (PostgreSQL restarting, SQLite locked past its timeout) is a 503 that says
so, with Retry-After, on every route: the studies listing and pages, history, validations, the metrics
and the writes were a bare 500 and a traceback each; a pin was a 409 blaming the version."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.tuning.test_store_away import _refused

FIELDS = dict(env={}, fwd_precision="fp32", bwd_precision="fp32", sharding="table_wise", evidence={})


@pytest.fixture
def client_and_store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {})
    store.publish_config(cluster="c", workload="w", nodes=1, batch_size=512, **FIELDS)
    settings = Settings(data_dir=tmp_path, tokens="a:admin", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer a"},
                    raise_server_exceptions=False) as client:  # fmt: skip
        yield client, store
    store.dispose()


@pytest.mark.parametrize(
    ("method", "path", "body", "away_in"),
    [
        ("GET", "/v1/studies", None, "studies"),
        ("GET", "/v1/configs/c/w/history", None, "config_history"),
        ("POST", "/v1/configs/c/w/pin", {"version": 1}, "config_row"),  # a 409 blaming the version before
    ],
)
def test_a_store_away_is_a_503_with_retry_after(client_and_store, monkeypatch, method, path, body, away_in):
    client, store = client_and_store
    refused = _refused()

    def away(*_args, **_kwargs):
        raise refused

    monkeypatch.setattr(store, away_in, away)
    response = client.request(method, path, json=body)
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    detail = response.json()["detail"]
    assert detail.startswith("the store did not answer (OperationalError)"), detail
    assert "127.0.0.1" not in detail  # the driver's words name the database's host: logged, not sent


def test_a_database_error_that_is_no_outage_is_still_a_500(client_and_store, monkeypatch):
    client, store = client_and_store

    def bad_query(*_args, **_kwargs):
        raise OperationalError("SELECT ...", {}, Exception("no such column: at_studies.nope"))

    monkeypatch.setattr(store, "studies", bad_query)
    assert client.get("/v1/studies").status_code == 500
