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
# How the job drives a step: a plain loop, or one of TorchRec's train pipelines (which overlap stages
# on CUDA side streams; fused_sparse_dist only where the installed torchrec has it).
PIPELINES = ("none", "base", "sparse_dist", "semi_sync", "fused_sparse_dist")
COMPUTE_KERNELS = ("fused", "dense")  # fused: the optimizer runs inside the embedding backward
INTERACTIONS = ("dot", "dcn")
EMBEDDING_OPTIMIZERS = ("exact_sgd", "exact_adagrad", "exact_rowwise_adagrad")
DENSE_OPTIMIZERS = ("sgd", "adagrad", "adam")

# Embedding rows are materialised on every launch: keep a typo from allocating a terabyte.
MAX_TABLE_BYTES = 8 * 1024**3
# Shardings whose pooled embeddings leave through a reduce-scatter (row_wise always; table_row_wise
# inside a host, then an all-to-all across hosts).
REDUCE_SCATTER_SHARDINGS = ("row_wise", "table_row_wise")


def comm_precision_problem(fwd: str, bwd: str, sharding: str) -> str | None:
    """Why comm precisions (fwd, bwd) cannot run with `sharding`; None when they can.

    int8 on a reduce-scatter: the forward reduce-scatter sums what is on the wire, and fused row-wise
    int8 (uint8 codes with a per-row fp32 scale and bias) cannot be summed, so no context makes it
    right. TorchRec also calls FBGEMM's int8 codec there without the context it needs, forward and
    in the backward all-gather alike, so a job with QCommsConfig int8 fails with FBGEMM's
    AssertionError 'Unexpected `None`'. (fp8 is no such case: TorchRec's registry swaps it for
    fp16 / bf16 on a reduce-scatter, see trials.codecs.effective_precisions.)
    """
    if sharding not in REDUCE_SCATTER_SHARDINGS or "int8" not in (fwd, bwd):
        return None
    return (
        f"int8 comms cannot run with {sharding} sharding: its pooled embeddings leave through a "
        "reduce-scatter, which sums the bytes on the wire, and row-wise int8 (uint8 codes with a "
        "per-row scale and bias) cannot be summed; TorchRec also gives FBGEMM's int8 codec no "
        "context there, forward or backward (AssertionError 'Unexpected None'). Use int8 with "
        f"table_wise or column_wise, or fp16/bf16 with {sharding}"
    )


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
class DenseSpec:
    """The dense part of a DLRM job: bottom MLP over the dense features, interaction, top MLP."""

    in_features: int
    arch: tuple[int, ...]  # the last layer is the embedding dim (DLRM projects dense into it)
    over_arch: tuple[int, ...]  # the last layer is 1 (the logit)
    interaction: str = "dot"  # dot: DLRM; dcn: DLRM_DCN (low-rank cross net)


@dataclass(frozen=True)
class OptimizerSpec:
    embedding: str = "exact_adagrad"
    embedding_lr: float = 0.01
    dense: str = "adagrad"
    dense_lr: float = 0.01


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    tables: tuple[TableSpec, ...]
    sharding: str = "table_wise"
    # The batch size per rank the training job runs today: what tuning compares against.
    batch_size: int | None = None
    # Without `dense`, the trial is the sparse part alone (pooled embeddings into a linear loss).
    dense: DenseSpec | None = None
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    compute_kernel: str = "fused"
    # The comm precision (forward, backward) the job runs today: the baseline's.
    comm_precision: tuple[str, str] = ("fp32", "fp32")

    @property
    def default_pipeline(self) -> str:
        """What a job of this shape runs unless told: TorchRec's sparse-dist pipeline for DLRM."""
        return "sparse_dist" if self.dense is not None else "none"

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
    pipeline: str | None = None
    model_seed: int | None = None  # quality launches: the model's initialization (None: the spec's seed)
    # quality launches: the learning rates' multiplier (a rule for a batch change) and this candidate's
    # training budget in samples over all ranks (None: quality.train_samples)
    lr_scale: float | None = None
    train_samples: int | None = None
    # quality launches: past the common budget, stop once the held-out log loss reaches the score of
    # this earlier candidate (the baseline of the same seed): time to quality needs no more
    stop_at: int | None = None

    def label(self) -> str:
        parts = [f"{self.fwd_precision}/{self.bwd_precision}", f"b{self.batch_size}"]
        if self.sharding:
            parts.append(self.sharding)
        if self.num_threads:
            parts.append(f"t{self.num_threads}")
        if self.pipeline:
            parts.append(self.pipeline)
        if self.model_seed is not None:
            parts.append(f"seed {self.model_seed}")
        if self.lr_scale is not None:
            parts.append(f"lr x{self.lr_scale:g}")
        return " ".join(parts)


