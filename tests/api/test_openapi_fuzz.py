"""Property-based run of the whole API from its own /openapi.json (schemathesis), on a real server:
no 5xx, every response matches its documented status code, content type and schema, and every
operation is reached, with an answer other than 404 and a success, at least once.

Reaching them is what the document's links are for (api/links.py): the stateful phase follows a study
that `POST /v1/studies` created, and the config the service serves, into the routes that take their
ids; and `POST /v1/studies` takes generated bodies because its workload and space are documented with
the schemas they are validated with (trials.spec.WorkloadSpec, autotuner.space.declaration_schema).
The answers are counted per operation from schemathesis's HAR report.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store, StudyState
from tests.api.service import TOKENS, make_server

CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
SERVED = ("fuzz-cluster", "fuzz-workload")
AUTH = {"Authorization": f"Bearer {TOKENS['admin']}"}


@pytest.fixture
def fuzz_server(tmp_path):
    # No scheduler (fuzzed studies must not run); executors that need no operator options.
    srv = make_server(tmp_path, AUTOTUNER_SCHEDULER="0", AUTOTUNER_EXECUTORS="local,replay")
    srv.start()
    publish_versions(Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}"))
    deadline = time.monotonic() + 30  # the service's config cache picks them up on its next refresh
    while not httpx.get(f"{srv.url}/v1/configs", headers=AUTH, timeout=5).json():
        assert time.monotonic() < deadline, "the published config never showed in GET /v1/configs"
        time.sleep(0.2)
    yield srv
    srv.kill()


def publish_versions(store: Store) -> None:
    """A served config with earlier versions (each rollback takes one), published by a finished study:
    what the config routes (pin, rollback, revalidate, validations, history) act on."""
    cluster, workload = SERVED
    spec = {"name": workload, "tables": []}
    study = store.create_study(name="fuzz-study", cluster=cluster, workload_name=workload, workload_spec=spec,
                               space={}, settings={}, state=StudyState.DONE)  # fmt: skip
    # a failed launch with its log tail: what GET .../launches/{launch_id} answers (followed from the listing)
    launch = store.add_launch(
        study_id=study.id, kind="search", env={}, spec={"candidates": []}, executor="replay"
    )
    store.update_launch(launch.id, state="failed", error="NCCL error", log_tail="NCCL WARN connect refused")
    for threads in ("1", "2", "4", "8", "16"):
        store.publish_config(cluster=cluster, workload=workload, nodes=1, env={"NCCL_NSOCKS_PERTHREAD": threads},
                             fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise",
                             study_id=study.id)  # fmt: skip


def answers_per_operation(openapi: dict[str, Any], har: dict[str, Any]) -> dict[str, Counter[int]]:
    """Status codes per documented operation ("GET /v1/studies/{study_id}"), from a HAR report."""
    routes = [
        (method.upper(), path, re.compile("^" + re.sub(r"\{[^/}]+\}", "[^/]+", path) + "$"))
        for path, item in openapi["paths"].items()
        for method in item
    ]
    counts: dict[str, Counter[int]] = {f"{method} {path}": Counter() for method, path, _ in routes}
    for entry in har["log"]["entries"]:
        method, path = entry["request"]["method"], urlsplit(entry["request"]["url"]).path
        matches = [p for m, p, rx in routes if m == method and rx.match(path)]
        if matches:  # the fewest parameters first: a literal segment wins over a template
            label = f"{method} {min(matches, key=lambda p: p.count('{'))}"
            counts[label][entry["response"]["status"]] += 1
    return counts


def test_answers_are_counted_per_documented_operation():
    openapi: dict[str, Any] = {
        "paths": {"/v1/studies": {"get": {}}, "/v1/studies/{study_id}": {"get": {}, "post": {}}}
    }
    entry = {"request": {"method": "GET", "url": "http://h/v1/studies/7?x=1"}, "response": {"status": 200}}
    counts = answers_per_operation(openapi, {"log": {"entries": [entry]}})
    assert counts == {
        "GET /v1/studies": Counter(),
        "GET /v1/studies/{study_id}": Counter({200: 1}),
        "POST /v1/studies/{study_id}": Counter(),
    }


@pytest.mark.slow
def test_schemathesis_reaches_every_operation_and_finds_no_server_error(fuzz_server, tmp_path):
    report = tmp_path / "report"
    # --max-time: fuzzing and stateful runs repeat until it is spent (a single stateful pass follows
    # from a dozen to two hundred scenarios, depending on what the fuzzing left on the server)
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", f"{fuzz_server.url}/openapi.json",
           "-H", f"Authorization: Bearer {TOKENS['admin']}", "--checks", CHECKS,
           "--phases", "examples,fuzzing,stateful", "--max-time", "25", "--seed", "20261202", "-w", "2",
           "--report", "junit,har", "--report-dir", str(report)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    openapi = httpx.get(f"{fuzz_server.url}/openapi.json").json()
    (har,) = report.glob("har-*.json")
    counts = answers_per_operation(openapi, json.loads(har.read_text()))
    print(json.dumps({op: dict(sorted(c.items())) for op, c in sorted(counts.items())}, indent=1))
    assert len(counts) == 19
    assert sum(sum(c.values()) for c in counts.values()) > 1000
    assert {op: n for op, c in counts.items() if (n := sum(v for s, v in c.items() if s >= 500))} == {}
    assert sorted(op for op, c in counts.items() if set(c) <= {404}) == []  # reached, not only "no such id"
    assert (
        sorted(op for op, c in counts.items() if not any(200 <= s < 300 for s in c)) == []
    )  # and did its job


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(Settings(data_dir=Path(tmp_path), tokens="r:read", scheduler=False))) as c:
        yield c


def test_the_links_name_documented_operations_with_their_parameters(client):
    """Every link of /openapi.json points at a documented operation and gives each of its path
    parameters, and a request body where the operation takes one."""
    doc = client.get("/openapi.json").json()
    links = [
        (f"{method.upper()} {path} -> {name}", link)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        for answer in op["responses"].values()
        for name, link in answer.get("links", {}).items()
    ]
    assert len(links) >= 20
    for label, link in links:
        target_path, target_method = link["operationRef"].removeprefix("#/paths/").rsplit("/", 1)
        target = doc["paths"][target_path.replace("~1", "/").replace("~0", "~")][target_method]
        wanted = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
        assert {key.removeprefix("path.") for key in link["parameters"]} == wanted, label
        assert ("requestBody" in link) == ("requestBody" in target), label
    studies = doc["paths"]["/v1/studies"]["post"]["responses"]["201"]["links"]
    assert set(studies) == {"GetStudy", "CancelStudy", "StudyTrials", "StudyLaunches", "StudyInsights"}
