"""SIGKILL of `autotuner serve` during a study: after a restart the study finishes, nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.api.service import _children, make_server, replay_study_body, served_config, wait_for_state
from tests.helpers import LANDSCAPE


@pytest.mark.soak
def test_sigkill_during_a_study_then_restart_finishes_it(tmp_path):
    server = make_server(tmp_path)
    server.start()
    client = server.client("write")
    study = client.post("/v1/studies", json=replay_study_body("survivor", trials=4)).json()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some trials are recorded and more are coming
        trials = client.get(f"/v1/studies/{study['id']}/trials", params={"limit": 1000}).json()
        if trials["count"] >= 3:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"fewer than 3 trials recorded in 60 s: {trials['count']}")
    before = {t["id"]: t["samples_per_s"] for t in trials["data"]}
    assert client.get(f"/v1/studies/{study['id']}").json()["state"] == "running"
    server.kill()  # SIGKILL: no shutdown hooks, lease not released

    # same data dir, same database; the rest of the study need not be watched: its launches are instant
    server.env["AUTOTUNER_EXECUTOR_OPTIONS"] = json.dumps(
        {"replay": {"landscape": str(LANDSCAPE), "delay_s": 0}}
    )
    server.start()
    client = server.client("write")
    final = wait_for_state(client, study["id"], ("done", "failed"), timeout_s=120)
    assert final["state"] == "done", final
    after = {t["id"]: t["samples_per_s"] for t in
             client.get(f"/v1/studies/{study['id']}/trials", params={"limit": 1000}).json()["data"]}  # fmt: skip
    assert {k: after[k] for k in before} == before  # every finished trial survived unchanged
    launches = client.get(f"/v1/studies/{study['id']}/launches").json()
    assert sum(1 for x in launches if x["kind"] == "search" and x["attempt"] == 1) == 4
    assert served_config(client).status_code == 200
    server.kill()


def test_workers_do_not_outlive_a_service_killed_while_they_start(tmp_path):
    """The supervisor binds the port, then its workers import the app: one killed in between left a
    worker serving (and holding the port) forever, its parent-death signal asked for too late."""
    server = make_server(tmp_path, AUTOTUNER_SCHEDULER="0")
    server.launch()
    deadline = time.monotonic() + 30
    while True:  # the port opens when the supervisor binds it, before any worker is ready
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, server.log.read_text()
            assert server.proc.poll() is None, server.log.read_text()
            time.sleep(0.02)
    server.kill()  # SIGKILL; fails if anything still answers on the port 15 s later


def test_no_scheduler_means_none(tmp_path):
    """`autotuner serve --no-scheduler` (an API-only replica): before, the flag never reached the workers,
    and each of them started a scheduler of its own, running studies on a host chosen not to."""
    server = make_server(tmp_path)
    server.args = ["--no-scheduler", "--workers", "2"]
    server.start()
    try:
        for _ in range(4):  # each worker answers for itself
            assert httpx.get(f"{server.url}/readyz", timeout=5).json()["scheduler"] == "off"
        assert "running studies from" not in server.log.read_text()
    finally:
        server.kill()


def test_a_dead_scheduler_makes_the_service_unready(tmp_path):
    """/readyz answers 503 once the scheduler process died (docs/operations.md). `autotuner serve` never
    waits for it, so it stays a zombie, which the workers' os.kill(pid, 0) still found: ready for ever."""
    server = make_server(tmp_path)
    server.start()
    try:
        (scheduler,) = [pid for pid in _children(server.proc.pid)
                        if b"api.scheduler" in Path(f"/proc/{pid}/cmdline").read_bytes()]  # fmt: skip
        os.kill(scheduler, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not _zombie(scheduler):  # dead, not reaped by its parent
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(4):  # each worker answers for itself
            answer = httpx.get(f"{server.url}/readyz", timeout=5)
            assert (answer.status_code, answer.json()["scheduler"]) == (503, "stopped")
    finally:
        server.kill()


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
