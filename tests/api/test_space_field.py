"""What `space` and `quality_data` may be over REST (issue 21): a preset's name or an inline object,
never a path on the server; a quality_data function only from the operator's allow-list."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.space import PRESETS
from tests.api.service import replay_study_body
from tests.helpers import LANDSCAPE

SECRET = "hunter2-secret-value"


def client_for(tmp_path, **settings) -> TestClient:
    s = Settings(data_dir=tmp_path, tokens="w:write", scheduler=False,
                 executor_options=json.dumps({"replay": {"landscape": str(LANDSCAPE)}}), **settings)  # fmt: skip
    return TestClient(create_app(s), headers={"Authorization": "Bearer w"})


@pytest.fixture
def client(tmp_path):
    with client_for(tmp_path) as c:
        yield c


def with_space(space, name="s"):
    return {**replay_study_body(name), "space": space}


@pytest.mark.parametrize("kind", ["yaml file", "json file", "missing file", "relative", "traversal", "dir"])
def test_a_path_is_never_read_and_the_error_says_nothing_of_it(client, tmp_path, kind):
    (tmp_path / "s.yaml").write_text(f"secret: {SECRET}\nenv: {{NCCL_BUFFSIZE: [{SECRET}]}}\n")
    (tmp_path / "s.json").write_text(json.dumps({SECRET: 1}))
    path = {"yaml file": tmp_path / "s.yaml", "json file": tmp_path / "s.json",
            "missing file": tmp_path / "none.yaml", "relative": "s.yaml",
            "traversal": "../../../../etc/passwd", "dir": tmp_path}[kind]  # fmt: skip
    response = client.post("/v1/studies", json=with_space(str(path)))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "space"]
    assert all(p in error["msg"] for p in PRESETS)
    assert "never read" in error["msg"]
    assert SECRET not in response.text
    assert "No such file" not in response.text
    assert "cannot read" not in response.text


def test_answers_for_a_file_that_exists_and_one_that_does_not_are_the_same(client, tmp_path):
    (tmp_path / "here.yaml").write_text("env: {}\n")
    here = client.post("/v1/studies", json=with_space(str(tmp_path / "here.yaml"))).json()["detail"][0]["msg"]
    gone = client.post("/v1/studies", json=with_space(str(tmp_path / "gone.yaml"))).json()["detail"][0]["msg"]
    assert here == gone


def test_a_preset_name_and_an_inline_space_are_accepted(client):
    assert client.post("/v1/studies", json=with_space("socket", "a")).status_code == 201
    inline = {"preset": "socket", "batch_sizes": [64], "force_inert": ["NCCL_NSOCKS_PERTHREAD"]}
    assert client.post("/v1/studies", json=with_space(inline, "b")).status_code == 201


def test_an_inline_preset_must_be_a_preset_name(client):
    response = client.post("/v1/studies", json=with_space({"preset": "/etc/passwd"}))
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert "unknown preset" in error["msg"]
    assert error["loc"] == ["body", "space", "preset"]  # the key given, not a variable of env named so


def test_quality_data_over_rest_is_refused_unless_the_operator_allows_it(client):
    space = {**replay_study_body()["space"], "quality_data": "os:getcwd"}
    response = client.post("/v1/studies", json=with_space(space))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "space", "quality_data"]
    assert "AUTOTUNER_QUALITY_DATA" in error["msg"]


def test_quality_data_the_operator_lists_is_accepted(tmp_path):
    space = {**replay_study_body()["space"], "quality_data": "mydata.loader:batches"}
    with client_for(tmp_path, quality_data="other:fn, mydata.loader:batches") as client:
        created = client.post("/v1/studies", json=with_space(space))
        assert created.status_code == 201, created.text
        assert created.json()["space"]["quality_data"] == "mydata.loader:batches"
        refused = client.post("/v1/studies", json=with_space({**space, "quality_data": "os:system"}, "t"))
        assert refused.status_code == 422
        assert "allowed: other:fn, mydata.loader:batches" in refused.text
