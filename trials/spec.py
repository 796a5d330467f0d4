"""The trial spec: what one launch measures.

Pure Python on purpose: the engine builds specs with these classes and the trial validates them
before it imports torch or creates a process group, so a bad spec fails in milliseconds with one
line that names the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8")
SHARDING_TYPES = ("table_wise", "row_wise", "table_row_wise", "column_wise")
DEVICES = ("auto", "cpu", "cuda")

# Embedding rows are materialised on every launch: keep a typo from allocating a terabyte.
MAX_TABLE_BYTES = 8 * 1024**3


class SpecError(ValueError):
    """A spec that cannot run. `str()` is one line naming the offending field."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class TableSpec:
    name: str
    num_embeddings: int
    embedding_dim: int
    pooling_factor: int


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    tables: tuple[TableSpec, ...]
    sharding: str = "table_wise"
    # The batch size per rank the training job runs today: what tuning compares against.
    batch_size: int | None = None

    @property
    def feature_names(self) -> list[str]:
        return [f"f_{t.name}" for t in self.tables]

    @property
    def dim_sum(self) -> int:
        return sum(t.embedding_dim for t in self.tables)


@dataclass(frozen=True)
class CandidateSpec:
    """One point measured inside a launch. Fields left None fall back to the workload's."""

    fwd_precision: str = "fp32"
    bwd_precision: str = "fp32"
    batch_size: int = 512
    sharding: str | None = None
    num_threads: int | None = None

    def label(self) -> str:
        parts = [f"{self.fwd_precision}/{self.bwd_precision}", f"b{self.batch_size}"]
        if self.sharding:
            parts.append(self.sharding)
        if self.num_threads:
            parts.append(f"t{self.num_threads}")
        return " ".join(parts)


@dataclass(frozen=True)
class TrialSpec:
    workload: WorkloadSpec
    candidates: tuple[CandidateSpec, ...]
    warmup: int = 5
    iterations: int = 30
    device: str = "auto"
    seed: int = 0
    # Distinct input batches cycled through the measured loop (generated once per batch size).
    input_batches: int = 4
    extra: dict[str, Any] = field(default_factory=dict)

    def sharding_of(self, candidate: CandidateSpec) -> str:
        return candidate.sharding or self.workload.sharding

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["workload"]["tables"] = list(data["workload"]["tables"])
        if data["workload"]["batch_size"] is None:
            del data["workload"]["batch_size"]
        data["candidates"] = [{k: v for k, v in c.items() if v is not None} for c in data["candidates"]]
        if not data["extra"]:
            data.pop("extra")
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# --------------------------------------------------------------------------- validation


