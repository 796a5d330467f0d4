"""Configs that stay true, against a real `autotuner serve`: a job's fingerprint in the answer, the
hook's comment line, the stale flag on the validations endpoint and in /metrics, re-validation asked
over REST, triggered by jobs on another stack, and on a schedule (the scheduler runs them; replay
executor on a landscape file the test rewrites as an upgrade would)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.service import make_server, replay_study_body, served_config, wait_for_state
from tests.api.test_hook import PATIENT, hook
from tests.tuning.test_revalidate import NEW_STACK, OLD_STACK, landscape

UPGRADED = "driver=570.86.15&nccl=2.23.4&nodes=1"  # what the hook sends from a node of the new stack
HEADER = "X-Autotuner-Fingerprint"


def until(what, check, timeout_s: float = 60):
    """`check()`'s first truthy value within the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def serve(tmp_path, **env):
    recorded = landscape(tmp_path / "landscape.json", OLD_STACK)
    server = make_server(tmp_path, AUTOTUNER_EXECUTOR_OPTIONS=json.dumps({"replay": {"landscape": str(recorded)}}),
                         **env)  # fmt: skip
    server.start()
    client = server.client("write")
    study = client.post("/v1/studies", json=replay_study_body("study", confirm_rounds=3, seed=7)).json()
    assert wait_for_state(client, study["id"], ("done", "failed"))["state"] == "done"
    config = served_config(client).json()
    assert config["batch_size"] == 256
    assert config["validated_on"] == {
        "driver": "550.54.15",
        "nccl": "2.21.5",
        "nodes": "1",
    }
    return server, recorded


@pytest.fixture
def quiet(tmp_path):
    """Jobs on another stack are recorded, no re-validation asked on their own."""
    server, recorded = serve(tmp_path, AUTOTUNER_REVALIDATE_ON_MISMATCH="0")
    yield server, recorded
    server.kill()


