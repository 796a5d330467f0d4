"""The executors by name and their options: the table, the option models, and where the package's
imports stop (it needs nothing of the study's)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from autotuner.executors import (
    EXECUTORS,
    ExecutorOptions,
    KubernetesOptions,
    LocalExecutor,
    LocalOptions,
    ReplayExecutor,
    ReplayOptions,
    SlurmOptions,
    executor_for,
    make_executor,
    validate_options,
)
from tests.helpers import LANDSCAPE, REPO

IMAGE = "registry.example.com/nccl-autotuner-trial:0.1.0"
# The least each executor needs, a misspelt option name, and a value of the wrong type.
CASES = {
    "local": ({}, "node", {"nodes": "pods"}, "nodes='pods': expected one, ranks, hostids or namespaces"),
    "replay": ({"landscape": str(LANDSCAPE)}, "delay", {"delay_s": "slow"}, "delay_s='slow': expected seconds"),
    "slurm": ({}, "partiton", {"rdzv_port": "29500"}, "rdzv_port='29500': expected 1..65535"),
    "kubernetes": ({"image": IMAGE}, "gpu_per_node", {"efa_per_node": "4"},
                   "efa_per_node='4': expected an integer from 0 to 64"),
}  # fmt: skip


def test_the_table_lists_every_executor_with_its_options_model():
    assert list(EXECUTORS) == ["local", "replay", "slurm", "kubernetes"]
    models = {name: entry.options for name, entry in EXECUTORS.items()}
    assert models == {"local": LocalOptions, "replay": ReplayOptions, "slurm": SlurmOptions,
                      "kubernetes": KubernetesOptions}  # fmt: skip
    for name, entry in EXECUTORS.items():
        assert issubclass(entry.options, ExecutorOptions)
        assert entry.options.executor == name
        assert entry.help


@pytest.mark.parametrize("name", list(CASES))
def test_each_executor_is_built_from_its_name_and_options(name):
    minimal = CASES[name][0]
    options = validate_options(name, minimal)
    assert isinstance(options, EXECUTORS[name].options)
    executor = executor_for(name, minimal)
    assert executor.name == name


@pytest.mark.parametrize("name", list(CASES))
def test_a_misspelt_option_name_is_refused_naming_it_and_the_valid_ones(name):
    minimal, misspelt, _, _ = CASES[name]
    with pytest.raises(
        ValueError, match=rf"unknown {name} executor option.*'{misspelt}'.*did you mean.*valid: "
    ):
        validate_options(name, {**minimal, misspelt: 1})


@pytest.mark.parametrize("name", list(CASES))
def test_a_value_of_the_wrong_type_is_refused_naming_the_option_and_what_it_takes(name):
    minimal, _, wrong, message = CASES[name]
    with pytest.raises(ValueError, match=f"^{name} executor option {message}"):
        validate_options(name, {**minimal, **wrong})
    with pytest.raises(ValueError, match=message):
        executor_for(name, {**minimal, **wrong})


def test_an_unknown_executor_is_refused_naming_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown executor 'slurn' \\(did you mean 'slurm'\\?\\); known: local, replay"
    ):
        validate_options("slurn", {})
    with pytest.raises(ValueError, match="unknown executor 'ssh'"):
        executor_for("ssh", {})


@pytest.mark.parametrize(("name", "option"), [("replay", "landscape"), ("kubernetes", "image")])
def test_a_required_option_that_is_missing_is_named(name, option):
    with pytest.raises(ValueError, match=f"{name} executor option {option} is required"):
        validate_options(name, {})


def test_options_are_not_a_mapping():
    with pytest.raises(ValueError, match="slurm executor options: an object"):
        validate_options("slurm", ["partition=gpu"])  # type: ignore[arg-type]


def test_validating_builds_nothing_and_reads_nothing():
    options = validate_options("replay", {"landscape": "/nonexistent/landscape.json", "delay_s": 1})
    assert options == ReplayOptions(landscape=Path("/nonexistent/landscape.json"), delay_s=1.0)
    with pytest.raises(FileNotFoundError):
        executor_for("replay", {"landscape": "/nonexistent/landscape.json"})


def test_options_are_frozen_models_with_their_defaults():
    options = validate_options("slurm", {"sbatch_args": ["--mem=0"], "time_limit": 30})
    assert (options.sbatch_args, options.time_limit, options.exclusive, options.rdzv_port) == (("--mem=0",), 30, True, 29500)  # fmt: skip
    with pytest.raises(ValidationError, match="frozen"):
        options.partition = "gpu"  # type: ignore[misc]
    assert validate_options("kubernetes", {"image": IMAGE, "memory": 1 << 30}).memory == str(1 << 30)


@pytest.mark.parametrize("model", [e.options for e in EXECUTORS.values()])
def test_every_option_is_declared_once_with_type_default_and_help(model):
    described = model.describe()
    assert [o.name for o in described] == list(model.model_fields)
    for info in described:
        assert info.help, info
        assert info.type, info
        assert info.required or info.default == model.model_fields[info.name].default
    assert all(not o.required for o in described if o.name not in ("landscape", "image"))


def test_local_and_replay_options_reach_the_executor():
    local = executor_for("local", {"fabric": "2gbit", "nodes": "ranks"})
    assert isinstance(local, LocalExecutor)
    assert local.fabric is not None
    assert local.fabric.rate == "2gbit"
    assert local.nodes == "ranks"
    replay = executor_for("replay", {"landscape": str(LANDSCAPE), "delay_s": 0.5, "seed": 7})
    assert isinstance(replay, ReplayExecutor)
    assert (replay.seed, replay.delay_s) == (7, 0.5)
    with pytest.raises(
        ValueError, match="local executor option fabric='2 gbit': expected a number with kbit"
    ):
        executor_for("local", {"fabric": "2 gbit"})


def test_make_executor_takes_fabric_and_seed_from_any_settings_object():
    local = make_executor(SimpleNamespace(executor="local", executor_options={}, fabric="1gbit", seed=3))
    assert isinstance(local, LocalExecutor)
    assert local.fabric is not None
    assert local.fabric.rate == "1gbit"
    settings = SimpleNamespace(
        executor="replay", executor_options={"landscape": str(LANDSCAPE)}, fabric=None, seed=9
    )
    replay = make_executor(settings)
    assert isinstance(replay, ReplayExecutor)
    assert replay.seed == 9
    with pytest.raises(ValueError, match="did you mean 'partition'"):
        make_executor(
            SimpleNamespace(executor="slurm", executor_options={"partiton": "x"}, fabric=None, seed=0)
        )


def test_the_package_imports_nothing_of_the_engine_or_the_service():
    """autotuner/executors/ may import itself, trials.result, trials.choices and trials.spec, the caps of
    autotuner.limits, autotuner.text and autotuner.files (bounded reads), and the variable registry
    autotuner.envvars (the Slurm executor's fixed exports get its value checks) (all stdlib and third-party
    packages), nothing else of this repository."""
    allowed = ("autotuner.executors", "autotuner.limits", "autotuner.text", "autotuner.files", "autotuner.envvars",
               "trials.result", "trials.choices", "trials.spec")  # fmt: skip
    for path in sorted((REPO / "autotuner" / "executors").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("autotuner", "api", "trials", "bench", "tests"):
                    assert name.startswith(allowed), f"{path.name} imports {name}"


def test_importing_the_package_leaves_the_cluster_backends_unimported():
    code = (
        "import sys, autotuner.executors as ex; ex.validate_options('kubernetes', {'image': 'r/t:1'}); "
        "print(sorted(m for m in sys.modules if m.startswith(('autotuner', 'api', 'kubernetes'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = ast.literal_eval(proc.stdout)
    assert not [m for m in loaded if m.startswith(("api", "kubernetes", "autotuner.executors.slurm.executor",
                                                   "autotuner.executors.kubernetes.executor", "autotuner.study"))]  # fmt: skip
