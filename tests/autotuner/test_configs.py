"""Configs as jobs receive them: export lines go to a shell (`eval "$(autotuner env ...)"`), so every
value must come out of a real bash exactly as stored, and nothing in it may run."""

from __future__ import annotations

import subprocess

import pytest

from autotuner.job.exports import render

HOSTILE = {
    "NCCL_SOCKET_IFNAME": "eth0 $(touch {marker}) `touch {marker}`",
    "NCCL_DEBUG_SUBSYS": "'; touch {marker}; echo '",
    "NCCL_TOPO_FILE": 'a "b" \\c $HOME ${{PATH}} * ?',
    "NCCL_NET_PLUGIN": "line one\nline two",
}


def config(env: dict[str, str]) -> dict:
    return {"exports": {**env, "AUTOTUNER_CONFIG": "c/w/1n/v1"}}


def test_sh_exports_survive_bash_exactly_and_run_nothing(tmp_path):
    marker = tmp_path / "ran"
    env = {k: v.format(marker=marker) for k, v in HOSTILE.items()}
    lines = render(config(env), "sh")
    script = f'eval "$(cat)"; for k in {" ".join(env)}; do printf "%s\\0" "${{!k}}"; done'
    out = subprocess.run(["bash", "-c", script], input=lines, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\0")[:-1] == list(env.values())
    assert not marker.exists()


def test_a_name_that_is_not_a_variable_is_refused():
    with pytest.raises(ValueError, match="not a valid variable name"):
        render(config({"X; touch /tmp/x": "1"}), "sh")


def test_slurm_lines_are_literal_and_refuse_a_newline():
    # Slurm takes a TaskProlog line after the first '=' literally: quotes would end up in the value.
    assert "export NCCL_TOPO_FILE=a b\n" in render(config({"NCCL_TOPO_FILE": "a b"}), "slurm")
    with pytest.raises(ValueError, match="newline"):
        render(config({"NCCL_NET_PLUGIN": "a\nb"}), "slurm")