@dataclass(frozen=True)
class QualitySpec:
    """A convergence check instead of timing: each candidate trains a fresh model on a learnable
    synthetic task (or the user's data, `data` = "module:function") on the same samples, then is
    scored on a held-out set."""

    train_samples: int = 1 << 18  # over all ranks
    eval_samples: int = 1 << 15
    data_seed: int = 0
    data: str | None = None
    # Held-out log loss every train_samples/checkpoints samples along the way (a candidate with a
    # larger budget goes on at the same spacing): the curve that time to quality is read from.
    checkpoints: int = 1


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
    quality: QualitySpec | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def sharding_of(self, candidate: CandidateSpec) -> str:
        return candidate.sharding or self.workload.sharding

    def pipeline_of(self, candidate: CandidateSpec) -> str:
        return candidate.pipeline or self.workload.default_pipeline

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["workload"] = workload_to_dict(self.workload)
        data["candidates"] = [{k: v for k, v in c.items() if v is not None} for c in data["candidates"]]
        if not data["extra"]:
            data.pop("extra")
        if data["quality"] is None:
            data.pop("quality")
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


def workload_to_dict(workload: WorkloadSpec) -> dict[str, Any]:
    """The workload as a spec declares it (optional sections left out when not given)."""
    data = asdict(workload)
    data["tables"] = list(data["tables"])
    if data["batch_size"] is None:
        del data["batch_size"]
    if data["dense"] is None:
        del data["dense"]
    else:
        data["dense"] = {k: list(v) if isinstance(v, tuple) else v for k, v in data["dense"].items()}
    data["comm_precision"] = list(data["comm_precision"])
    return data


