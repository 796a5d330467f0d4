"""The service end to end, with a real server process."""

from __future__ import annotations

import time

import pytest

from tests.api.conftest import replay_study_body, wait_for_config, wait_for_state


def test_a_study_created_over_rest_runs_and_its_config_is_served_in_every_format(server):
    client = server.client("write")
    created = client.post("/v1/studies", json=replay_study_body())
    assert created.status_code == 201, created.text
    study = wait_for_state(client, created.json()["id"], ("done", "failed"))
    assert study["state"] == "done", study
    config = wait_for_config(client)
    assert config.status_code == 200 and config.json()["version"] == 1
    assert config.json()["evidence"]["study_id"] == study["id"]
    env = client.get("/v1/configs/cpu-box/small", params={"format": "env"}).text
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in env
    slurm = client.get("/v1/configs/cpu-box/small", params={"format": "slurm", "nodes": 4}).text
    assert all(line.startswith(("#", "export ")) for line in slurm.strip().splitlines())
    trials = client.get(
        f"/v1/studies/{study['id']}/trials", params={"sort": "samples_per_s", "order": "desc"}
    ).json()
    values = [t["samples_per_s"] for t in trials["data"] if t["samples_per_s"] is not None]
    assert trials["count"] >= 4 and values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    ("method", "path", "scope", "status"),
    [
        ("get", "/v1/studies", None, 401),
        ("post", "/v1/studies", "read", 403),
        ("post", "/v1/configs/c/w/pin", "write", 403),
        ("get", "/v1/configs/c/w", "read", 404),
        ("get", "/healthz", None, 200),
    ],
)
def test_scopes(server, method, path, scope, status):
    response = getattr(server.client(scope), method)(path, **({"json": {}} if method == "post" else {}))
    assert response.status_code == status, response.text


def test_cancel_a_queued_study(server):
    client = server.client("write")
    study = client.post("/v1/studies", json=replay_study_body("long", trials=200)).json()
    time.sleep(1)
    cancelled = client.post(f"/v1/studies/{study['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 409
