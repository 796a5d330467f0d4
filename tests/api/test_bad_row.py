"""One bad row never stops serving (issue 21): a config that cannot be rendered (a name with a newline
an older version stored, a tampered env, a column that is not JSON) is answered 500 on its own key and
counted in /metrics; every other config is served, and the service starts with it in the store."""

from __future__ import annotations

import re
import signal

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.api.service import TOKENS, make_server

FIELDS = dict(fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise", evidence={})
GOOD = [("cpu-box", "small"), ("cpu-box", "large"), ("gpu-box", "small")]
# Each: what an older version (or someone with the database) left in a row of workload "bad".
BAD_ROWS = {
    "newline in the cluster name": "UPDATE at_clusters SET name = 'evil' || char(10) WHERE name = 'evil'",
    "a loader variable in env": """UPDATE at_configs SET env = '{"LD_PRELOAD": "/tmp/evil.so"}' WHERE {bad}""",
    "a newline in a value": """UPDATE at_configs SET env = '{"NCCL_SOCKET_IFNAME": "a\\nb"}' WHERE {bad}""",
    "a name with '='": """UPDATE at_configs SET env = '{"A=B": "1"}' WHERE {bad}""",
    "env is not JSON": "UPDATE at_configs SET env = 'not json' WHERE {bad}",
    "env is a list": "UPDATE at_configs SET env = '[1, 2]' WHERE {bad}",
    # the config's own fields set AUTOTUNER_*; from env one would be served where its field is empty
    "an AUTOTUNER_ variable in env": """UPDATE at_configs SET env = '{"AUTOTUNER_NUM_THREADS": "4"}' WHERE {bad}""",
    # sqlite3 raised on the whole query: every key answered 503, "the store did not answer"
    "a byte not UTF-8 in the cluster name": "UPDATE at_clusters SET name = 'evil' || x'ff' WHERE name = 'evil'",
    "a byte not UTF-8 in a value": """UPDATE at_configs SET env = '{"NCCL_SOCKET_IFNAME": "eth' || x'ff' || '"}'
                                      WHERE {bad}""",
}
UNNAMEABLE = ("newline in the cluster name", "a byte not UTF-8 in the cluster name")  # no URL names its key
BAD_ID = "id = (SELECT max(id) FROM at_configs)"


def populate(store: Store, bad_row: str) -> None:
    for workload in ("small", "large", "bad"):
        store.upsert_workload(workload, {})
    for cluster, workload in GOOD:
        store.publish_config(cluster=cluster, workload=workload, nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                             **FIELDS)  # fmt: skip
    store.publish_config(cluster="evil", workload="bad", nodes=1, env={}, **FIELDS)
    with store.engine.begin() as conn:
        conn.execute(text(BAD_ROWS[bad_row].replace("{bad}", BAD_ID)))
        conn.execute(text("UPDATE at_config_generation SET generation = generation + 1"))


def unservable(metrics_text: str) -> float:
    match = re.search(r"^autotuner_configs_unservable (\S+)$", metrics_text, re.M)
    assert match, metrics_text
    return float(match.group(1))


@pytest.mark.parametrize("bad_row", list(BAD_ROWS))
def test_every_other_config_is_served_and_the_bad_one_says_why(tmp_path, bad_row):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    populate(store, bad_row)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        for cluster, workload in GOOD:
            for fmt in ("json", "env", "slurm"):
                response = client.get(f"/v1/configs/{cluster}/{workload}", params={"format": fmt})
                assert response.status_code == 200, (cluster, workload, fmt, response.text)
        listing = client.get("/v1/configs").json()
        assert sorted((c["cluster"], c["workload"]) for c in listing) == sorted(GOOD)
        assert unservable(client.get("/metrics").text) == 1
        if bad_row not in UNNAMEABLE:
            response = client.get("/v1/configs/evil/bad")
            assert response.status_code == 500
            assert "cannot be served" in response.json()["detail"]
    store.dispose()


def test_a_byte_not_utf8_in_a_row_it_serves_or_lists_stops_nothing(tmp_path):
    """In a config's note (served as is) and a study's name: read as U+FFFD, shown, and everything
    else served and listed (one row stopped the config cache, the studies listing and /metrics)."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    populate(store, "a name with '='")
    for name in ("fine", "edited"):
        store.create_study(name=name, cluster="cpu-box", workload_name="plain", workload_spec={}, space={},
                           settings={}, state="done")  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE at_configs SET note = 'hand-edited ' || x'ff' WHERE {BAD_ID}"))
        conn.execute(text("UPDATE at_config_generation SET generation = generation + 1"))
        conn.execute(text("UPDATE at_studies SET name = 'edited' || x'ff', state = 'done' || x'ff' "
                          "WHERE name = 'edited'"))  # fmt: skip
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        for cluster, workload in GOOD:
            assert client.get(f"/v1/configs/{cluster}/{workload}").status_code == 200
        assert unservable(client.get("/metrics").text) == 1  # the "A=B" env of the edited row
        listed = client.get("/v1/studies")
        assert listed.status_code == 200, listed.text
        assert sorted((s["name"], s["state"]) for s in listed.json()["data"]) == [
            ("edited\ufffd", "done\ufffd"),
            ("fine", "done"),
        ]
        assert client.get("/metrics").status_code == 200  # studies counted by state, the odd one too
    store.dispose()


def test_the_service_starts_and_restarts_with_a_bad_row_in_the_store(tmp_path):
    server = make_server(tmp_path)
    store = Store(f"sqlite:///{server.data_dir / 'autotuner.db'}")
    populate(store, "newline in the cluster name")
    store.dispose()
    for _ in range(2):  # a start, then a restart, each with the row already there
        server.start()
        try:
            client = server.client("read")
            for cluster, workload in GOOD:
                assert client.get(f"/v1/configs/{cluster}/{workload}").status_code == 200
            assert (
                unservable(client.get("/metrics", headers={"Authorization": f"Bearer {TOKENS['read']}"}).text)
                == 1
            )
        finally:
            server.kill(signal.SIGTERM)
    assert "cannot be served" in server.log.read_text()


@pytest.mark.parametrize("fmt", ["env", "slurm"])
def test_what_a_config_was_validated_on_is_said_in_one_comment_line(tmp_path, fmt):
    """The note for a job on another stack quoted the stored fingerprint as it was: a newline in a
    trial's driver string put a bare `export LD_PRELOAD=...` line into the answer."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("small", {})
    evil = {"driver": "550.1\nexport LD_PRELOAD=/tmp/evil.so\n#", "device": "cuda", "device_name": "H100"}
    store.update_fingerprint(store.cluster("gpu-box", create=True).id, evil)  # as a trial recorded it
    store.publish_config(
        cluster="gpu-box", workload="small", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"}, **FIELDS
    )
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        response = client.get("/v1/configs/gpu-box/small", params={"format": fmt},
                              headers={"X-Autotuner-Fingerprint": "driver=570.86&gpu=H100"})  # fmt: skip
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    exported = sorted(line.split("=")[0].split()[-1] for line in lines if not line.startswith("#"))
    assert exported == sorted(["NCCL_NSOCKS_PERTHREAD", "AUTOTUNER_BATCH_SIZE", "AUTOTUNER_BWD_PRECISION",
                               "AUTOTUNER_CONFIG", "AUTOTUNER_FWD_PRECISION", "AUTOTUNER_SHARDING"]), lines  # fmt: skip
    (note,) = [line for line in lines if "was validated on" in line]
    assert "550.1\\x0aexport LD_PRELOAD" in note
    store.dispose()


def test_a_version_deleted_by_hand_is_no_longer_served(store):
    """Deleting the row is the documented remedy for one that cannot be served; it never bumped the
    generation, so every service kept answering the deleted version until some other publish."""
    from api.cache import ConfigCache

    store.upsert_workload("small", {})
    for _ in range(2):
        store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, **FIELDS)
    cache = ConfigCache(store, refresh_s=3600)
    cache.refresh()
    assert cache.get("cpu-box", "small", 1).config["version"] == 2
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM at_configs WHERE version = 2"))
    cache.refresh()
    assert cache.get("cpu-box", "small", 1).config["version"] == 1
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM at_configs"))
    cache.refresh()
    assert cache.get("cpu-box", "small", 1) is None


