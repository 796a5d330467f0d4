"""Files an operator names on the command line (a space, a workload, a landscape): read bounded and
never blocking, refused in words when they are not UTF-8, not a regular file, nested without end or
hold one key twice; and space fields that would silently do nothing refused."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from autotuner.cli.commands import app
from autotuner.executors.replay import Landscape
from autotuner.space import SpaceError, load_space, stored_space
from tests.helpers import LANDSCAPE

runner = CliRunner()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_space_file_that_is_not_utf8_is_refused_in_words(tmp_path, suffix):
    path = tmp_path / f"space{suffix}"
    path.write_bytes(b"env: {NCCL_NSOCKS_PERTHREAD: [2, 4]}\n# caf\xe9\n")
    result = runner.invoke(app, ["lint", str(path)])
    assert result.exit_code == 2, result.output
    assert "not UTF-8 text (byte 42)" in result.output
    assert "Traceback" not in result.output


def test_a_space_file_that_is_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    device = tmp_path / "zero.yaml"
    device.symlink_to("/dev/zero")
    for path in (fifo, device):
        with pytest.raises(SpaceError, match="is not a regular file"):
            load_space(str(path))


def test_a_space_file_reached_through_a_link_is_read(tmp_path):
    real = tmp_path / "space-v2.yaml"
    real.write_text("env: {NCCL_NSOCKS_PERTHREAD: [null, 4]}\n")
    (tmp_path / "space.yaml").symlink_to(real)
    assert "NCCL_NSOCKS_PERTHREAD" in load_space(str(tmp_path / "space.yaml")).env


def test_a_workload_file_nested_without_end_or_with_a_key_twice_is_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"name": ' + "[" * 100_000 + "]" * 100_000 + "}")
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"])[:-1] + ', "name": "other"}')
    for path, says in ((deep, "nested too deeply"), (twice, "key 'name' appears twice")):
        result = runner.invoke(app, ["tune", "--cluster", "c", "--workload", str(path), "--space", "socket",
                                     "--executor", "replay", "--landscape", str(LANDSCAPE),
                                     "--db", f"sqlite:///{tmp_path / 'at.db'}"])  # fmt: skip
        assert result.exit_code == 2, result.output
        assert says in result.output
        assert "Traceback" not in result.output


def test_a_landscape_nested_without_end_is_refused_in_words(tmp_path):
    path = tmp_path / "landscape.json"
    path.write_text('{"points": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="nested too deeply"):
        Landscape.load(path)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"ladder": []}, "ladder: lists no knob group"),
        ({"ladder": ["precision", "env", "precision"]}, "ladder: lists precision more than once"),
        ({"force_inert": ["NCCL_NOPE"]}, "NCCL_NOPE is not a variable of env"),
        ({"env": {"NCCL_NSOCKS_PERTHREAD": [2, 4]}, "force_inert": ["NCCL_SOCKET_NTHREADS"]},
         "NCCL_SOCKET_NTHREADS is not a variable of env"),
        # cut short: a 100 KB name came back whole in the 422
        ({"force_inert": ["N" * 100_000]}, "force_inert: N{77}\\.\\.\\. is not a variable of env"),
    ],
)  # fmt: skip
def test_space_fields_that_would_silently_do_nothing_are_refused(fields, says):
    with pytest.raises(SpaceError, match=says):
        load_space(fields)


def test_force_inert_names_a_variable_the_space_searches():
    space = load_space({"env": {"NCCL_NSOCKS_PERTHREAD": [2, 4]}, "force_inert": ["NCCL_NSOCKS_PERTHREAD"]})
    assert space.force_inert == ["NCCL_NSOCKS_PERTHREAD"]


def test_a_studys_stored_space_from_before_these_rules_still_loads_with_warnings():
    """A study stored before them must resume, and its configs stay re-validatable."""
    old = {"env": {"NCCL_NSOCKS_PERTHREAD": [2, 4]}, "ladder": [], "force_inert": ["NCCL_SOCKET_NTHREADS"]}
    with pytest.raises(SpaceError):
        load_space(old)
    space = stored_space(old)
    assert space.ladder == []
    assert {(p.variable, p.rule) for p in space.warnings} >= {
        ("ladder", "empty"),
        ("force_inert", "not-searched"),
    }
