"""The example Prometheus alert rules read the metrics the service exports, under their names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import yaml
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.helpers import REPO

RULES = REPO / "deploy" / "prometheus" / "autotuner-alerts.yaml"


def test_every_rule_reads_metrics_the_service_exports(tmp_path, monkeypatch):
    # a worker of `autotuner serve`: the scheduler beside it is named by its pid file (this process
    # stands in for it), and its restarts by the count beside it
    pid_file = tmp_path / "scheduler.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    (tmp_path / "scheduler.restarts").write_text("3\n")
    monkeypatch.setenv("AUTOTUNER_SCHEDULER_PID_FILE", str(pid_file))
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {"name": "w", "tables": []})
    store.publish_config(cluster="c", workload="w", nodes=1, env={}, fwd_precision="fp32", bwd_precision="fp32",
                         batch_size=64, sharding="table_wise")  # fmt: skip
    with TestClient(
        create_app(Settings(data_dir=tmp_path, public_read=True, scheduler=True), store=store)
    ) as client:
        exported = client.get("/metrics").text
    assert "autotuner_scheduler_up 1.0" in exported
    assert "autotuner_scheduler_restarts_total 3.0" in exported
    names = set(re.findall(r"^([a-z_]+)(?:\{| )", exported, re.M))
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert {r["alert"] for r in rules} == {"AutotunerConfigStale", "AutotunerConfigNotValidatedFor30Days",
                                          "AutotunerRevalidationErrors", "AutotunerSchedulerRestarting",
                                          "AutotunerSchedulerDown", "AutotunerLaunchesLeftRunning"}  # fmt: skip
    for rule in rules:
        used = set(re.findall(r"\b(autotuner_[a-z_]+)\b", rule["expr"]))
        assert used, (rule["alert"], used - names)
        assert used <= names, (rule["alert"], used - names)
        assert {"summary", "description"} <= set(rule["annotations"])
    if shutil.which("promtool"):  # where Prometheus's own checker is installed, it has the last word
        subprocess.run(["promtool", "check", "rules", str(RULES)], check=True)
