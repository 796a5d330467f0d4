"""One rule for every name (issue 21): matched whole, so a trailing newline never gets into the store,
where it would end up in a URL, a job name and an `AUTOTUNER_CONFIG=` line."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from autotuner.cli.commands import app
from autotuner.executors import make_executor
from autotuner.names import BadName, check_name, is_name
from autotuner.store import StudyState
from autotuner.tuning import StudyDriver, StudyError, create_study, study_settings
from autotuner.tuning.settings import RequestSettings
from tests.helpers import LANDSCAPE

WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]
BAD = ["small\n", "small\r", "\nsmall", "a/b", "../etc", "", "-x", "x" * 129, "sm all", "smäll", "a\0b"]


@pytest.mark.parametrize("name", BAD, ids=repr)
def test_a_bad_name_is_refused_whole(name):
    assert not is_name(name)
    with pytest.raises(BadName, match="workload name"):
        check_name("workload", name)


@pytest.mark.parametrize("name", ["small", "cpu-box", "a.b_c-1", "x" * 128, "7"])
def test_a_plain_name_passes(name):
    assert check_name("cluster", name) == name


def settings():
    return study_settings(RequestSettings(executor="replay", trials=1), workdir=None,
                          executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip


@pytest.mark.parametrize("field", ["cluster", "workload", "study"])
def test_create_study_refuses_a_trailing_newline_naming_the_field(store, field):
    kwargs = {"cluster": "cpu-box", "workload": dict(WORKLOAD), "name": "s1"}
    if field == "workload":
        kwargs["workload"]["name"] = "small\n"
    else:
        kwargs["cluster" if field == "cluster" else "name"] = "evil\n"
    with pytest.raises(StudyError, match=f"{field} name 'evil\\\\n'|{field} name 'small\\\\n'"):
        create_study(store, space="socket", settings=settings(), **kwargs)
    assert store.count_studies() == 0


def test_the_store_never_creates_a_bad_name(store):
    with pytest.raises(BadName, match="cluster name"):
        store.cluster("evil\n", create=True)
    with pytest.raises(BadName, match="workload name"):
        store.upsert_workload("small\n", {})
    with pytest.raises(BadName, match="cluster name"):
        store.publish_config(cluster="evil\n", workload="small", nodes=1, env={}, fwd_precision="fp32",
                             bwd_precision="fp32", batch_size=64, sharding="table_wise", evidence={})  # fmt: skip
    assert store.clusters() == []


def test_cli_tune_refuses_a_cluster_with_a_trailing_newline(tmp_path):
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(WORKLOAD))
    result = CliRunner().invoke(app, ["tune", "--cluster", "evil\n", "--workload", str(workload), "--space", "socket",
                                      "--db", f"sqlite:///{tmp_path / 'at.db'}"])  # fmt: skip
    assert result.exit_code == 2
    assert "cluster name 'evil\\n' is invalid" in result.output


@pytest.fixture
def client(tmp_path):
    s = Settings(data_dir=tmp_path, tokens="w:write", scheduler=False,
                 executor_options=json.dumps({"replay": {"landscape": str(LANDSCAPE)}}))  # fmt: skip
    with TestClient(create_app(s), headers={"Authorization": "Bearer w"}) as c:
        yield c


def body(**changes):
    return {"cluster": "cpu-box", "workload": dict(WORKLOAD), "space": "socket",
            "settings": {"executor": "replay", "trials": 1}, **changes}  # fmt: skip


def test_rest_refuses_a_workload_name_with_a_trailing_newline(client):
    response = client.post("/v1/studies", json=body(workload={**WORKLOAD, "name": "small\n"}))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "workload", "name"]
    assert "workload name" in error["msg"]


@pytest.mark.parametrize("field", ["cluster", "name"])
def test_rest_refuses_a_cluster_or_study_name_with_a_trailing_newline(client, field):
    response = client.post("/v1/studies", json=body(**{field: "evil\n"}))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", field]


def test_a_config_url_with_an_encoded_newline_is_refused(client):
    assert client.get("/v1/configs/cpu-box/small%0A").status_code == 422


def test_a_study_an_older_version_stored_with_a_bad_name_fails_saying_why(store):
    study = create_study(
        store, cluster="cpu-box", workload=dict(WORKLOAD), space="socket", settings=settings()
    )
    with store.engine.begin() as conn:  # what an older version let through
        conn.execute(text("UPDATE at_workloads SET name = :n"), {"n": "small\n"})
    done = StudyDriver(store, study.id, make_executor(settings())).run()
    assert done.state == StudyState.FAILED
    assert "workload name 'small\\n' is invalid" in done.error
    assert store.served_configs() == []
