"""A study's `workload` over REST is the trial spec's own (trials.spec.WorkloadSpec): documented with
its schema in /openapi.json, refused in the words the trial and the CLI use, at the field at fault."""

from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.space import PRESETS
from autotuner.store import Store
from tests.api.service import replay_study_body
from tests.helpers import LANDSCAPE
from trials.spec import SpecError, WorkloadSpec, parse_workload


@pytest.fixture
def client(tmp_path):
    options = json.dumps({"replay": {"landscape": str(LANDSCAPE)}})
    s = Settings(data_dir=tmp_path, tokens="w:write", scheduler=False, executor_options=options)
    with TestClient(create_app(s), headers={"Authorization": "Bearer w"}) as c:
        yield c


def with_workload(change, name="w"):
    body = replay_study_body(name)
    change(body["workload"])
    return body


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        (lambda w: w["tables"][0].__setitem__("embedding_dim", -1), ["tables", 0, "embedding_dim"]),
        (lambda w: w["tables"][1].__setitem__("pooling_factor", 2.5), ["tables", 1, "pooling_factor"]),
        (lambda w: w.__setitem__("sharding", "diagonal"), ["sharding"]),
        (lambda w: w.pop("tables"), ["tables"]),
        (lambda w: w.__setitem__("tables", []), ["tables"]),
        (lambda w: w.__setitem__("NCCL_BUFFSIZE", "1"), ["NCCL_BUFFSIZE"]),
        (lambda w: w.__setitem__("optimizer", []), ["optimizer"]),
        (
            lambda w: w.update(compute_kernel="dense", optimizer={"embedding": "exact_rowwise_adagrad"}),
            ["optimizer", "embedding"],
        ),
        (lambda w: w.update(sharding="row_wise", comm_precision=["int8", "int8"]), ["comm_precision"]),
        (lambda w: w.__setitem__("comm_precision", ["fp16"]), ["comm_precision"]),
        (
            lambda w: w.__setitem__("dense", {"in_features": 13, "arch": [64, 16], "over_arch": [16, 1]}),
            ["dense", "arch"],
        ),
    ],
)
def test_rest_refuses_a_workload_as_the_trial_does(client, change, loc):
    body = with_workload(change)
    response = client.post("/v1/studies", json=body)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "workload", *loc]
    with pytest.raises(SpecError) as trial:
        parse_workload(body["workload"])
    assert error["msg"] == trial.value.problem  # the same one line the trial and `autotuner tune` print
    assert "\n" not in error["msg"]


def test_a_workload_is_stored_as_the_request_gave_it(client, tmp_path):
    body = replay_study_body("as-given")
    workload = copy.deepcopy(body["workload"])
    assert client.post("/v1/studies", json=body).status_code == 201
    stored = Store(f"sqlite:///{tmp_path / 'autotuner.db'}").study("as-given")
    assert stored is not None
    assert stored.workload.spec == workload  # no defaults filled in


def test_openapi_documents_the_workload_with_the_specs_schema(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    ref = schemas["StudyCreate"]["properties"]["workload"]["$ref"]
    documented = schemas[ref.rsplit("/", 1)[1]]
    spec = WorkloadSpec.model_json_schema()
    assert documented["additionalProperties"] is False
    assert set(documented["properties"]) == set(spec["properties"])
    assert documented["required"] == spec["required"]
    assert documented["properties"]["sharding"]["enum"] == spec["properties"]["sharding"]["enum"]
    # the name under the one rule for names (autotuner.names), which REST checks
    assert documented["properties"]["name"]["pattern"].startswith("^[A-Za-z0-9]")
    table = schemas["TableSpec"]["properties"]["embedding_dim"]
    assert (table["minimum"], table["maximum"]) == (1, 65536)


def test_openapi_documents_the_space_as_load_space_takes_it(client):
    space = client.get("/openapi.json").json()["components"]["schemas"]["StudyCreate"]["properties"]["space"]
    obj, preset = space["anyOf"]
    assert set(preset["enum"]) == set(PRESETS)
    assert obj["additionalProperties"] is False
    assert "NCCL_NSOCKS_PERTHREAD" in obj["properties"]["env"]["propertyNames"]["enum"]
    assert obj["properties"]["batch_sizes"]["uniqueItems"] is True
    assert "$ref" not in json.dumps(obj)
