"""The config fast path answers exactly what the FastAPI route would, and leaves the rest to it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store

TOKENS = "jobs:read,infra:write"


@pytest.fixture
def client(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {"name": "w", "tables": []})
    for nodes in (2, 8):
        store.publish_config(cluster="c", workload="w", nodes=nodes, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             fwd_precision="fp8", bwd_precision="bf16", batch_size=1024 * nodes,
                             sharding="table_wise")  # fmt: skip
    app = create_app(Settings(data_dir=tmp_path, tokens=TOKENS, scheduler=False), store=store)
    with TestClient(app) as c:
        yield c


def fetch(client, path: str, token: str | None = "jobs"):
    return client.get(path, headers={"Authorization": f"Bearer {token}"} if token else {})


@pytest.mark.parametrize(
    ("path", "status", "contains"),
    [
        ("/v1/configs/c/w", 200, '"batch_size": 8192'),  # no node count: the newest
        ("/v1/configs/c/w?nodes=3", 200, '"batch_size": 2048'),
        ("/v1/configs/c/w?nodes=7&format=env", 200, "export AUTOTUNER_BATCH_SIZE=8192"),
        ("/v1/configs/c/w?format=slurm", 200, "export NCCL_NSOCKS_PERTHREAD=4"),
        ("/v1/configs/c/nope", 404, "no config published"),
        ("/v1/configs/c/w?nodes=0", 422, "nodes"),
        ("/v1/configs/c/w?format=yaml", 422, "format"),
        ("/v1/configs/c/w?nodes=2&extra=1", 200, "AUTOTUNER"),  # unknown parameters: the route ignores them
        ("/v1/configs/c%20x/w", 422, "cluster"),
    ],
)
def test_same_answers_as_the_route(client, path, status, contains):
    response = fetch(client, path)
    assert response.status_code == status, response.text
    assert contains in response.text


def test_auth_is_enforced_on_the_fast_path(client):
    assert fetch(client, "/v1/configs/c/w", token=None).status_code == 401
    assert fetch(client, "/v1/configs/c/w", token="wrong").status_code == 401
    assert fetch(client, "/v1/configs/c/w", token="infra").status_code == 200  # write implies read
    assert client.get("/v1/configs/c/w", headers={"Authorization": "Basic am9iczo="}).status_code == 401


def test_hits_are_counted_and_timed(client):
    for _ in range(3):
        assert fetch(client, "/v1/configs/c/w?format=env").status_code == 200
    metrics = client.get("/metrics").text
    assert 'autotuner_config_fetches_total{format="env",result="hit"} 3.0' in metrics
    assert 'autotuner_request_seconds_count{route="/v1/configs/{cluster}/{workload}"} 3.0' in metrics
