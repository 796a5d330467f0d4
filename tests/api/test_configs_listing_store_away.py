"""A service that started while the store was down has loaded no config: its listing (and so the
dashboard's Configs page) said 200 [] - "Nothing published yet" - while every config was still
published. It is a 503 with Retry-After, as a single key's fetch is, until the store answers."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.tuning.test_store_away import _refused

FIELDS = dict(env={}, fwd_precision="fp32", bwd_precision="fp32", sharding="table_wise", evidence={})


def test_the_listing_before_any_load_is_a_503_not_an_empty_list(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {})
    store.publish_config(cluster="c", workload="w", nodes=1, batch_size=512, **FIELDS)
    refused = _refused()
    real = {name: getattr(store, name) for name in ("served_heads", "config_generation_stamp")}

    def away(*_args, **_kwargs):
        raise refused

    for name in real:  # the reads of a load and of a refresh
        monkeypatch.setattr(store, name, away)
    settings = Settings(data_dir=tmp_path, tokens="a:admin", scheduler=False)
    try:
        with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer a"},
                        raise_server_exceptions=False) as client:  # fmt: skip
            listing = client.get("/v1/configs")
            assert listing.status_code == 503, listing.text
            assert listing.headers["retry-after"]
            assert "not answered" in listing.json()["detail"]
            for name, method in real.items():  # the store is back
                monkeypatch.setattr(store, name, method)
            listing = client.get("/v1/configs")
            assert listing.status_code == 200, listing.text
            assert [(c["cluster"], c["workload"]) for c in listing.json()] == [("c", "w")]
    finally:
        store.dispose()