def _require(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise SpecError(where, f"must be an object, got {type(obj).__name__}")
    if key not in obj:
        raise SpecError(f"{where}.{key}" if where else key, "is required")
    return obj[key]


def _int(value: Any, where: str, *, low: int = 1, high: int | None = None) -> int:
    # bool is an int subclass; 1.0 or "4" in a spec is a mistake worth naming.
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(where, f"must be an integer, got {json.dumps(value)}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise SpecError(where, f"must be {bound}, got {value}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(where, f"must be a non-empty string, got {json.dumps(value)}")
    return value


def _choice(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(where, f"must be one of {', '.join(allowed)}; got {json.dumps(value)}")
    return str(value)


def _unknown_keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise SpecError(
            f"{where}.{extra[0]}" if where else extra[0],
            f"unknown field (allowed: {', '.join(sorted(allowed))})",
        )


def parse_table(obj: Any, where: str) -> TableSpec:
    fields = {"name", "num_embeddings", "embedding_dim", "pooling_factor"}
    if isinstance(obj, dict):
        _unknown_keys(obj, fields, where)
    table = TableSpec(
        name=_str(_require(obj, "name", where), f"{where}.name"),
        num_embeddings=_int(_require(obj, "num_embeddings", where), f"{where}.num_embeddings"),
        embedding_dim=_int(_require(obj, "embedding_dim", where), f"{where}.embedding_dim", high=65536),
        pooling_factor=_int(_require(obj, "pooling_factor", where), f"{where}.pooling_factor", high=100_000),
    )
    if table.num_embeddings * table.embedding_dim * 4 > MAX_TABLE_BYTES:
        raise SpecError(where, f"table of {table.num_embeddings} x {table.embedding_dim} fp32 exceeds 8 GiB")
    return table


def parse_workload(obj: Any, where: str = "workload") -> WorkloadSpec:
    if isinstance(obj, dict):
        _unknown_keys(obj, {"name", "tables", "sharding", "batch_size"}, where)
    name = _str(_require(obj, "name", where), f"{where}.name")
    raw_tables = _require(obj, "tables", where)
    if not isinstance(raw_tables, list) or not raw_tables:
        raise SpecError(f"{where}.tables", "must be a non-empty list of tables")
    tables = tuple(parse_table(t, f"{where}.tables[{i}]") for i, t in enumerate(raw_tables))
    names = [t.name for t in tables]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise SpecError(f"{where}.tables", f"table name {dup!r} appears more than once")
    sharding = _choice(obj.get("sharding", "table_wise"), f"{where}.sharding", SHARDING_TYPES)
    batch = obj.get("batch_size")
    batch = None if batch is None else _int(batch, f"{where}.batch_size", high=1 << 20)
    return WorkloadSpec(name=name, tables=tables, sharding=sharding, batch_size=batch)


def parse_candidate(obj: Any, where: str) -> CandidateSpec:
    fields = {"fwd_precision", "bwd_precision", "batch_size", "sharding", "num_threads"}
    if not isinstance(obj, dict):
        raise SpecError(where, f"must be an object, got {type(obj).__name__}")
    _unknown_keys(obj, fields, where)
    sharding = obj.get("sharding")
    threads = obj.get("num_threads")
    return CandidateSpec(
        fwd_precision=_choice(_require(obj, "fwd_precision", where), f"{where}.fwd_precision", PRECISIONS),
        bwd_precision=_choice(_require(obj, "bwd_precision", where), f"{where}.bwd_precision", PRECISIONS),
        batch_size=_int(_require(obj, "batch_size", where), f"{where}.batch_size", high=1 << 20),
        sharding=None if sharding is None else _choice(sharding, f"{where}.sharding", SHARDING_TYPES),
        num_threads=None if threads is None else _int(threads, f"{where}.num_threads", high=1024),
    )


def parse_spec(obj: Any) -> TrialSpec:
    """Validate a decoded spec. Raises SpecError naming the first bad field."""
    if not isinstance(obj, dict):
        raise SpecError("", f"spec must be a JSON object, got {type(obj).__name__}")
    allowed = {"workload", "candidates", "warmup", "iterations", "device", "seed"}
    allowed |= {"input_batches", "extra"}
    _unknown_keys(obj, allowed, "")
    workload = parse_workload(_require(obj, "workload", ""))
    raw = _require(obj, "candidates", "")
    if not isinstance(raw, list) or not raw:
        raise SpecError("candidates", "must be a non-empty list")
    candidates = tuple(parse_candidate(c, f"candidates[{i}]") for i, c in enumerate(raw))
    extra = obj.get("extra", {})
    if not isinstance(extra, dict):
        raise SpecError("extra", "must be an object")
    return TrialSpec(
        workload=workload,
        candidates=candidates,
        warmup=_int(obj.get("warmup", 5), "warmup", low=0, high=10_000),
        iterations=_int(obj.get("iterations", 30), "iterations", low=1, high=1_000_000),
        device=_choice(obj.get("device", "auto"), "device", DEVICES),
        seed=_int(obj.get("seed", 0), "seed", low=0),
        input_batches=_int(obj.get("input_batches", 4), "input_batches", high=64),
        extra=extra,
    )


def load_spec(path: str | Path) -> TrialSpec:
    """Read and validate a spec file; every failure is a SpecError with a one-line message."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError(str(path), f"cannot read spec: {exc.strerror}") from exc
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(
            str(path), f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except ValueError as exc:
        raise SpecError(str(path), f"not valid JSON ({exc})") from exc
    return parse_spec(obj)


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a spec never needs them.
    raise ValueError(f"{name} is not allowed in a spec")
