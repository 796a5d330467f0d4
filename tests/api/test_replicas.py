"""Two service replicas on one PostgreSQL: both serve configs; each study is run by exactly one."""

from __future__ import annotations

import os
import time

import pytest

from tests.api.service import make_server, replay_study_body, served_config, wait_for_state
from tests.helpers import fresh_postgres_database, skip_or_fail


@pytest.fixture
def pg_url():
    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    return fresh_postgres_database(base)


@pytest.mark.postgres
def test_two_replicas_share_the_work_and_a_killed_holder_loses_its_study(tmp_path, pg_url):
    common = {"AUTOTUNER_DATABASE_URL": pg_url, "AUTOTUNER_LEASE_S": "6"}
    a = make_server(tmp_path / "a", **common)
    b = make_server(tmp_path / "b", **common)
    a.start()
    b.start()
    try:
        client = a.client("write")
        study = client.post("/v1/studies", json=replay_study_body("shared", trials=6)).json()
        owners = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = client.get(f"/v1/studies/{study['id']}").json()
            if row["owner"]:
                owners.add(row["owner"].split(":")[1])  # the pid of the replica running it
            if row["launches_done"] >= 2:
                break
            time.sleep(0.1)
        assert len(owners) == 1, f"one replica runs the study, seen {owners}"
        holder, other = (a, b) if str(a.proc.pid) in owners else (b, a)
        holder.kill()  # SIGKILL: the lease is not released, it has to expire or be seen dead

        final = wait_for_state(other.client("write"), study["id"], ("done", "failed"), timeout_s=180)
        assert final["state"] == "done", final
        launches = other.client().get(f"/v1/studies/{study['id']}/launches").json()
        seqs = [x["seq"] for x in launches]
        assert len(seqs) == len(set(seqs))
        assert sum(1 for x in launches if x["kind"] == "search" and x["attempt"] == 1) == 6
        # the config is served by the surviving replica, and by a fresh one on the same database
        assert served_config(other.client("read")).status_code == 200
        holder.start()
        assert served_config(holder.client("read")).status_code == 200
    finally:
        a.kill()
        b.kill()
