"""The fbgemm-gpu / torchrec pair `make setup FLAVOR=cuda` installs beside the CUDA torch already there.

    python deploy/install/cuda_stack.py --pip PIP [--index-url URL] [--dry-run] [--torch-version V] [DEP ...]

torch, fbgemm-gpu and torchrec must come from one release train, and on a GPU node torch is the
cluster's own (its CUDA build matches the driver): it is read, never installed or replaced. This reads
the installed torch's version and CUDA build (from its metadata and torch/version.py, without importing
it), picks the pair of its train from TRAINS, and runs (or with --dry-run prints) the pip commands, each
pinning torch to the installed version so that no dependency can upgrade it. DEP: torchrec's own
dependencies (the Makefile's TORCHREC_DEPS; torchrec goes in --no-deps, as its declared `fbgemm-gpu` is
installed here by name). Exits 2 with the versions it knows when torch is missing, a CPU build (as
installed, or a --torch-version with a `+cpu` label), or of a train not in TRAINS. Standard library
only: it runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Train:
    fbgemm_gpu: str
    torchrec: str
    extra: tuple[str, ...] = ()  # what that torchrec release imports beyond its declared dependencies


# torch major.minor -> the fbgemm-gpu and torchrec releases built against it. The one table.
TRAINS: dict[str, Train] = {
    "2.11": Train("1.6.0", "1.6.1", extra=("iopath",)),  # torchrec 1.6.1 imports iopath unconditionally
    "2.13": Train("1.8.0", "1.8.0"),
}

EXIT_UNSUPPORTED = 2


class Unsupported(Exception):
    """No CUDA stack to install here; `str()` says why and what is known."""


def known() -> str:
    """The trains this table knows, for messages."""
    lines = []
    for torch, train in TRAINS.items():
        extra = f" (+ {', '.join(train.extra)})" if train.extra else ""
        lines.append(f"torch {torch} -> fbgemm-gpu {train.fbgemm_gpu} + torchrec {train.torchrec}{extra}")
    return "; ".join(lines)


def train_for(torch_version: str) -> Train:
    """The pair for an installed torch version ('2.11.0+cu130', '2.13.0', '2.13.1.post1', ...)."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    train = TRAINS.get(f"{match[1]}.{match[2]}") if match else None
    if train is None:
        raise Unsupported(
            f"torch {torch_version}: no fbgemm-gpu / torchrec pair is known for it (known: {known()}). "
            "Install a torch of a known train, or add its pair to TRAINS in deploy/install/cuda_stack.py"
        )
    return train


def installed_torch() -> tuple[str, str | None]:
    """(torch's version, the CUDA version it was built for or None) as installed, without importing it."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise Unsupported(
            f"no torch in this environment ({sys.executable}): FLAVOR=cuda installs beside a CUDA torch "
            "that is already there (the venv sees PYTHON's packages: make setup FLAVOR=cuda "
            f"PYTHON=/path/to/python-with-torch). Known: {known()}"
        ) from None
    spec = importlib.util.find_spec("torch")
    cuda = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        text = (Path(folder) / "version.py").read_text() if (Path(folder) / "version.py").exists() else ""
        if found := re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE):
            cuda = found[1]
    return version, cuda


def is_cpu_build(torch_version: str) -> bool:
    """Whether a torch version names a CPU build by its local label ('2.13.0+cpu', '2.1.0+cpu.cxx11.abi')."""
    return re.search(r"\+cpu(?:$|[._-])", torch_version, re.IGNORECASE) is not None


def cpu_build(torch_version: str) -> str:
    """Why a CPU torch gets nothing here."""
    return (
        f"torch {torch_version} is a CPU build: FLAVOR=cuda installs beside a CUDA torch (install "
        f"one first, or run `make setup` for the CPU stack). Known: {known()}"
    )


def pip_commands(
    pip: str, torch_version: str, deps: list[str] | tuple[str, ...] = (), index_url: str | None = None
) -> list[list[str]]:
    """The pip commands that install torch_version's pair, torch pinned to what is installed."""
    train = train_for(torch_version)
    torch = f"torch=={torch_version}"  # satisfied as installed: pip keeps it, and resolves others to it
    index = ["--index-url", index_url] if index_url else []
    return [
        [pip, "install", "--quiet", torch, f"fbgemm-gpu=={train.fbgemm_gpu}", *index],
        [pip, "install", "--quiet", "--no-deps", f"torchrec=={train.torchrec}"],
        [pip, "install", "--quiet", torch, *deps, *train.extra],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pip", required=True, help="the pip to run (the venv's)")
    parser.add_argument("--index-url", help="where fbgemm-gpu's CUDA build comes from (default: pip's index)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--torch-version", help="plan for this torch instead of the installed one")
    parser.add_argument("deps", nargs="*", help="torchrec's dependencies (the Makefile's TORCHREC_DEPS)")
    args = parser.parse_args(argv)
    try:
        if args.torch_version:
            version = args.torch_version
            if is_cpu_build(version):  # a version's `+cpu` label says as much as a CUDA-less version.py
                raise Unsupported(cpu_build(version))
        else:
            version, cuda = installed_torch()
            if cuda is None:
                raise Unsupported(cpu_build(version))
            print(f"torch {version} (CUDA {cuda}) found: installing its train", file=sys.stderr)
        commands = pip_commands(args.pip, version, args.deps, args.index_url)
    except Unsupported as exc:
        print(f"make setup FLAVOR=cuda: {exc}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    for command in commands:
        print(shlex.join(command), flush=True)
        if not args.dry_run:
            subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
