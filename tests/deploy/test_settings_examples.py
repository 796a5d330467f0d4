"""The service settings the deploy files ship are settings the service accepts (a typo there would
stop `autotuner serve` at start on every install that copied it)."""

from __future__ import annotations

import os
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