def _float(value: Any, where: str, *, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= high:
        raise SpecError(where, f"must be a number > 0 and <= {high:g}, got {json.dumps(value)}")
    return float(value)


def _layers(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(where, f"must be a non-empty list of layer sizes, got {json.dumps(value)}")
    return tuple(_int(v, f"{where}[{i}]", high=65536) for i, v in enumerate(value))


def parse_dense(obj: Any, tables: tuple[TableSpec, ...], where: str) -> DenseSpec:
    """DLRM's shape rules, checked here so a bad one fails before torch is imported."""
    if isinstance(obj, dict):
        _unknown_keys(obj, {"in_features", "arch", "over_arch", "interaction"}, where)
    dense = DenseSpec(
        in_features=_int(_require(obj, "in_features", where), f"{where}.in_features", high=1 << 20),
        arch=_layers(_require(obj, "arch", where), f"{where}.arch"),
        over_arch=_layers(_require(obj, "over_arch", where), f"{where}.over_arch"),
        interaction=_choice(obj.get("interaction", "dot"), f"{where}.interaction", INTERACTIONS),
    )
    dims = sorted({t.embedding_dim for t in tables})
    if len(dims) > 1:
        raise SpecError(f"{where}", f"DLRM needs one embedding_dim for every table, got {dims}")
    if dense.arch[-1] != dims[0]:
        raise SpecError(
            f"{where}.arch", f"the last layer must be the embedding dim {dims[0]}, got {dense.arch[-1]}"
        )
    if dense.over_arch[-1] != 1:
        raise SpecError(
            f"{where}.over_arch", f"the last layer must be 1 (the logit), got {dense.over_arch[-1]}"
        )
    return dense


def parse_optimizer(obj: Any, where: str) -> OptimizerSpec:
    if not isinstance(obj, dict):
        raise SpecError(where, f"must be an object, got {type(obj).__name__}")
    _unknown_keys(obj, {"embedding", "embedding_lr", "dense", "dense_lr"}, where)
    default = OptimizerSpec()
    return OptimizerSpec(
        embedding=_choice(
            obj.get("embedding", default.embedding), f"{where}.embedding", EMBEDDING_OPTIMIZERS
        ),
        embedding_lr=_float(obj.get("embedding_lr", default.embedding_lr), f"{where}.embedding_lr", high=100),
        dense=_choice(obj.get("dense", default.dense), f"{where}.dense", DENSE_OPTIMIZERS),
        dense_lr=_float(obj.get("dense_lr", default.dense_lr), f"{where}.dense_lr", high=100),
    )


def parse_workload(obj: Any, where: str = "workload") -> WorkloadSpec:
    if isinstance(obj, dict):
        fields = {
            "name",
            "tables",
            "sharding",
            "batch_size",
            "dense",
            "optimizer",
            "compute_kernel",
            "comm_precision",
        }
        _unknown_keys(obj, fields, where)
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
    dense = obj.get("dense")
    optimizer = parse_optimizer(obj.get("optimizer", {}), f"{where}.optimizer")
    kernel = _choice(obj.get("compute_kernel", "fused"), f"{where}.compute_kernel", COMPUTE_KERNELS)
    if kernel == "dense" and optimizer.embedding == "exact_rowwise_adagrad":
        raise SpecError(
            f"{where}.optimizer.embedding", "exact_rowwise_adagrad runs fused only (compute_kernel fused)"
        )
    comm_precision = _precision_pair(obj.get("comm_precision", ["fp32", "fp32"]), f"{where}.comm_precision")
    problem = comm_precision_problem(*comm_precision, sharding)
    if problem:  # the job as declared cannot run: its baseline would fail in TorchRec
        raise SpecError(f"{where}.comm_precision", problem)
    return WorkloadSpec(
        name=name,
        tables=tables,
        sharding=sharding,
        batch_size=batch,
        dense=None if dense is None else parse_dense(dense, tables, f"{where}.dense"),
        optimizer=optimizer,
        compute_kernel=kernel,
        comm_precision=comm_precision,
    )


def _precision_pair(value: Any, where: str) -> tuple[str, str]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise SpecError(where, f'must be [forward, backward], e.g. ["fp32", "fp32"]; got {json.dumps(value)}')
    return _choice(value[0], f"{where}[0]", PRECISIONS), _choice(value[1], f"{where}[1]", PRECISIONS)


def parse_candidate(obj: Any, where: str) -> CandidateSpec:
    fields = {
        "fwd_precision",
        "bwd_precision",
        "batch_size",
        "sharding",
        "num_threads",
        "pipeline",
        "model_seed",
        "lr_scale",
        "train_samples",
        "stop_at",
    }
    if not isinstance(obj, dict):
        raise SpecError(where, f"must be an object, got {type(obj).__name__}")
    _unknown_keys(obj, fields, where)
    sharding = obj.get("sharding")
    threads = obj.get("num_threads")
    pipeline = obj.get("pipeline")
    model_seed = obj.get("model_seed")
    lr_scale = obj.get("lr_scale")
    budget = obj.get("train_samples")
    stop_at = obj.get("stop_at")
    return CandidateSpec(
        fwd_precision=_choice(_require(obj, "fwd_precision", where), f"{where}.fwd_precision", PRECISIONS),
        bwd_precision=_choice(_require(obj, "bwd_precision", where), f"{where}.bwd_precision", PRECISIONS),
        batch_size=_int(_require(obj, "batch_size", where), f"{where}.batch_size", high=1 << 20),
        sharding=None if sharding is None else _choice(sharding, f"{where}.sharding", SHARDING_TYPES),
        num_threads=None if threads is None else _int(threads, f"{where}.num_threads", high=1024),
        pipeline=None if pipeline is None else _choice(pipeline, f"{where}.pipeline", PIPELINES),
        model_seed=None if model_seed is None else _int(model_seed, f"{where}.model_seed", low=0),
        lr_scale=None if lr_scale is None else _float(lr_scale, f"{where}.lr_scale", high=1024),
        train_samples=None if budget is None else _int(budget, f"{where}.train_samples", high=1 << 30),
        stop_at=None if stop_at is None else _int(stop_at, f"{where}.stop_at", low=0),
    )


def parse_quality(obj: Any, workload: WorkloadSpec) -> QualitySpec:
    if not isinstance(obj, dict):
        raise SpecError("quality", f"must be an object, got {type(obj).__name__}")
    _unknown_keys(obj, {"train_samples", "eval_samples", "data_seed", "data", "checkpoints"}, "quality")
    if workload.dense is None:
        raise SpecError("quality", "a convergence check trains a DLRM: the workload needs a dense part")
    data = obj.get("data")
    if data is not None and (not isinstance(data, str) or data.count(":") != 1):
        raise SpecError("quality.data", f'must be "module:function", got {json.dumps(data)}')
    default = QualitySpec()
    return QualitySpec(
        train_samples=_int(
            obj.get("train_samples", default.train_samples), "quality.train_samples", high=1 << 30
        ),
        eval_samples=_int(
            obj.get("eval_samples", default.eval_samples), "quality.eval_samples", high=1 << 24
        ),
        data_seed=_int(obj.get("data_seed", 0), "quality.data_seed", low=0),
        data=data,
        checkpoints=_int(obj.get("checkpoints", 1), "quality.checkpoints", high=64),
    )


def parse_spec(obj: Any) -> TrialSpec:
    """Validate a decoded spec. Raises SpecError naming the first bad field."""
    if not isinstance(obj, dict):
        raise SpecError("", f"spec must be a JSON object, got {type(obj).__name__}")
    allowed = {"workload", "candidates", "warmup", "iterations", "device", "seed"}
    allowed |= {"input_batches", "extra", "quality"}
    _unknown_keys(obj, allowed, "")
    workload = parse_workload(_require(obj, "workload", ""))
    raw = _require(obj, "candidates", "")
    if not isinstance(raw, list) or not raw:
        raise SpecError("candidates", "must be a non-empty list")
    candidates = tuple(parse_candidate(c, f"candidates[{i}]") for i, c in enumerate(raw))
    for i, c in enumerate(candidates):
        if c.stop_at is not None and c.stop_at >= i:
            raise SpecError(
                f"candidates[{i}].stop_at", f"must name an earlier candidate (< {i}), got {c.stop_at}"
            )
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
        quality=None if obj.get("quality") is None else parse_quality(obj["quality"], workload),
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
