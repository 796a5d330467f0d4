"""Caps (issue 21): a small request never buys unbounded work. Over a cap: 422 naming the limit, the
size asked for and the variable that raises it; a body over the limit 413, chunked or not; numbers
that are not finite 422, never a 500."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.space import IntRange, SearchSpace, SpaceError, load_space
from autotuner.space.checks import check_declaration
from tests.api.service import replay_study_body
from tests.helpers import LANDSCAPE

PRECISIONS = [
    [f, b] for f in ("fp32", "fp16", "bf16", "fp8", "int8") for b in ("fp32", "fp16", "bf16", "fp8", "int8")
]
# 16 KB of JSON, 25 x 960 x 4 x 1000 x 5 = 480,000,000 in-process candidates
HUGE_GRID = {
    "precisions": PRECISIONS,
    "batch_sizes": list(range(1, 961)),
    "sharding": ["table_wise", "row_wise", "table_row_wise", "column_wise"],
    "num_threads": list(range(1, 1001)),
    "pipelines": ["none", "base", "sparse_dist", "semi_sync", "fused_sparse_dist"],
    "allow_batch_change": True,
}


@pytest.fixture
def client(tmp_path):
    s = Settings(data_dir=tmp_path, tokens="w:write,a:admin", scheduler=False,
                 executor_options=json.dumps({"replay": {"landscape": str(LANDSCAPE)}}))  # fmt: skip
    with TestClient(create_app(s), headers={"Authorization": "Bearer w"}) as c:
        yield c


def post(client, name="s", space=None, **settings):
    body = replay_study_body(name, **settings)
    if space is not None:
        body["space"] = space
    return client.post("/v1/studies", content=json.dumps(body), headers={"content-type": "application/json"})


def test_a_huge_in_process_grid_is_refused_naming_the_limit_and_the_size(client):
    assert len(json.dumps(HUGE_GRID)) < 16_000
    response = post(client, space=HUGE_GRID)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "space"]
    assert error["type"] == "too-large"
    assert "480,000,000 candidates" in error["msg"]
    assert "100,000" in error["msg"]
    assert "AUTOTUNER_MAX_CANDIDATES" in error["msg"]


def test_the_grid_cap_can_be_raised_and_holds_at_the_limit(monkeypatch):
    space = {"precisions": PRECISIONS[:4], "batch_sizes": [64, 128, 256], "allow_batch_change": True}  # 12
    monkeypatch.setenv("AUTOTUNER_MAX_CANDIDATES", "12")
    assert len(load_space(space).inproc_points()) == 12
    monkeypatch.setenv("AUTOTUNER_MAX_CANDIDATES", "11")
    with pytest.raises(SpaceError, match="is 12 candidates, above the limit of 11"):
        load_space(space)


def test_too_many_values_in_one_dimension_is_refused_fast(client):
    space = {**replay_study_body()["space"], "batch_sizes": list(range(1, 24_001))}
    started = time.process_time()
    response = post(client, space=space)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "space", "batch_sizes"]
    assert "24,000" in error["msg"]
    assert "AUTOTUNER_MAX_DIM_VALUES" in error["msg"]
    assert time.process_time() - started < 1.0  # it was 1.6-2.7 s of CPU, quadratic in the list


@pytest.mark.parametrize("field", ["env", "fixed_env", "allow_risky"])
def test_too_many_variables_is_refused_before_each_is_looked_up(field):
    many = {f"NCCL_NOT_A_VAR_{i}": "1" for i in range(5_000)}
    value = list(many) if field == "allow_risky" else many
    with pytest.raises(SpaceError, match=f"number of .* in {field} is 5,000") as caught:
        load_space({field: value})
    assert len(caught.value.problems) == 1  # no did-you-mean for each of the 5,000


def test_the_duplicate_check_is_linear(monkeypatch):
    """With the cap raised, 100,000 values are checked in well under a second (the list-based
    check took 1.6 s for 24,000, and grows with the square)."""
    monkeypatch.setenv("AUTOTUNER_MAX_DIM_VALUES", "1000000")
    values = list(range(1, 100_001))
    started = time.process_time()
    problems, _ = check_declaration({"batch_sizes": values, "num_threads": [*values[:50_000], 7]})
    assert time.process_time() - started < 1.0
    assert [p.message for p in problems] == ["7 appears twice in num_threads"]


def test_a_precision_pair_given_twice_is_still_a_duplicate():
    with pytest.raises(SpaceError, match=r"\['fp16', 'fp16'\] appears twice"):
        load_space({"precisions": [["fp16", "fp16"], ["fp32", "fp32"], ["fp16", "fp16"]]})


def test_a_wide_stepped_range_is_not_listed_to_count_the_grid(monkeypatch):
    space = SearchSpace.model_validate({"env": {"NCCL_BUFFSIZE": {"low": 65536, "high": 1 << 28, "step": 1}}})
    monkeypatch.setattr(
        IntRange, "values", lambda self: pytest.fail("listed 268 million values to count them")
    )
    assert space.env_grid() is None  # sampled instead


def test_too_many_tables_is_refused_naming_the_limit(client, monkeypatch):
    monkeypatch.setenv("AUTOTUNER_MAX_TABLES", "8")
    body = replay_study_body("t")
    table = body["workload"]["tables"][0]
    body["workload"]["tables"] = [{**table, "name": f"t{i}"} for i in range(9)]
    response = client.post("/v1/studies", json=body)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "workload", "tables"]
    assert "AUTOTUNER_MAX_TABLES" in error["msg"]


@pytest.mark.parametrize("chunked", [True, False])
def test_a_body_over_the_limit_gets_413(client, chunked):
    body = b'{"name": "' + b"x" * (2 << 20) + b'"}'
    if chunked:

        def chunks():
            for start in range(0, len(body), 64 << 10):
                yield body[start : start + (64 << 10)]

        response = client.post("/v1/studies", content=chunks(), headers={"content-type": "application/json"})
    else:
        response = client.post("/v1/studies", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text
    assert "limit 1048576 bytes; raise it with AUTOTUNER_MAX_BODY_BYTES" in response.json()["detail"]


def test_a_chunked_body_under_the_limit_is_read_as_usual(client):
    body = json.dumps(replay_study_body("chunky")).encode()
    response = client.post("/v1/studies", content=iter([body[:100], body[100:]]),
                           headers={"content-type": "application/json"})  # fmt: skip
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["launch_timeout_s", "time_budget_s", "max_quant_error", "seed", "trials"])
def test_numbers_that_are_not_finite_get_422_not_500(client, number, where):
    body = replay_study_body("n")
    (body["space"] if where == "max_quant_error" else body["settings"])[where] = number
    response = client.post(
        "/v1/studies", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == where


@pytest.mark.parametrize(
    ("space", "loc"),
    [
        ({"batch_sizes": [-1]}, ["body", "space", "batch_sizes", 0]),
        ({"sharding": ["table_wise", "diagonal"]}, ["body", "space", "sharding", 1]),
        ({"bogus": 1}, ["body", "space", "bogus"]),
        ({"env": {"NCCL_NOT_A_VAR": [1]}}, ["body", "space", "env", "NCCL_NOT_A_VAR"]),
    ],
)
def test_a_space_problem_is_located_where_it_is_in_the_body(client, space, loc):
    """An item of a field (`batch_sizes[0]`) or an unknown field was put under env, pointing a
    client at a variable named 'batch_sizes[0]'."""
    response = post(client, space={**replay_study_body()["space"], **space})
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [loc]


def test_a_launch_of_more_nodes_than_the_operator_allows_is_refused(client, monkeypatch):
    for settings in ({"nnodes": 65}, {"scaling_nodes": [1, 2, 100]}):
        response = post(client, name=f"n{len(settings)}", **settings)
        assert response.status_code == 422, response.text
        assert "above the limit of 64 nodes (raise it with AUTOTUNER_MAX_NODES)" in response.text
        assert [e["loc"] for e in response.json()["detail"]] == [["body", "settings", *settings]]  # the field
    monkeypatch.setenv("AUTOTUNER_MAX_NODES", "100")
    response = post(client, name="raised", scaling_nodes=[1, 2, 100])
    assert "AUTOTUNER_MAX_NODES" not in response.text


# Workloads the per-table bound let through and the trial then tried to build (audit, by running them under a
# memory cap): each refused before a study exists, naming the size.
HUGE_WORKLOADS = {
    "tables": ({"tables": [{"name": f"t{i}", "num_embeddings": 1 << 29, "embedding_dim": 4, "pooling_factor": 1}
                           for i in range(9)]}, "72.0 GiB of fp32 rows in all, above the 64 GiB"),
    "mlp": ({"tables": [{"name": "t", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 1}],
             "dense": {"in_features": 13, "arch": [65536, 65536, 16], "over_arch": [1]}},
            "4,296,998,946 parameters (bottom MLP, dot interaction of 1 table(s), top MLP), above 268,435,456"),
    "inputs": ({"tables": [{"name": "t", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 100_000}],
                "batch_size": 1 << 20}, "GiB per rank, above 8 GiB"),
}  # fmt: skip


@pytest.mark.parametrize("huge", list(HUGE_WORKLOADS))
def test_a_workload_too_large_to_build_is_refused_naming_its_size(client, huge):
    shape, why = HUGE_WORKLOADS[huge]
    body = replay_study_body(huge)
    body["workload"] = {"name": "huge", **shape}
    body["space"] = {"precisions": [["fp32", "fp32"]]}
    response = client.post(
        "/v1/studies", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert why in response.text


def test_a_full_queue_refuses_with_429_until_a_study_leaves_it(client, monkeypatch):
    monkeypatch.setenv("AUTOTUNER_MAX_QUEUED", "3")
    queued = [post(client, name=f"s{i}") for i in range(3)]
    assert [r.status_code for r in queued] == [201, 201, 201]
    refused = post(client, name="s3")
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "60"
    assert refused.json()["detail"] == (
        "the queue with this study is 4 studies, above the limit of 3 studies (raise it with AUTOTUNER_MAX_QUEUED)"
        "; retry when one has started or been cancelled"
    )
    assert client.get("/v1/studies").json()["count"] == 3  # nothing stored for the refused one
    assert client.post(f"/v1/studies/{queued[0].json()['id']}/cancel").status_code == 200
    assert post(client, name="s3").status_code == 201


def test_a_convergence_check_whose_samples_a_rank_cannot_hold_is_refused_naming_the_size(client):
    """The check's ranks build their samples before the first step: 2^26 over 2 ranks (and up to 1.5x for
    a bigger batch) is 51 GiB a rank on this workload, where the trial would be killed with no result."""
    body = replay_study_body("samples", executor="local", quality_samples=1 << 26, nproc_per_node=2)
    body["workload"] = {"name": "dlrm", "tables": [{"name": "t", "num_embeddings": 1000, "embedding_dim": 16,
                        "pooling_factor": 64}], "dense": {"in_features": 13, "arch": [16], "over_arch": [1]}}  # fmt: skip
    body["space"] = {"precisions": [["fp32", "fp32"], ["fp16", "fp16"]]}
    response = client.post(
        "/v1/studies", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "settings"]
    assert error["msg"].startswith(
        "a convergence check of 100,663,296 training and 8,388,608 held-out samples over 2 rank(s) holds "
    )
    assert (
        "GiB of samples per rank (564 bytes each), above 8 GiB: fewer quality_samples, or more ranks"
        in error["msg"]
    )
    body["settings"]["quality_samples"] = 1 << 17  # the default: accepted
    assert client.post("/v1/studies", json=body).status_code == 201


LONE = "\\ud800"  # a JSON escape of half a UTF-16 pair: valid JSON text, no Unicode character


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/studies", f'{{"name": "{LONE}"}}'),
        ("/v1/lint", f'{{"env": {{"NCCL_DEBUG": "{LONE}"}}}}'),
        ("/v1/lint", f'{{"env": {{"{LONE}": "1"}}}}'),
        ("/v1/configs/c/w/revalidate", f'{{"reason": "{LONE}"}}'),
        ("/v1/configs/c/w/pin", f'{{"version": "{LONE}"}}'),
    ],
)
def test_a_lone_surrogate_anywhere_gets_an_answer_not_a_500(client, path, body):
    # a 422 echoes the input: Starlette encoded its answer as UTF-8, which a lone surrogate is not
    token = "a" if path.endswith("/pin") else "w"  # pinning is an admin's
    response = client.post(
        path, content=body, headers={"content-type": "application/json", "authorization": f"Bearer {token}"}
    )
    assert response.status_code in (200, 404, 422), response.text
    assert response.json()


@pytest.mark.parametrize(
    "space",
    [
        f'{{"env": {{"NCCL_NSOCKS_PERTHREAD": [1, 2]}}, "force_inert": ["{LONE}"]}}',
        f'{{"env": {{"{LONE}": [1]}}, "fixed_env": {{"{LONE}": "1"}}}}',
        f'{{"env": {{"{LONE}": [1, 2]}}}}',
        f'{{"env": {{"NCCL_NSOCKS_PERTHREAD": [1, 2]}}, "ladder": ["{LONE}"]}}',
    ],
)
def test_a_lone_surrogate_in_a_space_is_named_in_a_422(client, space):
    # a space's problem quoting the name: pydantic encoded the message as UTF-8 and answered 500
    body = json.dumps({**replay_study_body("surrogate-space"), "space": "@@"}).replace('"@@"', space)
    response = client.post("/v1/studies", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert "space" in json.dumps(response.json()["detail"])


def test_a_lone_surrogate_in_a_stored_name_is_listed_later(client):
    body = replay_study_body("surrogate")
    body["workload"]["tables"][0]["name"] = "t\ud800"
    raw = json.dumps(body)  # escaped as \ud800: json.dumps writes ASCII
    created = client.post("/v1/studies", content=raw, headers={"content-type": "application/json"})
    assert created.status_code in (201, 422), created.text
    listed = client.get("/v1/studies")
    assert listed.status_code == 200
    assert listed.json()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/configs/c1%2Fw1"),
        ("GET", "/v1/configs/c1%2fw1?format=env"),
        ("GET", "/v1/configs/c1/w1%2Fhistory"),
        ("POST", "/v1/configs/c1%2Fw1/rollback"),
        ("POST", "/v1/configs/c1%2Fw1/pin"),
    ],
)
def test_an_encoded_slash_in_a_name_names_nothing(client, method, path):
    """The router matched the decoded path: c1%2Fw1 served c1/w1, and rolled it back, a key never named."""
    store = client.app.state.store
    store.upsert_workload("w1", {})
    for threads in ("1", "2"):
        store.publish_config(cluster="c1", workload="w1", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": threads},
                             fwd_precision="fp32", bwd_precision="fp32", batch_size=512, sharding="table_wise",
                             evidence={})  # fmt: skip
    admin = {"authorization": "Bearer a"}
    response = client.request(
        method, path, json={"version": 1} if path.endswith("/pin") else {}, headers=admin
    )
    assert response.status_code == 422, response.text
    assert "%2F" in response.json()["detail"][0]["msg"]
    served = client.get("/v1/configs/c1/w1", headers=admin).json()
    assert (served["version"], served["pinned"]) == (2, False)  # nothing rolled back or pinned


@pytest.mark.parametrize("sent", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_not_sent_as_json_is_told_so(client, sent):
    """`curl -d` sends a form's type: the body was read as text and refused as "not a dictionary"."""
    headers = {"content-type": sent} if sent else {}
    body = b'{"env": {"NCCL_NSOCKS_PERTHREAD": "4"}}'
    response = client.post("/v1/lint", content=body, headers=headers)
    if sent is None and response.status_code == 200:
        return  # FastAPI at this project's floor reads a body sent with no type as JSON: nothing to tell
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert "send it with Content-Type: application/json" in error["msg"]
    assert (repr(sent) if sent else "no Content-Type") in error["msg"]
    ok = client.post("/v1/lint", content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text
