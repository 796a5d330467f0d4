"""Published configs as jobs see them: one JSON shape, rendered as shell exports or Slurm TaskProlog lines.

Pure standard library: the pre-job hook imports this on every job start.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

FORMATS = ("json", "sh", "env", "slurm")
# What REST serves each format as (`GET /v1/configs/...?format=`).
MEDIA_TYPES = {
    "json": "application/json",
    "env": "text/plain; charset=utf-8",
    "slurm": "text/plain; charset=utf-8",
}
# Everything a config sets beside the NCCL variables travels as AUTOTUNER_* so a training script can
# adopt it (autotuner.qcomms turns them into TorchRec objects).
AUTOTUNER_KEYS = {
    "fwd_precision": "AUTOTUNER_FWD_PRECISION",
    "bwd_precision": "AUTOTUNER_BWD_PRECISION",
    "batch_size": "AUTOTUNER_BATCH_SIZE",
    "sharding": "AUTOTUNER_SHARDING",
    "num_threads": "AUTOTUNER_NUM_THREADS",
    "pipeline": "AUTOTUNER_PIPELINE",
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def config_to_dict(row: Any) -> dict[str, Any]:
    """The public JSON of a stored Config row (what REST returns and the hook caches)."""
    exports = dict(row.env)
    for attr, var in AUTOTUNER_KEYS.items():
        value = getattr(row, attr)
        if value is not None:
            exports[var] = str(value)
    exports["AUTOTUNER_CONFIG"] = f"{row.cluster.name}/{row.workload.name}/{row.nodes}n/v{row.version}"
    return {
        "cluster": row.cluster.name,
        "workload": row.workload.name,
        "nodes": row.nodes,
        "version": row.version,
        "pinned": row.pinned,
        "created_at": row.created_at.isoformat(),
        "env": dict(row.env),
        "qcomms": {"forward_precision": row.fwd_precision, "backward_precision": row.bwd_precision},
        "batch_size": row.batch_size,
        "sharding": row.sharding,
        "num_threads": row.num_threads,
        "pipeline": row.pipeline,
        "exports": exports,
        "evidence": row.evidence,
        "fingerprint": row.fingerprint,
        "study_id": row.study_id,
    }


def export_lines(exports: dict[str, str]) -> list[str]:
    """`export K='V'` lines. Names are checked, values always quoted: this text goes to a shell."""
    lines = []
    for key in sorted(exports):
        if not _NAME.match(key):
            raise ValueError(f"refusing to export {key!r}: not a valid variable name")
        lines.append(f"export {key}={shlex.quote(str(exports[key]))}")
    return lines


def render(config: dict[str, Any] | None, fmt: str) -> str:
    """A config as `json`, `sh`/`env` (export lines) or `slurm` (TaskProlog: Slurm reads the
    `export NAME=value` lines a TaskProlog prints into every task's environment)."""
    import json

    if fmt == "json":
        return json.dumps(config, indent=2, sort_keys=True)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if config is None:
        return ""
    lines = export_lines(config["exports"])
    if fmt == "slurm":
        # Slurm does not run the TaskProlog output through a shell: it splits at the first '=' and
        # takes the rest literally, so quotes would become part of the value.
        for key in sorted(config["exports"]):
            if "\n" in str(config["exports"][key]):
                raise ValueError(f"{key}: a newline cannot travel through a TaskProlog")
        lines = [f"export {k}={config['exports'][k]}" for k in sorted(config["exports"])]
    header = f"# nccl-autotuner {config['exports'].get('AUTOTUNER_CONFIG', '')}"
    return "\n".join([header, *lines]) + "\n"
