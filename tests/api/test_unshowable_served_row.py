"""A served version whose stored data cannot be read (a date that is no date, an env that is not JSON
or a list: an older version's row, or a hand's) is said as such by `GET .../validations` and by
`autotuner configs show`, naming the version and the column, as the config fetch says it: they were
a bare 'Internal Server Error' and a traceback."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from autotuner.cli.commands import app
from autotuner.store import Store

FIELDS = dict(fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise", evidence={})
BAD = {
    "created_at is no date": ("UPDATE at_configs SET created_at = 'garbage'", "created_at"),
    "env is not JSON": ("UPDATE at_configs SET env = 'not json'", "env"),
    "env is a list": ("UPDATE at_configs SET env = '[1, 2]'", "TypeError"),
}


def planted(tmp_path, bad: str) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("small", {})
    store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                         **FIELDS)  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(text(BAD[bad][0]))
        conn.execute(text("UPDATE at_config_generation SET generation = generation + 1"))
    return store


@pytest.mark.parametrize("bad", list(BAD))
def test_validations_says_which_version_cannot_be_shown_and_why(tmp_path, bad):
    store = planted(tmp_path, bad)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"},
                    raise_server_exceptions=False) as client:  # fmt: skip
        response = client.get("/v1/configs/cpu-box/small/validations")
    store.dispose()
    assert response.status_code == 500
    detail = response.json()["detail"]  # not the bare text of an unhandled error
    assert "(v1, 1 node(s)) cannot be shown" in detail, detail
    assert BAD[bad][1] in detail, detail


@pytest.mark.parametrize("bad", list(BAD))
def test_configs_show_says_which_version_cannot_be_shown_and_why(tmp_path, bad):
    planted(tmp_path, bad).dispose()
    result = CliRunner().invoke(
        app, ["configs", "show", "cpu-box", "small", "--db", f"sqlite:///{tmp_path / 'at.db'}"]
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "cannot be shown" in result.output, result.output
    assert BAD[bad][1] in result.output, result.output
