"""A stored version that renders but does not fit the listing's schema (an env value stored as a number,
an lr_scale stored as text: an older version's row, or a hand's) is listed in history with `error`
naming it, and the other versions as they are: it failed the response's validation after the route
returned, and the whole history of its key was a bare 500."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store

FIELDS = dict(fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise", evidence={})
UNFIT = {
    "an env value stored as a number": (
        """UPDATE at_configs SET env = '{"NCCL_NSOCKS_PERTHREAD": 4}' WHERE id = :id""",
        "env",
    ),
    "an env value stored as null": (
        """UPDATE at_configs SET env = '{"NCCL_NSOCKS_PERTHREAD": null}' WHERE id = :id""",
        "env",
    ),
    "an lr_scale stored as text": ("UPDATE at_configs SET lr_scale = 'abc' WHERE id = :id", "lr_scale"),
}


@pytest.mark.parametrize("unfit", list(UNFIT))
def test_a_version_that_does_not_fit_the_schema_is_listed_with_why(tmp_path, unfit):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("small", {})
    for _ in range(2):  # v1, then v2 (the one made unfit)
        store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             **FIELDS)  # fmt: skip
    sql, field = UNFIT[unfit]
    with store.engine.begin() as conn:
        conn.execute(text(sql), {"id": conn.scalar(text("SELECT max(id) FROM at_configs"))})
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        response = client.get("/v1/configs/cpu-box/small/history")
    store.dispose()
    assert response.status_code == 200, response.text
    v2, v1 = response.json()
    assert (v2["version"], v1["version"]) == (2, 1)
    assert field in (v2["error"] or ""), v2
    assert v1["error"] is None
    assert v1["env"] == {"NCCL_NSOCKS_PERTHREAD": "4"}
