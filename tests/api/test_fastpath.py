"""The config fast path answers exactly what the FastAPI route would, and leaves the rest to it.

Every request goes to two apps on one store: as built (fast path in front of the router) and with the
ConfigFastPath middleware taken out. Status, headers and body must be the same, and a probe just
inside the fast path tells which requests it answered itself.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import parse_qsl

import pytest
from fastapi.testclient import TestClient
from starlette.middleware import Middleware

from api.app import create_app
from api.fastpath import ConfigFastPath, _query
from api.settings import Settings
from autotuner.store import Store

TOKENS = "jobs:read,infra:write"


class Probe:
    """Records the paths that got past the fast path (to the router)."""

    def __init__(self, app: Any, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
        await self.app(scope, receive, send)


def _app(tmp_path, store: Store, fast_path: bool, seen: list[str]):
    app = create_app(Settings(data_dir=tmp_path, tokens=TOKENS, scheduler=False), store=store)
    at = next(i for i, m in enumerate(app.user_middleware) if m.cls is ConfigFastPath)
    app.user_middleware.insert(at + 1, Middleware(Probe, seen=seen))  # just inside the fast path
    if not fast_path:
        del app.user_middleware[at]
    return app


@pytest.fixture
def apps(tmp_path):
    """(fast, routed, paths that reached the router of the fast one)."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {"name": "w", "tables": []})
    cluster = store.cluster("c", create=True)
    store.update_fingerprint(cluster.id, {"driver": "550.54.15", "versions": {"nccl": "2.21.5"}})
    for nodes in (2, 8):
        store.publish_config(cluster="c", workload="w", nodes=nodes, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             fwd_precision="fp8", bwd_precision="bf16", batch_size=1024 * nodes,
                             sharding="table_wise")  # fmt: skip
    seen: list[str] = []
    with (
        TestClient(_app(tmp_path, store, True, seen)) as fast,
        TestClient(_app(tmp_path, store, False, [])) as routed,
    ):
        yield fast, routed, seen


def fetch(client, path: str, token: str | None = "jobs", scheme: str = "Bearer"):
    return client.get(path, headers={"Authorization": f"{scheme} {token}"} if token else {})


@pytest.mark.parametrize(
    ("path", "token", "status", "contains", "answered_by_fast_path"),
    [
        ("/v1/configs/c/w", "jobs", 200, '"batch_size": 8192', True),  # no node count: the newest
        ("/v1/configs/c/w?nodes=3", "jobs", 200, '"batch_size": 2048', True),
        ("/v1/configs/c/w?nodes=7&format=env", "jobs", 200, "export AUTOTUNER_BATCH_SIZE=8192", True),
        ("/v1/configs/c/w?format=slurm", "jobs", 200, "export NCCL_NSOCKS_PERTHREAD=4", True),
        ("/v1/configs/c/w", "infra", 200, '"batch_size": 8192', True),  # write implies read
        ("/v1/configs/c/nope", "jobs", 404, "no config published", False),
        ("/v1/configs/c/w?nodes=0", "jobs", 422, "nodes", False),
        ("/v1/configs/c/w?format=yaml", "jobs", 422, "format", False),
        ("/v1/configs/c/w?nodes=2&extra=1", "jobs", 200, "AUTOTUNER", False),  # the route ignores extras
        ("/v1/configs/c%20x/w", "jobs", 422, "cluster", False),
        ("/v1/configs/c/w", None, 401, "token", False),
        ("/v1/configs/c/w", "wrong", 401, "token", False),
        ("/v1/configs/c/w?nodes=%C2%B2", "jobs", 422, "nodes", False),  # "²": str.isdigit() says yes
        ("/v1/configs/c/w?nodes=%D9%A3", "jobs", 422, "nodes", False),  # Arabic-Indic 3: int() takes it
    ],
)
def test_same_answers_as_the_route(apps, path, token, status, contains, answered_by_fast_path):
    fast, routed, seen = apps
    ours, theirs = fetch(fast, path, token), fetch(routed, path, token)
    assert ours.status_code == theirs.status_code == status, ours.text
    assert ours.headers == theirs.headers
    assert ours.content == theirs.content
    assert contains in ours.text
    assert (seen == []) is answered_by_fast_path, seen


