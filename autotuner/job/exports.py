"""Published configs as jobs see them: one JSON shape, rendered as shell exports or Slurm TaskProlog lines.

Pure standard library (trials.choices is too): the pre-job hook imports this on every job start.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from autotuner.envvars import served_problems
from autotuner.job.fingerprint import comparable, describe, describe_diff
from autotuner.text import printable
from trials.choices import PIPELINES, PRECISIONS, SHARDING_TYPES

FORMATS = ("json", "sh", "env", "slurm")
# What REST serves each format as (`GET /v1/configs/...?format=`).
MEDIA_TYPES = {
    "json": "application/json",
    "env": "text/plain; charset=utf-8",
    "slurm": "text/plain; charset=utf-8",
}
# Everything a config sets beside the NCCL variables travels as AUTOTUNER_* so a training script can
# adopt it (autotuner.job.qcomms turns them into TorchRec objects).
AUTOTUNER_KEYS = {
    "fwd_precision": "AUTOTUNER_FWD_PRECISION",
    "bwd_precision": "AUTOTUNER_BWD_PRECISION",
    "batch_size": "AUTOTUNER_BATCH_SIZE",
    "sharding": "AUTOTUNER_SHARDING",
    "num_threads": "AUTOTUNER_NUM_THREADS",
    "pipeline": "AUTOTUNER_PIPELINE",
    "lr_scale": "AUTOTUNER_LR_SCALE",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"  # autotuner.names
_LABEL = re.compile(rf"{_NAME_PART}/{_NAME_PART}/[1-9][0-9]{{0,9}}n/v[1-9][0-9]{{0,9}}")
_POSITIVE = re.compile(r"[1-9][0-9]{0,9}")
_DECIMAL = re.compile(r"[0-9]{1,6}(\.[0-9]{1,12})?([eE]-?[0-9]{1,2})?")
MAX_LR_SCALE = 1024.0  # trials.spec's bound on the factor a convergence check trains with
MIN_LR_SCALE = 1 / MAX_LR_SCALE  # a batch 2**20 times below the job's, at the linear rule
MAX_BATCH = 1 << 20  # trials.spec's bound on a per-rank batch
MAX_THREADS = 4096  # more torch threads than any node has cores
MAX_EXPORTS = 256  # a config sets a few variables; the registry knows fewer than this
MAX_NAME = 64  # the longest NCCL / fabric variable is about 40 characters


def is_lr_scale(value: str) -> bool:
    """A plain decimal within [MIN_LR_SCALE, MAX_LR_SCALE] (no sign, nan, inf or spaces: 1e-99 would
    train at no learning rate at all)."""
    return _DECIMAL.fullmatch(value) is not None and MIN_LR_SCALE <= float(value) <= MAX_LR_SCALE


def is_count(value: str, most: int) -> bool:
    """Plain ASCII digits, 1 to `most` (a batch no trial could run would crash the job)."""
    return _POSITIVE.fullmatch(value) is not None and int(value) <= most


def _text(value: object) -> str:
    """An exported value; a float (the learning-rate factor) to 6 significant digits, unless those fall
    outside what the gate accepts (1/1024, the least factor, rounds to 0.000976562, below it): then
    in full (repr: the shortest text that reads back as the same float)."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.6g}"
    return repr(value) if not is_lr_scale(text) and is_lr_scale(repr(value)) else text


def _one_of(choices: tuple[str, ...]) -> Any:
    return lambda value: value in choices


# The AUTOTUNER_* variables a config may carry (autotuner.job.qcomms reads them), and their values.
_AUTOTUNER_VALUES = {
    "AUTOTUNER_FWD_PRECISION": _one_of(PRECISIONS),
    "AUTOTUNER_BWD_PRECISION": _one_of(PRECISIONS),
    "AUTOTUNER_BATCH_SIZE": lambda value: is_count(value, MAX_BATCH),
    "AUTOTUNER_SHARDING": _one_of(SHARDING_TYPES),
    "AUTOTUNER_NUM_THREADS": lambda value: is_count(value, MAX_THREADS),
    "AUTOTUNER_PIPELINE": _one_of(PIPELINES),
    "AUTOTUNER_LR_SCALE": is_lr_scale,
    "AUTOTUNER_CONFIG": lambda value: _LABEL.fullmatch(value) is not None,
}


