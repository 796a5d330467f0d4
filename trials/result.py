"""The trial result: schema version and the launch facts every result records (pure Python)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# Where a step's time goes (`breakdown_ms`, trials.runner.breakdown): each kind of comm's wire time
# (trials.probe.COMM_KINDS), compute, and the rest (exposed comm).
BREAKDOWN_PARTS = ("input_dist", "sparse_comm", "dense_comm", "compute", "exposed_comm")

# How `trials.run` exits; the executors read these to say how a launch ended.
EXIT_OK, EXIT_CANDIDATE_FAILED, EXIT_BAD_INPUT, EXIT_LAUNCH_FAILED = 0, 1, 2, 3

# Where pods share no disk with the tuner, rank 0 prints the result as one "AUTOTUNER_RESULT {json}" line
# (`trials.run --print-result`), and the Kubernetes executor reads it back from the pod's log.
RESULT_MARKER = "AUTOTUNER_RESULT"

# Variables that change how NCCL / aws-ofi-nccl / libfabric / ProcessGroupNCCL behave.
ENV_PREFIXES = ("NCCL_", "OFI_NCCL_", "FI_", "TORCH_NCCL_")


def collect_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The comm-relevant variables of an environment, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES)}


def read_nccl_conf_files(environ: Mapping[str, str]) -> dict[str, str]:
    """NCCL fills unset variables from these files: record them, or a result can't be explained."""
    candidates = [
        environ.get("NCCL_CONF_FILE") or str(Path(environ.get("HOME", "/root")) / ".nccl.conf"),
        "/etc/nccl.conf",
    ]
    found = {}
    for path in candidates:
        try:
            found[path] = Path(path).read_text(errors="replace")[:4096]
        except OSError:
            continue
    return found


def nvidia_driver_version(proc: str = "/proc/driver/nvidia/version") -> str | None:
    """The NVIDIA kernel driver of this node (`... Kernel Module  550.54.15  ...`), None without one:
    part of the fingerprint a published config is validated on (autotuner.job.fingerprint reads the same
    file on the job side)."""
    try:
        text = Path(proc).read_text(errors="replace")[:4096]
    except OSError:
        return None
    m = re.search(r"Kernel Module\b[^\n]*?\s(\d+\.\d+(?:\.\d+)*)\s", text)
    return m.group(1) if m else None


def finite_json(data: Any) -> Any:
    """`data` with every NaN or infinity made null: JSON has no such number (Python writes `NaN`, which
    strict parsers refuse), and a figure that is not a number is not one to rank candidates by."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    return data


def strict_json(data: Any, **layout: Any) -> str:
    """`data` as strict JSON, a NaN or infinity written as null (finite_json); `layout`: json.dumps's."""
    return json.dumps(finite_json(data), default=str, allow_nan=False, **layout)


# What rank 0 prints when the result it measured cannot be written (a full disk, a read-only share): the
# executor reads it in the launch's log, where the trial's exit code (torchrun's 1) does not say it.
UNWRITTEN = "trials.run: cannot write the result to"


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON so a reader never sees half a file (the executor may poll for it); strict JSON."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = strict_json(data, indent=2) + "\n"
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{path}: result schema_version {version!r}, expected {SCHEMA_VERSION}")
    return data