STALE_NOTE = ("# nccl-autotuner: c/w/8n/v1 was validated on driver 550.54.15, NCCL 2.21.5, 8 nodes; this job differs: "
              "driver 550.54.15 -> 570.86.15")  # fmt: skip


@pytest.mark.parametrize(
    ("path", "fingerprint", "contains"),
    [
        ("/v1/configs/c/w", None, '"fingerprint_match": "unknown", "fingerprint_diff": {}}'),
        (
            "/v1/configs/c/w",
            "driver=550.54.15&nccl=2.21.5&nodes=8",
            '"fingerprint_match": true, "fingerprint_diff": {}}',
        ),
        (
            "/v1/configs/c/w",
            "driver=570.86.15",
            '"fingerprint_diff": {"driver": ["550.54.15", "570.86.15"]}}',
        ),
        (
            "/v1/configs/c/w?nodes=3",
            "nodes=3",
            '"fingerprint_match": false, "fingerprint_diff": {"nodes": ["2", "3"]}}',
        ),
        ("/v1/configs/c/w?format=env", "driver=570.86.15", STALE_NOTE),
        ("/v1/configs/c/w?format=slurm", "driver=570.86.15&nccl=2.21.5+cuda12.4", STALE_NOTE),
        ("/v1/configs/c/w?format=env", "driver=550.54.15", "export AUTOTUNER_BATCH_SIZE=8192\n"),
        ("/v1/configs/c/w", "", '"fingerprint_match": "unknown"'),
        (
            "/v1/configs/c/w",
            "gpu=NVIDIA+H100&unknown=1",
            '"fingerprint_match": "unknown"',
        ),  # nothing to compare
        ("/v1/configs/c/w", "driver=%0a570&nodes=-1&nodes=x", '"fingerprint_match": "unknown"'),
        ("/v1/configs/c/w", "driver=" + "9" * 2000, '"fingerprint_match": "unknown"'),  # too long to read
    ],
)
def test_a_fingerprint_gets_the_same_answer_as_from_the_route(apps, path, fingerprint, contains):
    fast, routed, seen = apps
    headers = {"Authorization": "Bearer jobs"} | (
        {"X-Autotuner-Fingerprint": fingerprint} if fingerprint is not None else {}
    )
    ours, theirs = fast.get(path, headers=headers), routed.get(path, headers=headers)
    assert ours.status_code == theirs.status_code == 200, ours.text
    assert (ours.headers, ours.content) == (theirs.headers, theirs.content)
    assert contains in ours.text
    assert seen == []
    if "format" not in path:
        assert ours.json()["validated_on"]["driver"] == "550.54.15"


def test_jobs_on_another_stack_are_counted_and_written_off_the_request_path(apps):
    fast, routed, seen = apps
    headers = {"Authorization": "Bearer jobs", "X-Autotuner-Fingerprint": "driver=570.86.15&nodes=8"}
    for client in (fast, fast, routed):
        assert client.get("/v1/configs/c/w", headers=headers).json()["fingerprint_match"] is False
    nodes_only = {
        **headers,
        "X-Autotuner-Fingerprint": "driver=550.54.15&nodes=4",
    }  # served the nearest count
    assert fast.get("/v1/configs/c/w?nodes=4", headers=nodes_only).json()["fingerprint_diff"] == {
        "nodes": ["2", "4"]
    }
    assert "autotuner_fingerprint_mismatches_total 2.0" in fetch(fast, "/metrics").text
    store = fast.app.state.store
    assert store.fingerprint_reports([1, 2]) == {1: [], 2: []}  # nothing written while answering
    for client in (fast, routed):
        client.app.state.cache.reports.flush()
    (report,) = store.fingerprint_reports([2])[2]
    assert (report.jobs, report.fingerprint, report.diff) == (3, {"driver": "570.86.15", "nodes": "8"},
                                                              {"driver": ["550.54.15", "570.86.15"]})  # fmt: skip
    assert store.fingerprint_reports([1])[1] == []  # a node count apart is not a stale stack
    assert seen == ["/metrics"]


