"""A config's history over REST comes a page at a time (newest first, by node count), and a version
that changes the batch carries the learning-rate factor it was validated under to the job."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store

FIELDS = dict(env={}, fwd_precision="fp32", bwd_precision="fp32", sharding="table_wise", evidence={})


@pytest.fixture
def client(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {})
    for batch in (512, 1024, 2048, 4096, 8192):
        store.publish_config(cluster="c", workload="w", nodes=2, batch_size=batch,
                             lr_scale=None if batch == 512 else (batch / 512) ** 0.5, **FIELDS)  # fmt: skip
    store.publish_config(cluster="c", workload="w", nodes=4, batch_size=512, **FIELDS)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as c:
        yield c
    store.dispose()


def test_history_pages_by_node_count_newest_first(client):
    def page(**params):
        response = client.get("/v1/configs/c/w/history", params=params)
        assert response.status_code == 200, response.text
        return [(c["nodes"], c["version"]) for c in response.json()]

    assert page(nodes=2, limit=2) == [(2, 5), (2, 4)]
    assert page(nodes=2, limit=2, offset=2) == [(2, 3), (2, 2)]
    assert page(nodes=2, limit=2, offset=4) == [(2, 1)]
    assert page(nodes=2, offset=5) == []
    assert page() == [(2, 5), (2, 4), (2, 3), (2, 2), (2, 1), (4, 1)]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"nodes": 0}])
def test_a_page_out_of_range_is_a_422_naming_it(client, params):
    response = client.get("/v1/configs/c/w/history", params=params)
    assert response.status_code == 422
    assert next(iter(params)) in response.text


def test_the_served_batch_change_brings_its_learning_rate_factor(client):
    config = client.get("/v1/configs/c/w", params={"nodes": 2}).json()
    assert (config["batch_size"], config["lr_scale"]) == (8192, 4.0)
    assert config["exports"]["AUTOTUNER_LR_SCALE"] == "4"
    env = client.get("/v1/configs/c/w", params={"nodes": 2, "format": "env"}).text
    assert "export AUTOTUNER_LR_SCALE=4\n" in env
    plain = client.get("/v1/configs/c/w", params={"nodes": 4}).json()
    assert plain["lr_scale"] is None
    assert "AUTOTUNER_LR_SCALE" not in plain["exports"]


def test_a_version_beyond_any_stored_is_a_422_not_a_500(tmp_path):
    """schemathesis found it: a pin of version 348067992130902586032128 overflowed the driver (500)."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {})
    store.publish_config(cluster="c", workload="w", nodes=1, batch_size=512, **FIELDS)
    settings = Settings(data_dir=tmp_path, tokens="a-token:admin", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer a-token"}) as c:
        for path, body in (("pin", {"nodes": 1, "version": 348067992130902586032128}),
                           ("revalidate", {"version": 2**31})):  # fmt: skip
            response = c.post(f"/v1/configs/c/w/{path}", json=body)
            assert response.status_code == 422, response.text
            assert "version" in response.text
        assert c.post("/v1/configs/c/w/pin", json={"nodes": 1, "version": 2**31 - 1}).status_code == 404
    store.dispose()


def test_the_cli_and_rest_history_pages_are_the_same_size():
    """`autotuner configs history` and GET .../history show the same page by default."""
    import inspect

    from api.routes.configs import history
    from autotuner.cli.commands import configs_history

    rest = inspect.signature(history).parameters["limit"].default
    cli = inspect.signature(configs_history).parameters["limit"].default
    assert cli == rest


def test_a_bare_rollback_or_revalidate_takes_the_defaults_and_a_pin_names_its_version(tmp_path):
    """The docs' `curl -X POST .../rollback` (no body) was a 422 "Field required" at `body`; `{}` pinned
    nothing but unpinned: a pin now names its version (null to unpin)."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {})
    for _ in range(2):
        store.publish_config(cluster="c", workload="w", nodes=1, batch_size=512, **FIELDS)
    settings = Settings(data_dir=tmp_path, tokens="a-token:admin", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer a-token"}) as c:
        rolled = c.post("/v1/configs/c/w/rollback")
        assert rolled.status_code == 200, rolled.text
        assert (rolled.json()["version"], rolled.json()["pinned"]) == (1, True)
        # published by hand, not by a study: refused for that reason, the body itself was taken
        asked = c.post("/v1/configs/c/w/revalidate")
        assert asked.status_code == 409, asked.text
        unnamed = c.post("/v1/configs/c/w/pin", json={})
        assert unnamed.status_code == 422
        assert unnamed.json()["detail"][0]["loc"] == ["body", "version"]
        assert c.get("/v1/configs/c/w").json()["pinned"] is True  # nothing changed
        unpinned = c.post("/v1/configs/c/w/pin", json={"version": None})
        assert unpinned.status_code == 200, unpinned.text
        assert (unpinned.json()["version"], unpinned.json()["pinned"]) == (2, False)
    store.dispose()
