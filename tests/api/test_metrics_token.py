"""/metrics is open to scrapers by default (it names clusters, workloads and config versions, never a
value or a token); AUTOTUNER_METRICS_TOKEN=1 closes it to all but read tokens, whatever
AUTOTUNER_PUBLIC_READ says."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store

READ = {"Authorization": "Bearer r-token"}


@pytest.fixture
def store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    yield store
    store.dispose()


@pytest.mark.parametrize("public_read", [False, True])
def test_metrics_need_a_read_token_when_the_operator_says_so(tmp_path, store, public_read):
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False, public_read=public_read,
                        metrics_token=True)  # fmt: skip
    with TestClient(create_app(settings, store=store)) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "autotuner_" not in refused.text
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        scraped = client.get("/metrics", headers=READ)
        assert scraped.status_code == 200
        assert "autotuner_request_seconds" in scraped.text
        # the other reads follow AUTOTUNER_PUBLIC_READ as before
        assert client.get("/v1/studies").status_code == (200 if public_read else 401)


def test_metrics_are_open_by_default(tmp_path, store):
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        assert client.get("/metrics").status_code == 200
        assert client.get("/v1/studies").status_code == 401