@pytest.mark.parametrize("bad_row", ["env is a list", "env is not JSON"])
def test_a_pin_or_rollback_onto_a_version_that_cannot_be_served_changes_nothing(tmp_path, bad_row):
    """It was committed, then answered 500: the admin was told it failed, and the key, served
    before, now answered 500 to every job."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("small", {})
    for _ in range(2):
        store.publish_config(
            cluster="cpu-box", workload="small", nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"}, **FIELDS
        )
    with store.engine.begin() as conn:
        conn.execute(text(BAD_ROWS[bad_row].replace("{bad}", "version = 1")))
    settings = Settings(data_dir=tmp_path, tokens="a-token:admin", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer a-token"}) as client:
        for path, body in (("rollback", {"nodes": 1}), ("pin", {"nodes": 1, "version": 1})):
            response = client.post(f"/v1/configs/cpu-box/small/{path}", json=body)
            assert response.status_code == 409, (path, response.text)
            assert "nothing changed" in response.json()["detail"]
            served = client.get("/v1/configs/cpu-box/small")
            assert (served.status_code, served.json()["version"], served.json()["pinned"]) == (200, 2, False)
        pin = "/v1/configs/cpu-box/small/pin"
        for lax in (True, "2", 2.5):  # `true` and "2" were read as versions 1 and 2
            assert client.post(pin, json={"nodes": 1, "version": lax}).status_code == 422, lax
        # JSON has one number type: 2.0 is 2, in these bodies as in a study's settings (it was a 422)
        assert client.post(pin, json={"nodes": 1.0, "version": 2.0}).status_code == 200
        served = client.get("/v1/configs/cpu-box/small").json()
        assert (served["version"], served["pinned"]) == (2, True)
        assert client.post("/v1/configs/cpu-box/small/rollback", json={"nodes": 1.0}).status_code != 422
    store.dispose()


def test_one_config_whose_evidence_cannot_be_read_is_listed_without_its_claim(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("small", {})
    store.upsert_workload("large", {})
    store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, **FIELDS)
    bad = {**FIELDS, "evidence": {"speedup": 1.2, "ladder": [{"step": "env", "cumulative": 1.2}]}}
    store.publish_config(cluster="cpu-box", workload="large", nodes=1, env={}, **bad)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        listing = client.get("/v1/configs")
    assert listing.status_code == 200, listing.text
    claims = {c["workload"]: c["claim"] for c in listing.json()}
    assert claims["large"] is None
    assert claims["small"] is not None
    store.dispose()