def test_a_basic_auth_header_is_left_to_the_route(apps):
    fast, routed, seen = apps
    ours, theirs = (fetch(c, "/v1/configs/c/w", "am9iczo=", scheme="Basic") for c in (fast, routed))
    assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content) == (401, theirs.content)
    assert seen == ["/v1/configs/c/w"]


def test_hits_are_counted_and_timed(apps):
    fast, _, seen = apps
    for _ in range(3):
        assert fetch(fast, "/v1/configs/c/w?format=env").status_code == 200
    metrics = fetch(fast, "/metrics").text
    assert seen == ["/metrics"]  # the three hits never reached the router, and were still counted
    assert 'autotuner_config_fetches_total{format="env",result="hit"} 3.0' in metrics
    assert 'autotuner_request_seconds_count{route="/v1/configs/{cluster}/{workload}"} 3.0' in metrics


# Pieces of queries a client might send, escaped or not, valid or not.
NAMES = ["nodes", "format", "NODES", "extra", "", "nod%65s", "for+mat"]
VALUES = ["2", "3", "0", "02", "+2", "%32", "٣", "%D9%A3", "%C2%B2", "1000001", "9" * 25, "", "env", "json",
          "slurm", "yaml", "en%76", "e+nv", "%", "%zz"]  # fmt: skip


def _random_query(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 3)):
        name, value = rng.choice(NAMES), rng.choice(VALUES)
        parts.append(rng.choice([f"{name}={value}", name, f"{name}={value}={value}", ""]))
    return "&".join(parts)


def test_random_queries_get_the_same_answers_as_the_route(apps):
    fast, routed, seen = apps
    rng = random.Random(7)
    answered = 0
    for _ in range(150):
        path = f"/v1/configs/c/w?{_random_query(rng)}"
        before = len(seen)
        ours, theirs = fetch(fast, path), fetch(routed, path)
        assert ours.status_code == theirs.status_code, path
        assert (ours.headers, ours.content) == (theirs.headers, theirs.content), path
        answered += len(seen) == before
    assert 10 < answered < 140  # both branches were taken: the fast path answered some, the route the rest


def test_plain_queries_are_split_as_parse_qsl_splits_them():
    rng = random.Random(11)
    for _ in range(2000):
        raw = _random_query(rng).encode()
        assert _query(raw) == parse_qsl(raw.decode("latin-1"), keep_blank_values=True), raw


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([("authorization", "Bearer wrong"), ("authorization", "Bearer jobs")], 401),
        (
            [
                ("authorization", "Bearer jobs"),
                ("x-autotuner-fingerprint", "driver=550.54.15&nccl=2.21.5&nodes=8"),
                ("x-autotuner-fingerprint", "driver=570.86.15&nodes=8"),
            ],
            200,
        ),
        (
            [
                ("authorization", "Bearer jobs"),
                ("x-autotuner-fingerprint", "driver=570.86.15&nodes=8"),
                ("x-autotuner-fingerprint", "driver=550.54.15&nccl=2.21.5&nodes=8"),
            ],
            200,
        ),
    ],
    ids=[
        "bad-then-good-token",
        "matching-then-other-stack",
        "other-stack-then-matching",
    ],
)
def test_a_repeated_header_gets_the_routes_answer(apps, headers, status):
    """The fast path kept the last Authorization (and fingerprint) header, the route (Starlette's
    Headers.get) the first: a bad token then a good one was served by one and refused by the other,
    and a job's two fingerprints got two verdicts, by which of the two answered."""
    fast, routed, _ = apps
    ours, theirs = (
        fast.get("/v1/configs/c/w", headers=headers),
        routed.get("/v1/configs/c/w", headers=headers),
    )
    assert ours.status_code == theirs.status_code == status, ours.text
    assert (ours.headers, ours.content) == (theirs.headers, theirs.content)