def config_to_dict(row: Any, validation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The public JSON of a stored Config row (what REST returns and the hook caches). `validation`:
    what its re-validations say (autotuner.store.validations.validation_view); without it, the
    version stands on its study, validated when published on the fingerprint it recorded."""
    exports = dict(row.env)
    for attr, var in AUTOTUNER_KEYS.items():
        value = getattr(row, attr)
        if value is not None:
            exports[var] = _text(value)
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
        "lr_scale": row.lr_scale,
        "exports": exports,
        "evidence": row.evidence if isinstance(row.evidence, dict) else {},  # a row written by hand: none
        "fingerprint": row.fingerprint if isinstance(row.fingerprint, dict) else {},
        "study_id": row.study_id,
        "validated_at": _iso((validation or {}).get("validated_at") or row.created_at),
        "validated_on": dict(
            (validation or {}).get("validated_on") or comparable(row.fingerprint, row.nodes)
        ),
        "last_validation": (validation or {}).get("last_validation"),
        "flagged": (validation or {}).get("flagged"),
    }


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def check_exports(exports: Mapping[Any, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(what a job may be handed, {dropped name: why}) of a config's exports: the one gate between a
    config and a job's environment. The service serves a config only when nothing is dropped
    (api/cache.py); the pre-job hook drops what fails from every answer (autotuner.job.hook). NCCL and
    fabric variables go through the registry's rules for what a publish may carry
    (autotuner.envvars.served_problems); AUTOTUNER_* only the names above with their values."""
    kept: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name, value in exports.items():
        plain = isinstance(name, str) and len(name) <= MAX_NAME and _NAME.fullmatch(name)
        shown = name if plain else _unique(_one_line(name), dropped)  # every name is shown, none at length
        if not isinstance(name, str) or not isinstance(value, str):
            dropped[shown] = "not a string name and a string value"
        elif len(name) > MAX_NAME:
            dropped[shown] = (
                f"a name of {len(name)} characters (no variable a config sets has over {MAX_NAME})"
            )
        elif name.startswith("AUTOTUNER_") and name in _AUTOTUNER_VALUES:
            if _AUTOTUNER_VALUES[name](value):
                kept[name] = value
            else:
                dropped[shown] = f"{_one_line(value)} is not a value of {name}"
        else:
            problems = served_problems(name, value)
            if problems:
                dropped[shown] = problems[0].message
            else:
                kept[name] = value
    return kept, dropped


def checked_config(answer: object) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """A config as a job may use it: (the config with only what passed the gate, {dropped: why}),
    or (None, {"": why}) for an answer that is not a config at all (not an object, no `exports`
    object). What a hook uses, prints or caches is only ever this."""
    if not isinstance(answer, dict):
        return None, {"": f"the answer is {type(answer).__name__}, not a config object"}
    exports = answer.get("exports")
    if not isinstance(exports, dict):
        return None, {"": f"the answer's exports is {type(exports).__name__}, not an object"}
    if len(exports) > MAX_EXPORTS:  # checked one by one, a flood would hold the job's start
        return None, {
            "": f"the answer's exports has {len(exports)} entries (a config has at most {MAX_EXPORTS})"
        }
    kept, dropped = check_exports(exports)
    _drop_partners(kept, dropped)
    env = answer.get("env")
    # Nothing else of the answer passes as sent: a field beside the exports (batch_size "$(...)", a
    # sharding "../../etc", qcomms naming LD_PRELOAD) would escape the gate in what a job reads, prints
    # or caches. The rest is read back from the checked exports; validated_on kept as short text.
    config: dict[str, Any] = {
        "exports": kept,
        "env": {k: kept[k] for k in env if k in kept} if isinstance(env, dict) else {},
        **_from_exports(kept),
    }
    validated_on = answer.get("validated_on")
    if isinstance(validated_on, dict):
        config["validated_on"] = {
            k: printable(str(v))[:200] for k, v in list(validated_on.items())[:MAX_EXPORTS]
            if isinstance(k, str) and _NAME.fullmatch(k) and isinstance(v, (str, int)) and not isinstance(v, bool)
        }  # fmt: skip
    return config, dropped


# What a training script takes together or not at all (autotuner.job.qcomms: _KEPT and tuned()): a
# config is validated whole, and half a precision pair or a batch without its learning-rate factor
# was never measured. The service's gate drops nothing from what it serves; a hook's answer may.
TAKEN_TOGETHER = (
    ("AUTOTUNER_FWD_PRECISION", "AUTOTUNER_BWD_PRECISION"),
    ("AUTOTUNER_BATCH_SIZE", "AUTOTUNER_LR_SCALE"),
)


def _drop_partners(kept: dict[str, str], dropped: dict[str, str]) -> None:
    """Drops, with its reason, what goes with a dropped variable, and a factor without its batch."""
    for pair in TAKEN_TOGETHER:
        gone = next((name for name in pair if name in dropped), None)
        for name in pair:
            if gone is not None and name in kept:
                del kept[name]
                dropped[name] = (
                    f"goes with {gone}, which was dropped: the two are taken together or not at all"
                )
    if "AUTOTUNER_LR_SCALE" in kept and "AUTOTUNER_BATCH_SIZE" not in kept:
        del kept["AUTOTUNER_LR_SCALE"]
        dropped["AUTOTUNER_LR_SCALE"] = (
            "a learning-rate factor without AUTOTUNER_BATCH_SIZE (it is the factor of a batch change)"
        )


def _from_exports(kept: Mapping[str, str]) -> dict[str, Any]:
    """A checked config's fields beside its exports, as its checked AUTOTUNER_* exports say them."""
    out: dict[str, Any] = {}
    label = kept.get("AUTOTUNER_CONFIG")
    if label is not None:  # cluster/workload/Nn/vV, checked whole
        cluster, workload, nodes, version = label.split("/")
        out.update(cluster=cluster, workload=workload, nodes=int(nodes[:-1]), version=int(version[1:]))
    fwd, bwd = kept.get("AUTOTUNER_FWD_PRECISION"), kept.get("AUTOTUNER_BWD_PRECISION")
    if fwd is not None or bwd is not None:
        out["qcomms"] = {"forward_precision": fwd, "backward_precision": bwd}
    for field, var in AUTOTUNER_KEYS.items():
        value = kept.get(var)
        if value is not None and field not in ("fwd_precision", "bwd_precision"):
            out[field] = float(value) if field == "lr_scale" else int(value) if value.isdigit() else value
    return out


def mismatch_note(label: str, validated_on: Mapping[str, Any] | None, diff: Mapping[str, Any]) -> str:
    """What differs between the stack a config was validated on and a job's, as one printable line
    whatever the stored fingerprint holds (a newline there would be an export line): what the hook
    warns and the service's export lines say alike."""
    return printable(f"{label} was validated on {describe(validated_on)}; this job differs: "
                     f"{describe_diff(diff)}")[:600]  # fmt: skip


def _unique(shown: str, dropped: dict[str, str]) -> str:
    """Names cut to the same first 60 characters each get a line: one overwrote the other."""
    n, key = 1, shown
    while key in dropped:
        n += 1
        key = f"{shown} (#{n})"
    return key


def _one_line(value: object, limit: int = 60) -> str:
    """Any value as printable ASCII on one line (repr, cut short): safe in a warning or a comment."""
    text = repr(value).encode("ascii", "backslashreplace").decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def export_lines(exports: dict[str, str]) -> list[str]:
    """`export K='V'` lines. Names are checked, values always quoted: this text goes to a shell."""
    lines = []
    for key in sorted(exports):
        if not _NAME.fullmatch(key):
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
