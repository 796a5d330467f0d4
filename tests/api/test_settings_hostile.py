"""The service's own settings, as an operator may mistype them: each refused at start, naming the
setting, the value and the rule; never a traceback, never a service running on its defaults in silence.
And what a study shows its readers of the settings only the operator gives (executor options)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.schemas import HIDDEN
from api.settings import Settings
from tests.api.service import replay_study_body
from tests.helpers import LANDSCAPE, REPO


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("AUTOTUNER_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("AUTOTUNER_CONFIG_REFRESH_S", "nan", "config_refresh_s"),
        ("AUTOTUNER_CONFIG_REFRESH_S", "inf", "config_refresh_s"),
        ("AUTOTUNER_CONFIG_REFRESH_S", "-5", "greater than 0"),
        ("AUTOTUNER_CONFIG_REFRESH_S", "0", "greater than 0"),
        ("AUTOTUNER_READY_TIMEOUT_S", "0", "AUTOTUNER_READY_TIMEOUT_S='0': seconds above 0 and at most 60"),
        ("AUTOTUNER_READY_TIMEOUT_S", "-1", "AUTOTUNER_READY_TIMEOUT_S='-1'"),
        ("AUTOTUNER_READY_TIMEOUT_S", "nan", "AUTOTUNER_READY_TIMEOUT_S='nan'"),
        ("AUTOTUNER_READY_TIMEOUT_S", "inf", "AUTOTUNER_READY_TIMEOUT_S='inf'"),
        ("AUTOTUNER_READY_TIMEOUT_S", "61", "AUTOTUNER_READY_TIMEOUT_S='61'"),
        ("AUTOTUNER_READY_TIMEOUT_S", "3s", "AUTOTUNER_READY_TIMEOUT_S='3s'"),
        ("AUTOTUNER_PORT", "99999", "less than or equal to 65535"),
        ("AUTOTUNER_PORT", "-1", "greater than or equal to 1"),
        ("AUTOTUNER_EXECUTOR_OPTIONS", '{"a": ' * 5000 + "{}" + "}" * 5000, "nested too deeply"),
        ("AUTOTUNER_EXECUTOR_OPTIONS", '{"slurm": {"partiton": "gpu"}}', "did you mean 'partition'"),
        ("AUTOTUNER_EXECUTOR_OPTIONS", '{"slrum": {"partition": "gpu"}}', "unknown executor 'slrum'"),
        ("AUTOTUNER_EXECUTOR_OPTIONS", '{"replay": {"landscape": "x.json", "seed": 3}}', "each study's own"),
        (
            "AUTOTUNER_EXECUTORS",
            "local,kubernets",
            "unknown executor 'kubernets' (did you mean 'kubernetes'?)",
        ),
    ],
)
def test_a_bad_setting_is_refused_naming_it(monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        Settings()


def test_a_settings_file_that_is_not_there_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOTUNER_SETTINGS_FILE", str(tmp_path / "settings.evn"))
    with pytest.raises(ValueError, match="settings.evn: no such file"):
        Settings()
    monkeypatch.setenv("AUTOTUNER_SETTINGS_FILE", str(tmp_path))
    with pytest.raises(ValueError, match="not a regular file"):
        Settings()


def test_a_misspelt_setting_in_the_file_is_refused_with_the_nearest(monkeypatch, tmp_path):
    path = tmp_path / "autotuner.env"
    path.write_text("AUTOTUNER_TOKEN=secret:write\nAUTOTUNER_LEASE_S=30\nHTTPS_PROXY=http://proxy:3128\n")
    monkeypatch.setenv("AUTOTUNER_SETTINGS_FILE", str(path))
    with pytest.raises(
        ValueError,
        match=r"AUTOTUNER_TOKEN is not a setting of the service \(did you mean AUTOTUNER_TOKENS\?\)",
    ):
        Settings()
    # what the processes read from their environment, and other programs' variables, may sit there too
    path.write_text(
        "AUTOTUNER_TOKENS=secret:write\nAUTOTUNER_LEASE_S=30\nAUTOTUNER_MAX_QUEUED=5\nHTTPS_PROXY=x\n"
    )
    assert Settings().token_scopes == {"secret": "write"}


def test_caps_and_the_lease_in_the_settings_file_alone_are_said_to_be_not_in_force(
    monkeypatch, tmp_path, caplog
):
    path = tmp_path / "autotuner.env"
    path.write_text("AUTOTUNER_TOKENS=secret:write\nAUTOTUNER_LEASE_S=30\nAUTOTUNER_MAX_QUEUED=5\n")
    monkeypatch.setenv("AUTOTUNER_SETTINGS_FILE", str(path))
    monkeypatch.delenv("AUTOTUNER_LEASE_S", raising=False)
    monkeypatch.setenv("AUTOTUNER_MAX_QUEUED", "5")  # also in the environment (an EnvironmentFile): in force
    with caplog.at_level("WARNING", logger="autotuner.api"):
        Settings()
    [warning] = [r.getMessage() for r in caplog.records if "not in force" in r.getMessage()]
    assert "AUTOTUNER_LEASE_S not in force" in warning
    assert "AUTOTUNER_MAX_QUEUED" not in warning


def test_the_settings_file_is_read_when_named_after_import(monkeypatch, tmp_path):
    path = tmp_path / "autotuner.env"
    path.write_text(f"AUTOTUNER_DATA_DIR={tmp_path / 'data'}\n")
    monkeypatch.setenv("AUTOTUNER_SETTINGS_FILE", str(path))
    assert Settings().data_dir == tmp_path / "data"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"AUTOTUNER_LEASE_S": "abc"}, "AUTOTUNER_LEASE_S='abc': seconds from 1 to 86400"),
        ({"AUTOTUNER_LEASE_S": "nan"}, "AUTOTUNER_LEASE_S='nan'"),
        ({"AUTOTUNER_LEASE_S": "0"}, "AUTOTUNER_LEASE_S='0'"),
        ({"AUTOTUNER_MAX_QUEUED": "9" * 5000}, "AUTOTUNER_MAX_QUEUED='99999"),
        ({"AUTOTUNER_PORT": "99999"}, "less than or equal to 65535"),
    ],
)
def test_the_commands_say_what_setting_is_wrong_without_a_traceback(tmp_path, env, says):
    """A real process: the lease is read as the engine is imported, before any command runs."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    proc = subprocess.run([sys.executable, "-m", "autotuner", "serve", "--no-scheduler"], cwd=REPO,
                          env={**clean, "AUTOTUNER_DATA_DIR": str(tmp_path), **env}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr


