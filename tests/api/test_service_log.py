"""The service's log says what changed and who asked: a study queued, started, done and what it
published, a config pinned or rolled back, a study cancelled. An operator review found only "serving
on", migrations and take-overs there over a whole session: the API workers' INFO lines went nowhere
(uvicorn's log level set its own loggers; a worker's root logger had no handler)."""

from __future__ import annotations

import re
import time

from tests.api.service import make_server, replay_study_body, wait_for_state


def logged(server, pattern: str, timeout_s: float = 60) -> str:
    """The first log line matching `pattern` (the scheduler writes its lines a moment after the API answers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = re.search(pattern, server.log.read_text(), re.M)
        if found:
            return found.group(0)
        assert time.monotonic() < deadline, f"no line matching {pattern!r}:\n{server.log.read_text()[-3000:]}"
        time.sleep(0.1)


def test_what_changed_and_who_asked_is_in_the_service_log(tmp_path):
    server = make_server(tmp_path, replay_delay_s=0)
    server.start()
    try:
        writer, admin = server.client("write"), server.client("admin")
        study = writer.post("/v1/studies", json=replay_study_body("audited", trials=2)).json()
        assert wait_for_state(writer, study["id"], ("done", "failed"))["state"] == "done"
        sid = study["id"]
        logged(server, rf"INFO autotuner\.api: study {sid} \(audited\) queued: cpu-box/small on executor replay "
                       r"\(by a write token\)$")  # fmt: skip
        logged(server, rf"INFO autotuner\.tuning: study {sid} \(audited\): started by \S+$")
        logged(server, rf"INFO autotuner\.tuning: study {sid}: published cpu-box/small v1 at 1 node\(s\): ")
        logged(server, rf"INFO autotuner\.tuning: study {sid} done: ")
        assert admin.post("/v1/configs/cpu-box/small/pin", json={"version": 1}).status_code == 200
        logged(
            server,
            r"INFO autotuner\.api: config cpu-box/small at 1 node\(s\) pinned to v1 \(by an admin token\)$",
        )
        queued = writer.post("/v1/studies", json=replay_study_body("stopped", trials=50)).json()
        assert writer.post(f"/v1/studies/{queued['id']}/cancel").status_code == 200
        logged(
            server, rf"INFO autotuner\.api: study {queued['id']} \(stopped\) cancelled \(by a write token\)$"
        )
    finally:
        server.kill()
