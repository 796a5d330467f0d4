"""`make setup FLAVOR=cuda`: the one table of release trains, the pip commands it makes, and its refusals
(deploy/install/cuda_stack.py; pip is never run here)."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "install" / "cuda_stack.py"
_spec = importlib.util.spec_from_file_location("cuda_stack", SCRIPT)
assert _spec
assert _spec.loader
cuda_stack = sys.modules["cuda_stack"] = importlib.util.module_from_spec(_spec)  # a script, not a package
_spec.loader.exec_module(cuda_stack)

DEPS = [
    "tensordict",
    "tqdm",
    "pyre-extensions",
    "torchmetrics==1.0.3",
    "numpy",
]  # the Makefile's TORCHREC_DEPS


def test_the_table_of_release_trains():
    assert {torch: (t.fbgemm_gpu, t.torchrec, t.extra) for torch, t in cuda_stack.TRAINS.items()} == {
        "2.11": ("1.6.0", "1.6.1", ("iopath",)),
        "2.13": ("1.8.0", "1.8.0", ()),
    }


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        (
            "2.11.0+cu130",
            [
                "PIP install --quiet torch==2.11.0+cu130 fbgemm-gpu==1.6.0",
                "PIP install --quiet --no-deps torchrec==1.6.1",
                "PIP install --quiet torch==2.11.0+cu130 tensordict tqdm pyre-extensions torchmetrics==1.0.3 "
                "numpy iopath",
            ],
        ),
        (
            "2.13.0",
            [
                "PIP install --quiet torch==2.13.0 fbgemm-gpu==1.8.0",
                "PIP install --quiet --no-deps torchrec==1.8.0",
                "PIP install --quiet torch==2.13.0 tensordict tqdm pyre-extensions torchmetrics==1.0.3 numpy",
            ],
        ),
    ],
)
def test_the_pip_commands_pin_the_installed_torch(torch, expected):
    commands = cuda_stack.pip_commands("PIP", torch, DEPS)
    assert [" ".join(c) for c in commands] == expected


def test_an_index_for_fbgemm_goes_to_its_command_only():
    commands = cuda_stack.pip_commands("PIP", "2.13.0+cu126", [], "https://wheels.example/whl/cu126")
    assert commands[0][-2:] == ["--index-url", "https://wheels.example/whl/cu126"]
    assert all("--index-url" not in c for c in commands[1:])


def refused(version: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What a dry run for `version` says on stderr, having exited 2 and printed no command."""
    assert cuda_stack.main(["--pip", "PIP", "--torch-version", version, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no command printed, nothing run
    return err


@pytest.mark.parametrize("version", ["2.12.0", "2.10.0+cu128", "3.0.0", "nightly"])
def test_an_unknown_torch_says_which_versions_it_knows_and_exits_2(version, capsys):
    with pytest.raises(cuda_stack.Unsupported):
        cuda_stack.train_for(version)
    assert refused(version, capsys) == (
        f"make setup FLAVOR=cuda: torch {version}: no fbgemm-gpu / torchrec pair is known for it (known: "
        "torch 2.11 -> fbgemm-gpu 1.6.0 + torchrec 1.6.1 (+ iopath); torch 2.13 -> fbgemm-gpu 1.8.0 + "
        "torchrec 1.8.0). Install a torch of a known train, or add its pair to TRAINS in "
        "deploy/install/cuda_stack.py\n"
    )


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.11.0+cpu", "2.13.0+CPU", "2.11.0+cpu.cxx11.abi"])
def test_a_cpu_build_given_as_the_version_installs_nothing_and_exits_2(version, capsys):
    # --torch-version skips reading the installed torch: its `+cpu` label is what says it is a CPU build
    # (this printed three pip commands and exited 0 for 2.13.0+cpu).
    assert refused(version, capsys) == (
        f"make setup FLAVOR=cuda: torch {version} is a CPU build: FLAVOR=cuda installs beside a CUDA torch "
        "(install one first, or run `make setup` for the CPU stack). Known: torch 2.11 -> fbgemm-gpu 1.6.0 + "
        "torchrec 1.6.1 (+ iopath); torch 2.13 -> fbgemm-gpu 1.8.0 + torchrec 1.8.0\n"
    )


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cu126", "2.11.0+cu130"])
def test_a_cuda_or_unlabelled_version_is_not_taken_for_a_cpu_build(version, capsys):
    assert cuda_stack.main(["--pip", "PIP", "--torch-version", version, "--dry-run"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def fake_torch(monkeypatch, tmp_path, version: str | None, cuda: str | None) -> None:
    """An installed torch as the script reads it: its metadata's version and its torch/version.py."""
    folder = tmp_path / "torch"
    folder.mkdir()
    cuda_line = "cuda: Optional[str] = None" if cuda is None else f"cuda: Optional[str] = '{cuda}'"
    (folder / "version.py").write_text(f"__version__ = '{version}'\ndebug = False\n{cuda_line}\n")
    real_version, real_find_spec = importlib.metadata.version, importlib.util.find_spec

    def version_of(name):
        if name != "torch":
            return real_version(name)
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    def find_spec(name, *args):
        if name != "torch":
            return real_find_spec(name, *args)
        spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        return spec

    monkeypatch.setattr(importlib.metadata, "version", version_of)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_it_reads_the_installed_cuda_torch_and_runs_its_trains_commands(monkeypatch, tmp_path, capsys):
    fake_torch(monkeypatch, tmp_path, "2.11.0+cu130", "13.0")
    assert cuda_stack.installed_torch() == ("2.11.0+cu130", "13.0")
    # A pip that only records what it was asked: the commands run in order, nothing is installed.
    log = tmp_path / "pip.log"
    pip = tmp_path / "pip"
    pip.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    pip.chmod(0o755)
    assert cuda_stack.main(["--pip", str(pip), *DEPS]) == 0
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert runs == [c[1:] for c in cuda_stack.pip_commands(str(pip), "2.11.0+cu130", DEPS)]
    assert runs[1] == ["install", "--quiet", "--no-deps", "torchrec==1.6.1"]
    assert "iopath" in runs[2]
    out, err = capsys.readouterr()
    assert "torch 2.11.0+cu130 (CUDA 13.0) found" in err
    assert out.splitlines()[0] == f"{pip} install --quiet torch==2.11.0+cu130 fbgemm-gpu==1.6.0"


@pytest.mark.parametrize(
    ("version", "cuda", "words"),
    [
        ("2.13.0+cpu", None, "torch 2.13.0+cpu is a CPU build: FLAVOR=cuda installs beside a CUDA torch"),
        (None, None, "no torch in this environment"),
        ("2.12.0+cu128", "12.8", "torch 2.12.0+cu128: no fbgemm-gpu / torchrec pair is known for it"),
    ],
)
def test_no_cuda_torch_of_a_known_train_installs_nothing(monkeypatch, tmp_path, capsys, version, cuda, words):
    fake_torch(monkeypatch, tmp_path, version, cuda)
    assert cuda_stack.main(["--pip", str(tmp_path / "no-such-pip"), *DEPS]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no command printed, pip never run
    assert words in err


def make_n(*args: str) -> list[str]:
    # --no-print-directory: under `make test` this make is a sub-make, which prints "Entering directory"
    proc = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return proc.stdout.splitlines()


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode, reason="no make")
def test_make_setup_flavors(tmp_path):
    venv = tmp_path / "venv"
    cuda = make_n("setup", "FLAVOR=cuda", f"VENV={venv}")
    assert cuda[0] == f"test -x {venv}/bin/python || python3 -m venv --system-site-packages {venv}"
    assert cuda[1] == (
        f"{venv}/bin/python deploy/install/cuda_stack.py --pip {venv}/bin/pip  tensordict tqdm "
        'pyre-extensions "torchmetrics==1.0.3" numpy'
    )
    assert not any("torch==" in line for line in cuda)  # torch is never installed for CUDA
    indexed = make_n("setup", "FLAVOR=cuda", f"VENV={venv}", "FBGEMM_INDEX=https://example.org/cu130")
    assert "--index-url https://example.org/cu130" in indexed[1]
    # The CPU flavour as it was (CI uses it)
    assert make_n("setup", f"VENV={venv}") == [
        f"test -x {venv}/bin/python || python3 -m venv {venv}",
        f'{venv}/bin/pip install --quiet "torch==2.13.0" "fbgemm-gpu-cpu==1.8.0"',
        f'{venv}/bin/pip install --quiet --no-deps "torchrec==1.8.0"',
        f'{venv}/bin/pip install --quiet tensordict tqdm pyre-extensions "torchmetrics==1.0.3" numpy',
        f'{venv}/bin/pip install --quiet -e ".[dev]"',
        f'{venv}/bin/python -c "import torch, torchrec, fbgemm_gpu, autotuner, api, trials"',
        f"touch {venv}/.installed-cpu",
    ]
    # A clean machine asks for the CPU build from an index that has it (the default one's is CUDA)
    cpu_index = make_n("setup", f"VENV={venv}", "TORCH_INDEX=https://example.org/whl/cpu")
    assert cpu_index[1:3] == [
        f"{venv}/bin/pip install --quiet --extra-index-url 'https://example.org/whl/cpu' \"torch==2.13.0\"",
        f'{venv}/bin/pip install --quiet "torch==2.13.0" "fbgemm-gpu-cpu==1.8.0"',  # torch is there: kept
    ]
    # ... and a venv set up for CUDA stays CUDA under a plain `make setup` / `make test`
    venv.mkdir()
    (venv / ".installed-cuda").touch()
    again = make_n("setup", f"VENV={venv}")
    assert not any("pip" in line or "torch" in line for line in again), again  # no CPU torch over it