def test_readers_see_the_names_of_the_operators_executor_options_not_their_values(tmp_path):
    options = {"replay": {"landscape": str(LANDSCAPE), "delay_s": 0.0}}
    settings = Settings(data_dir=tmp_path, tokens="w:write,r:read", scheduler=False,
                        executor_options=json.dumps(options))  # fmt: skip
    with TestClient(create_app(settings)) as client:
        created = client.post(
            "/v1/studies", json=replay_study_body("s"), headers={"Authorization": "Bearer w"}
        )
        assert created.status_code == 201, created.text
        for path in (f"/v1/studies/{created.json()['id']}", "/v1/studies"):
            body = client.get(path, headers={"Authorization": "Bearer r"}).json()
            study = body["data"][0] if "data" in body else body
            assert study["settings"]["executor_options"] == {"landscape": HIDDEN, "delay_s": HIDDEN}
            assert str(LANDSCAPE) not in json.dumps(body)


@pytest.mark.parametrize(
    ("tokens", "says"),
    [
        ("jobs:read,s3cr3tXq9Zpw", "AUTOTUNER_TOKENS entry 2 (scope not shown)"),  # no scope
        ("jobs:read,,s3cr3tXq9Zpw:reed", "AUTOTUNER_TOKENS entry 3 (scope 'reed')"),  # a typo is shown
        ("s3cr3t:Xq9Zpw", "AUTOTUNER_TOKENS entry 1 (scope not shown)"),  # after its colon: the token's end
    ],
)
def test_a_malformed_token_entry_is_named_by_its_place_never_by_its_secret(tmp_path, tokens, says):
    """The entry was named by its first four characters: those of a secret token, in the log."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    proc = subprocess.run([sys.executable, "-m", "autotuner", "serve", "--no-scheduler"], cwd=REPO,
                          env={**clean, "AUTOTUNER_DATA_DIR": str(tmp_path), "AUTOTUNER_TOKENS": tokens},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr
    assert "s3cr" not in proc.stderr
    assert "Xq9Z" not in proc.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [("AUTOTUNER_TOKENS", "jobs:read,s3cr3tXq9Zpw:wirte"), ("AUTOTUNER_PORT", "s3cr3tXq9Zpw")],
)
def test_a_settings_error_never_holds_the_value_it_refused(monkeypatch, name, value):
    """pydantic's own message quotes the input (`input_value='...'`): every token, or a password, in a
    traceback of `uvicorn --factory api.app:app_from_env`."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name.removeprefix("AUTOTUNER_").lower()) as refused:
        Settings()
    assert "Xq9Z" not in str(refused.value)
