"""One settings schema: `autotuner tune` and `POST /v1/studies` accept and refuse the same values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from autotuner.cli.commands import app as cli
from autotuner.store import Store
from autotuner.tuning import RequestSettings, StudySettings
from tests.helpers import LANDSCAPE

RECORDED = json.loads(LANDSCAPE.read_text())
CASES = [
    tuple(c) for c in yaml.safe_load((Path(__file__).parent / "data" / "settings-cases.yaml").read_text())
]
FLAGS = {
    "nproc_per_node": "--nproc",
    "time_budget_s": "--time-budget",
    "launch_timeout_s": "--launch-timeout",
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("settings")
    # emulated nodes: a study asking for scaling_nodes [1, 2] is one the local executor can run
    settings = Settings(
        data_dir=tmp, tokens="w:write", scheduler=False, executor_options='{"local": {"nodes": "ranks"}}'
    )
    app = create_app(settings, store=Store(f"sqlite:///{tmp / 'at.db'}"))
    with TestClient(app, headers={"Authorization": "Bearer w"}) as c:
        yield c


@pytest.mark.parametrize(("field", "body_value", "cli_value", "accepted"), CASES)
def test_cli_and_api_agree(client, tmp_path, monkeypatch, field, body_value, cli_value, accepted):
    # the schema's bounds, on a host with memory for the most ranks they allow (this one has not: that
    # refusal is tests/executors/test_local.py's)
    monkeypatch.setattr("autotuner.executors.local.executor.available_bytes", lambda: 1 << 50)
    body = {"cluster": "c", "workload": RECORDED["workload"], "space": RECORDED["space"],
            "settings": {field: body_value}}  # fmt: skip
    answer = client.post("/v1/studies", json=body)
    assert answer.status_code == (201 if accepted else 422), answer.text
    if not accepted:
        assert field in json.dumps(answer.json()["detail"]) or "settings" in json.dumps(
            answer.json()["detail"]
        )

    flag = FLAGS.get(field, "--" + field.replace("_", "-"))
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(RECORDED["workload"]))
    # A space that does not exist: accepted settings get as far as the space, refused ones do not.
    args = ["tune", "--cluster", "c", "--workload", str(workload), "--space", "no-such-space", flag, cli_value,
            "--db", f"sqlite:///{tmp_path / 'at.db'}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    if accepted:
        assert "no such file or preset" in result.output, result.output
    else:
        assert "no such file or preset" not in result.output, result.output
        assert flag in result.output, result.output


def test_the_defaults_are_the_schemas():
    """What a body without settings gets is what `autotuner tune` without options gets."""
    from autotuner.cli.commands import _settings_options

    defaults = {p.name: p.default for p in _settings_options()}
    schema = RequestSettings()
    for name, value in schema.model_dump().items():
        assert defaults[name] == (",".join(map(str, value)) if isinstance(value, list) else value), name


@pytest.mark.parametrize(
    ("field", "value"),
    [("trials", "3"), ("trials", True), ("nproc_per_node", 2.5), ("publish", "no"), ("publish", 1),
     ("launch_timeout_s", "60"), ("scaling_nodes", "1,2"), ("scaling_nodes", ["1", 2])],
)  # fmt: skip
def test_a_request_of_the_wrong_json_type_is_refused_not_guessed(client, field, value):
    """A count given as "3" or true, a switch as "no": refused naming the field (they were read as 3, 1
    and False). The command line types its own options; the JSON body's types are the caller's."""
    body = {"cluster": "c", "workload": RECORDED["workload"], "space": RECORDED["space"],
            "settings": {field: value}}  # fmt: skip
    answer = client.post("/v1/studies", json=body)
    assert answer.status_code == 422, answer.text
    assert [e["loc"][2] for e in answer.json()["detail"]] == [field]


def test_a_whole_number_given_as_a_float_is_that_number(client):
    body = {"cluster": "c", "workload": RECORDED["workload"], "space": RECORDED["space"],
            "settings": {"trials": 3.0, "nproc_per_node": 2.0, "launch_timeout_s": 60}}  # fmt: skip
    answer = client.post("/v1/studies", json=body)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["settings"]["trials"], answer.json()["settings"]["nproc_per_node"]) == (3, 2)


@pytest.mark.parametrize(
    ("cli_values", "body", "accepted"),
    [
        (["--trials", "none", "--time-budget", "60"], {"trials": None, "time_budget_s": 60}, True),
        (["--trials", "None"], {"trials": None}, False),  # no budget at all: refused by both, naming it
        (["--trials", "many"], {"trials": "many"}, False),
    ],
)
def test_no_cap_on_search_launches_is_none_on_the_command_line_and_null_over_rest(client, tmp_path, cli_values,
                                                                                 body, accepted):  # fmt: skip
    answer = client.post("/v1/studies", json={"cluster": "c", "workload": RECORDED["workload"],
                                              "space": RECORDED["space"], "settings": body})  # fmt: skip
    assert answer.status_code == (201 if accepted else 422), answer.text
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(RECORDED["workload"]))
    args = ["tune", "--cluster", "c", "--workload", str(workload), "--space", "no-such-space", *cli_values,
            "--db", f"sqlite:///{tmp_path / 'at.db'}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    if accepted:  # as far as the space
        assert "no such file or preset" in said, said
    else:
        assert "--trials" in said, said
    if cli_values[1] == "None":
        assert "give a budget" in said, said


def test_a_study_that_would_serve_an_uncompared_change_is_refused_and_says_how_to_go_on(client, tmp_path):
    """Neither the confirmation nor the ladder: the search's best, one noisy measurement, would be served."""
    both_off = {"confirm_rounds": 0, "ladder_rounds": 0}
    body = {
        "cluster": "c",
        "workload": RECORDED["workload"],
        "space": RECORDED["space"],
        "settings": both_off,
    }
    answer = client.post("/v1/studies", json=body)
    assert answer.status_code == 422, answer.text
    said = json.dumps(answer.json()["detail"])
    assert "never compared with the baseline" in said, said
    assert "publish false" in said, said
    searched_only = {**body, "settings": {**both_off, "publish": False}}
    assert client.post("/v1/studies", json=searched_only).status_code == 201

    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(RECORDED["workload"]))
    args = ["tune", "--cluster", "c", "--workload", str(workload), "--space", "no-such-space", "--confirm-rounds",
            "0", "--ladder-rounds", "0", "--db", f"sqlite:///{tmp_path / 'at.db'}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--confirm-rounds and --ladder-rounds both 0" in result.output, result.output
    assert "--no-publish to search without serving" in result.output, result.output
    result = CliRunner().invoke(cli, [*args, "--no-publish"])
    assert "no such file or preset" in result.output, result.output  # past the settings
    # a study stored before the rule still loads (the engine labels what it publishes "not confirmed")
    assert StudySettings(**both_off).publish