def metric(text: str, name: str, **labels: str) -> float:
    """The one sample of `name` with these labels in a Prometheus exposition."""
    found = [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
             if sample.name == name and sample.labels == labels]  # fmt: skip
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_a_job_on_another_stack_is_told_recorded_seen_stale_and_a_revalidation_clears_it(quiet):
    server, recorded = quiet
    jobs = server.client("read")
    # the answer says whether the job's stack is the one the config was validated on, and what differs
    plain = jobs.get("/v1/configs/cpu-box/small").json()
    assert (plain["fingerprint_match"], plain["fingerprint_diff"]) == ("unknown", {})
    same = jobs.get(
        "/v1/configs/cpu-box/small", headers={HEADER: "driver=550.54.15&nccl=2.21.5&nodes=1"}
    ).json()
    assert (same["fingerprint_match"], same["fingerprint_diff"]) == (True, {})
    other = jobs.get("/v1/configs/cpu-box/small", headers={HEADER: UPGRADED}).json()
    assert other["fingerprint_match"] is False
    assert other["fingerprint_diff"] == {"driver": ["550.54.15", "570.86.15"], "nccl": ["2.21.5", "2.23.4"]}
    lines = jobs.get("/v1/configs/cpu-box/small?format=env", headers={HEADER: UPGRADED}).text
    assert lines.splitlines()[-1] == ("# nccl-autotuner: cpu-box/small/1n/v1 was validated on driver 550.54.15, "
                                      "NCCL 2.21.5, 1 node; this job differs: driver 550.54.15 -> 570.86.15, "
                                      "NCCL 2.21.5 -> 2.23.4")  # fmt: skip
    assert (
        jobs.get("/v1/configs/cpu-box/small", headers={HEADER: "%%%&&==driver=&nodes=two"}).json()[
            "fingerprint_match"
        ]
        == "unknown"
    )

    # the hook: a comment line and a warning, the exports as ever (AUTOTUNER_FINGERPRINT: this is a CPU box)
    env = {
        "AUTOTUNER_CACHE_DIR": str(server.data_dir / "hook-cache"),
        "AUTOTUNER_FINGERPRINT": "driver=570.86.15",
    }
    proc, _ = hook(server.url, *PATIENT, "--nodes", "1", env=env)
    assert proc.returncode == 0
    assert "export AUTOTUNER_BATCH_SIZE=256" in proc.stdout
    note = ("# nccl-autotuner: cpu-box/small/1n/v1 was validated on driver 550.54.15, NCCL 2.21.5, 1 node; "
            "this job differs: driver 550.54.15 -> 570.86.15")  # fmt: skip
    assert note in proc.stdout.splitlines()
    assert "this job differs: driver 550.54.15 -> 570.86.15" in proc.stderr
    # ... from its cache too, with the service gone
    matching, _ = hook(
        server.url, *PATIENT, "--nodes", "1", env={**env, "AUTOTUNER_FINGERPRINT": "driver=550.54.15"}
    )
    assert "differs" not in matching.stdout + matching.stderr

    # the service recorded those jobs: the served version is stale, with what differs
    def stale():
        status = jobs.get("/v1/configs/cpu-box/small/validations").json()
        return status if status["stale"] and sum(r["jobs"] for r in status["reports"]) >= 3 else None

    status = until("the reports are written", stale)
    assert set(status["stale_reasons"]) == {"fingerprint"}
    assert status["stale_reasons"]["fingerprint"].startswith("driver 550.54.15 -> 570.86.15")
    assert status["validations"] == []
    assert status["version"] == 1
    metrics = jobs.get("/metrics").text
    labels = {"cluster": "cpu-box", "workload": "small", "nodes": "1", "version": "1"}
    assert metric(metrics, "autotuner_config_stale", **labels, reason="fingerprint") == 1.0
    assert metric(metrics, "autotuner_config_stale", **labels, reason="overdue") == 0.0
    assert metric(metrics, "autotuner_fingerprint_mismatches_total") >= 3
    assert 0 <= metric(metrics, "autotuner_config_validation_age_seconds", **labels) < 600

    # re-validation over REST: write scope; one at a time per version
    assert server.client("read").post("/v1/configs/cpu-box/small/revalidate", json={}).status_code == 403
    landscape(recorded, NEW_STACK, gain=True)  # the nodes were upgraded: the gain holds there
    writer = server.client("write")
    asked = writer.post("/v1/configs/cpu-box/small/revalidate", json={"reason": "after the upgrade"})
    assert asked.status_code in (200, 202)
    assert asked.json()["trigger"] == "manual"

    def held():
        status = jobs.get("/v1/configs/cpu-box/small/validations").json()
        done = [v for v in status["validations"] if v["state"] not in ("queued", "running")]
        return status if done else None

    status = until("the scheduler re-validates", held)
    entry = status["validations"][0]
    assert entry["state"] == "held"
    assert entry["version"] == 1
    assert entry["reason"] == "after the upgrade"
    assert entry["action"] == "kept v1: validated on driver 570.86.15, NCCL 2.23.4, 1 node"
    assert entry["rounds"] == 3
    assert status["validated_on"] == {"driver": "570.86.15", "nccl": "2.23.4", "nodes": "1"}
    assert status["stale"] is False
    assert status["stale_reasons"] == {}
    # what jobs get says it too, within AUTOTUNER_CONFIG_REFRESH_S (the scheduler is another process)
    served = until(
        "the cache re-renders v1", lambda: (a := served_config(jobs).json())["last_validation"] and a
    )
    assert served["version"] == 1
    assert served["last_validation"]["state"] == "held"
    assert (
        jobs.get("/v1/configs/cpu-box/small", headers={HEADER: UPGRADED}).json()["fingerprint_match"] is True
    )
    metrics = jobs.get("/metrics").text
    assert metric(metrics, "autotuner_revalidations", state="held") == 1.0
    assert [
        metric(metrics, "autotuner_config_stale", **labels, reason=r)
        for r in ("fingerprint", "failed", "overdue")
    ] == [0.0] * 3
    history = jobs.get("/v1/configs/cpu-box/small/history").json()
    assert [h["version"] for h in history] == [1]
    assert history[0]["validated_on"]["driver"] == "570.86.15"
    # errors
    assert writer.post("/v1/configs/cpu-box/nope/revalidate", json={}).status_code == 404
    assert writer.post("/v1/configs/cpu-box/small/revalidate", json={"version": 7}).status_code == 404
    assert writer.post("/v1/configs/cpu-box/small/revalidate", json={"nodes": 0}).status_code == 422


