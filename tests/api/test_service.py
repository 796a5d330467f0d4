"""The service end to end, with a real server process."""

from __future__ import annotations

import json
import time

import pytest

from tests.api.service import make_server, replay_study_body, served_config, wait_for_state
from tests.helpers import LANDSCAPE


def test_a_study_created_over_rest_runs_and_its_config_is_served_in_every_format(module_server):
    client = module_server.client("write")
    created = client.post("/v1/studies", json=replay_study_body())
    assert created.status_code == 201, created.text
    study = wait_for_state(client, created.json()["id"], ("done", "failed"))
    assert study["state"] == "done", study
    config = served_config(client)  # at once: the study is done, so its config is published
    assert config.status_code == 200
    assert config.json()["version"] == 1
    assert config.json()["evidence"]["study_id"] == study["id"]
    env = client.get("/v1/configs/cpu-box/small", params={"format": "env"}).text
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in env
    slurm = client.get("/v1/configs/cpu-box/small", params={"format": "slurm", "nodes": 4}).text
    assert all(line.startswith(("#", "export ")) for line in slurm.strip().splitlines())
    trials = client.get(
        f"/v1/studies/{study['id']}/trials", params={"sort": "samples_per_s", "order": "desc"}
    ).json()
    values = [t["samples_per_s"] for t in trials["data"] if t["samples_per_s"] is not None]
    assert trials["count"] >= 4
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    ("method", "path", "scope", "status"),
    [
        ("get", "/v1/studies", None, 401),
        ("post", "/v1/studies", "read", 403),
        ("post", "/v1/configs/c/w/pin", "write", 403),
        ("get", "/v1/configs/c/w", "read", 404),
        ("get", "/healthz", None, 200),
        ("head", "/healthz", None, 200),  # health checkers probe with HEAD (405 before)
        ("head", "/readyz", None, 200),
    ],
)
def test_scopes(module_server, method, path, scope, status):
    response = getattr(module_server.client(scope), method)(
        path, **({"json": {}} if method == "post" else {})
    )
    assert response.status_code == status, response.text


def test_cancel_stops_a_running_study_and_its_launch(tmp_path):
    slow = {"replay": {"landscape": str(LANDSCAPE), "delay_s": 60}}  # the launch outlives the heartbeat
    # A lease of 8 s: the scheduler renews it, and looks for a cancel, every 2 s instead of 5.
    server = make_server(tmp_path, AUTOTUNER_EXECUTOR_OPTIONS=json.dumps(slow), AUTOTUNER_LEASE_S="8")
    server.start()
    try:
        _cancel_and_check(server.client("write"))
    finally:
        server.kill()


def _cancel_and_check(client) -> None:
    study = client.post("/v1/studies", json=replay_study_body("long", trials=200)).json()
    launches = f"/v1/studies/{study['id']}/launches"
    running = wait_until(lambda: [x for x in client.get(launches).json() if x["state"] == "running"], 60)
    cancelled = client.post(f"/v1/studies/{study['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    # The scheduler sees it at its next heartbeat (<= 2 s here): it stops the launch and lets the study go.
    row = wait_until(lambda: (r := client.get(f"/v1/studies/{study['id']}").json())["finished_at"]
                     and not r["owner"] and r, 60)  # fmt: skip
    assert row["state"] == "cancelled"
    assert row["launches_done"] < 200
    after = {x["id"]: x["state"] for x in client.get(launches).json()}
    assert after[running[0]["id"]] == "cancelled"
    assert "running" not in after.values()
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 409


def wait_until(probe, timeout_s: float):
    """probe()'s first truthy answer, polled until the deadline."""
    deadline = time.monotonic() + timeout_s
    while not (answer := probe()):
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.1)
    return answer


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("options", "/v1/studies", "GET, POST"),  # each method is a route of its own: it said "POST"
        ("delete", "/v1/studies", "GET, POST"),
        ("put", "/healthz", "GET, HEAD"),
    ],
)
def test_a_method_the_path_does_not_take_is_answered_with_every_one_it_does(
    module_server, method, path, allowed
):
    response = module_server.client("write").request(method.upper(), path)
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allowed


def test_a_method_a_mounted_path_does_not_take_keeps_its_own_allow(module_server):
    """Inside the /static mount no top-level route matches: the Allow header read "" (nothing allowed)."""
    response = module_server.client("read").put("/static/app.js")
    assert response.status_code == 405
    assert response.headers.get("allow", "GET") != ""  # the mount's own answer, where it gives one
    assert "GET" in response.headers.get("allow", "GET")
