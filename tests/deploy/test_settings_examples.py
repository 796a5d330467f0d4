"""The service settings the deploy files ship are settings the service accepts (a typo there would
stop `autotuner serve` at start on every install that copied it), and the Slurm hook files name the
install the compute nodes have."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from api.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
    return {key: value for key, value in pairs}


def config_map(path: Path) -> dict[str, str]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "ConfigMap")["data"]


@pytest.mark.parametrize(
    "settings",
    [env_file(DEPLOY / "examples" / "autotuner.env"), config_map(DEPLOY / "k8s" / "base" / "settings.yaml")],
    ids=["systemd autotuner.env", "k8s settings.yaml"],
)
def test_the_shipped_settings_load(settings, monkeypatch):
    for name in [n for n in os.environ if n.startswith("AUTOTUNER_")]:
        monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    loaded = Settings()
    assert loaded.prune_runs_after_s == 30 * 86400  # launch directories do not grow without end
    assert str(loaded.data_dir) == "/var/lib/nccl-autotuner"


def test_the_slurm_hook_files_name_the_compute_nodes_install():
    # hook.env.example and the TaskProlog line named the head node's /opt/nccl-autotuner, which
    # docs/operations.md installs on the head node alone: on the nodes, "no autotuner executable".
    ops = (DEPLOY.parent / "docs" / "operations.md").read_text()
    (nodes,) = set(re.findall(r'"python": "(/[^"]+)/\.venv/bin/python"', ops))
    assert nodes != "/opt/nccl-autotuner"
    assert env_file(DEPLOY / "slurm" / "hook.env.example")["AUTOTUNER_HOOK"] == f"{nodes}/.venv/bin/autotuner"
    readme = (DEPLOY / "slurm" / "README.md").read_text()
    assert re.findall(r"^TaskProlog=(.*)$", readme, re.M) == [f"{nodes}/deploy/slurm/task_prolog.sh"]