def test_jobs_on_a_new_stack_trigger_a_revalidation_that_replaces_a_lost_gain(tmp_path):
    server, recorded = serve(tmp_path)
    try:
        landscape(recorded, NEW_STACK, gain=False)  # after the upgrade, batch 256 gains nothing
        jobs = server.client("read")
        assert (
            jobs.get("/v1/configs/cpu-box/small", headers={HEADER: UPGRADED}).json()["fingerprint_match"]
            is False
        )

        def replaced():
            answer = served_config(jobs).json()
            return answer if answer["version"] == 2 else None

        v2 = until("a baseline version is published", replaced)
        assert (v2["batch_size"], v2["env"], v2["evidence"]["speedup"]) == (64, {}, 1.0)
        assert "of v1 failed on driver 570.86.15, NCCL 2.23.4" in v2["evidence"]["decision"]
        assert v2["evidence"]["decision"].endswith("published the baseline (no changes)")
        status = jobs.get("/v1/configs/cpu-box/small/validations").json()
        (entry,) = status["validations"]
        assert entry["trigger"] == "fingerprint"
        assert entry["version"] == 1
        assert entry["new_version"] == 2
        assert (
            entry["reason"]
            == "jobs report driver 550.54.15 -> 570.86.15, NCCL 2.21.5 -> 2.23.4 since validation"
        )
        assert entry["requested_fingerprint"] == {"driver": "570.86.15", "nccl": "2.23.4", "nodes": "1"}
        assert status["version"] == 2
        assert status["stale"] is False
        # v2 was published on the new stack: those jobs now match
        assert (
            jobs.get("/v1/configs/cpu-box/small", headers={HEADER: UPGRADED}).json()["fingerprint_match"]
            is True
        )
        history = jobs.get("/v1/configs/cpu-box/small/history").json()
        assert [(h["version"], h["flagged"] is not None) for h in history] == [(2, False), (1, True)]
    finally:
        server.kill()


def test_the_schedule_revalidates_served_configs(tmp_path):
    server, _ = serve(tmp_path, AUTOTUNER_REVALIDATE_EVERY="2s", AUTOTUNER_REVALIDATE_ON_MISMATCH="0")
    try:
        jobs = server.client("read")

        def scheduled():
            status = jobs.get("/v1/configs/cpu-box/small/validations").json()
            done = [v for v in status["validations"] if v["trigger"] == "schedule" and v["state"] == "held"]
            return done[-1] if done else None

        entry = until("a scheduled re-validation", scheduled)
        assert entry["reason"].endswith("ago (AUTOTUNER_REVALIDATE_EVERY=2s)")
        assert entry["version"] == 1
        assert jobs.get("/v1/configs/cpu-box/small/validations").json()["revalidate_every_s"] == 2.0
    finally:
        server.kill()


def test_a_bad_schedule_is_refused_at_start(tmp_path):
    server = make_server(tmp_path, AUTOTUNER_REVALIDATE_EVERY="weekly")
    with pytest.raises(RuntimeError, match="AUTOTUNER_REVALIDATE_EVERY"):
        server.start()  # it exits at once, saying why; the deadline is for a slow start only
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server.url}/readyz", timeout=1)
