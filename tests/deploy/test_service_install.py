"""Installing the service: a head node has no GPU and no CUDA torch, so `make setup FLAVOR=cuda` (which
exits 2 there) never made the .venv the systemd unit starts; `make setup-service` installs the service
alone, as the container image does. The image has no torch: its executors are replay only unless told.
And `make gpu-check` without a .venv says what to do, not `No such file or directory`."""

import os
import re
import subprocess

from tests.helpers import REPO


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_make_gpu_check_without_a_venv_says_to_set_one_up(tmp_path):
    proc = make("gpu-check", f"VENV={tmp_path / 'none'}")
    assert proc.returncode == 2
    assert "make setup FLAVOR=cuda" in proc.stderr
    assert "No such file or directory" not in proc.stderr


def test_setup_service_installs_the_service_without_torch(tmp_path):
    proc = make("-n", "setup-service", f"VENV={tmp_path / 'v'}")
    assert proc.returncode == 0, proc.stderr
    assert f'{tmp_path / "v"}/bin/pip install --quiet ".[postgres]"' in proc.stdout
    assert f"{tmp_path / 'v'}/bin/autotuner --help" in proc.stdout  # the unit's ExecStart exists
    assert "torch" not in proc.stdout
    assert "cuda_stack" not in proc.stdout


def test_the_head_node_install_uses_the_service_install():
    docs = (REPO / "docs" / "operations.md").read_text()
    install = docs.split("## Install on a head node", 1)[1].split("```", 2)[1]
    assert "make setup-service" in install
    assert "FLAVOR=cuda" not in install  # exits 2 on a host without a CUDA torch
    unit = (REPO / "deploy" / "systemd" / "nccl-autotuner.service").read_text()
    assert "/opt/nccl-autotuner/.venv/bin/autotuner serve" in unit
    assert "/opt/nccl-autotuner" in install
    # autotuner.env decides: an option on ExecStart won over its AUTOTUNER_HOST (--host 0.0.0.0 did)
    assert re.findall(r"^ExecStart=.*$", unit, re.M) == [
        "ExecStart=/opt/nccl-autotuner/.venv/bin/autotuner serve"
    ]
    # the settings file holds the tokens: installed for root alone, not world-readable as cp made it
    assert re.search(r"install -m 600 deploy/examples/autotuner.env /etc/nccl-autotuner/", install)


def test_the_service_image_offers_replay_alone_unless_told(monkeypatch):
    text = (REPO / "deploy" / "container" / "Containerfile").read_text()
    env = dict(re.findall(r"(AUTOTUNER_[A-Z_]+)=(\S+)", text.split("\nENV ", 1)[1].split("\nEXPOSE", 1)[0]))
    assert env["AUTOTUNER_EXECUTORS"] == "replay"
    assert "torch" not in text.split("RUN pip install", 1)[1].split("\n", 1)[0]
    from api.settings import Settings

    monkeypatch.setenv("AUTOTUNER_EXECUTORS", env["AUTOTUNER_EXECUTORS"])
    monkeypatch.setenv("AUTOTUNER_DATA_DIR", os.fspath(REPO / "deploy"))  # read only: not written here
    assert Settings().allowed_executors == ["replay"]
    k8s = (REPO / "deploy" / "k8s" / "base" / "settings.yaml").read_text()
    assert "AUTOTUNER_EXECUTORS: kubernetes" in k8s  # the ConfigMap the pods take their environment from


def test_what_the_service_writes_is_not_world_readable():
    # The SQLite store (0644) and its directory (0755) were world-readable: the study settings hold
    # executor options.
    unit = (REPO / "deploy" / "systemd" / "nccl-autotuner.service").read_text()
    service = unit.split("[Service]", 1)[1].split("\n[", 1)[0]
    assert re.findall(r"^UMask=(.*)$", service, re.M) == ["0027"]
    docs = (REPO / "docs" / "operations.md").read_text()
    install = docs.split("## Install on a head node", 1)[1].split("```", 2)[1]
    # mkdir made the data dir 0755, and a umask covers only what is created after it
    assert "sudo chmod 750 /var/lib/nccl-autotuner" in install
