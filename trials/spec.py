"""The trial spec: what one launch measures, as pydantic models (`extra="forbid"`, frozen).

`TrialSpec` is the whole launch: the workload (`WorkloadSpec`: the job's tables, dense part,
optimizers, sharding, batch and comm precision), the candidates measured in this one process
environment (`CandidateSpec`), warmup, iterations, device, and for a convergence check `quality`.
The engine builds specs with these models, the REST API documents a study's workload with
`WorkloadSpec`'s JSON schema, and the trial validates its spec before it imports torch or creates
a process group, so a bad spec fails in a fraction of a second with one line that names the field
(`SpecError`, e.g. `candidates[0].batch_size: must be between 1 and 1048576, got 0`).

The values each field takes are written once, in trials.choices. pydantic is the only third-party
import here (no torch): tests/test_imports.py holds trials/ to that.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    StrictBool,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

from trials.choices import (
    REDUCE_SCATTER_SHARDINGS,
    ComputeKernel,
    DenseOptimizer,
    Device,
    EmbeddingOptimizer,
    Interaction,
    Pipeline,
    Precision,
    Sharding,
)

# Embedding rows are materialised on every launch: keep a typo from allocating a terabyte. The comm a
# trial times depends on the batch and the pooled dims, not on the rows, so these bounds cost no fidelity.
MAX_TABLE_BYTES = 8 * 1024**3
MAX_WORKLOAD_TABLE_BYTES = 64 * 1024**3  # every table of a workload, fp32, across the world
MAX_DENSE_PARAMETERS = 1 << 28  # the dense model's: bottom MLP, DCN cross net, top MLP (1 GiB of fp32)
MAX_TABLES = 4096  # tables of one workload (the engine's default AUTOTUNER_MAX_TABLES)
MAX_INPUT_BYTES = 8 * 1024**3  # one rank's input batches of one batch size (WorkloadSpec.input_sample_bytes)
MAX_SAMPLE_BYTES = 8 * 1024**3  # one rank's samples of a convergence check, for training and held out
# A sample's label (fp32) and its logit's two parts (fp32) while it is labelled: 12 bytes; and 4 for what
# the allocator keeps of the build's freed temporaries (one build of 6M one-lookup samples, 192 MB of
# them, grew the process by 176 to 216 MB from run to run: counted at 12, the peak passed the count).
SAMPLE_WORK_BYTES = 16
TEACHER_DIM = 4  # the convergence check's hidden teacher: its embeddings' width (fp32)
TEACHER_CHUNK_LOOKUPS = 1 << 18  # what teacher_samples draws or gathers at a time (lookups)
TEACHER_CHUNK_BYTES = 64 * TEACHER_CHUNK_LOOKUPS  # one chunk's uniforms, ids and gathered rows, and more
MAX_BATCH = 1 << 20
MAX_SEED = 2**32 - 1  # torch's generators take 64 bits: room for seed x 1000 + rank and the like
# Held-out samples each rank scores in a convergence check: fewer, and a log loss or AUC of a handful
# of samples (of one class, AUC has no value at all) says nothing.
MIN_EVAL_SAMPLES_PER_RANK = 64
MAX_ACTIVATION_BYTES = 32 * 1024**3  # what one rank's step keeps for backward (fp32), at its largest batch
GIB = 1024**3
# DLRM_DCN's cross net as trials.model builds it (tests/trials/test_dense_size.py holds the two equal).
DCN_LAYERS, DCN_LOW_RANK = 3, 512


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


# --------------------------------------------------------------------------- field rules


class _Problem(ValueError):
    """A rule a validator found broken, at `at` below the value it validated (a field of a model)."""

    def __init__(self, problem: str, *at: str | int) -> None:
        super().__init__(problem)
        self.at = at


def _shown(value: Any) -> str:
    return json.dumps(value, default=repr)


@dataclass(frozen=True)
class _Int:
    """An integer between `low` and `high`, the message saying both bounds; the JSON schema is an
    integer with minimum / maximum. A bool, 8.5 or "8" is a mistake worth naming; 8.0 is the integer
    8 (JSON has one kind of number, and JSON Schema's integer admits it)."""

    low: int = 1
    high: int | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        inner = core_schema.int_schema(ge=self.low, le=self.high, strict=True)
        return core_schema.no_info_wrap_validator_function(self._check, inner)

    def _check(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Problem(f"must be an integer, got {_shown(value)}")
        if value < self.low or (self.high is not None and value > self.high):
            bound = f">= {self.low}" if self.high is None else f"between {self.low} and {self.high}"
            raise _Problem(f"must be {bound}, got {value}")
        return handler(value)


@dataclass(frozen=True)
class _Number:
    """A number > 0 and <= `high` (learning rates and their multipliers)."""

    high: float

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        inner = core_schema.float_schema(gt=0, le=self.high, allow_inf_nan=False)
        return core_schema.no_info_wrap_validator_function(self._check, inner)

    def _check(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= self.high:
            raise _Problem(f"must be a number > 0 and <= {self.high:g}, got {_shown(value)}")
        return handler(value)


Text = Annotated[str, StringConstraints(strict=True, min_length=1, pattern=r"\S")]
Layers = Annotated[tuple[Annotated[int, _Int(high=65536)], ...], Field(min_length=1)]
BatchSize = Annotated[int, _Int(high=MAX_BATCH)]
Seed = Annotated[int, _Int(low=0, high=MAX_SEED)]
# A table's name is a module's name in TorchRec's EmbeddingBagCollection (a key of a torch ModuleDict):
# torch refuses one with a "." and one that is already an attribute of the ModuleDict ("attribute 'keys'
# already exists"); any other name builds ("1_user", "_ids", "user id", "café": a stored workload named so
# must still resume and re-validate). tests/trials/test_run_contract.py holds the list to the installed
# torch's; dunder names are refused as a class.
TABLE_NAME = re.compile(r"[^.]*[^.\s][^.]*")
MODULE_DICT_ATTRIBUTES = frozenset(
    "T_destination _apply _backward_hooks _backward_pre_hooks _buffers _call_impl _compiled_call_impl "
    "_forward_hooks _forward_hooks_always_called _forward_hooks_with_kwargs _forward_pre_hooks "
    "_forward_pre_hooks_with_kwargs _get_backward_hooks _get_backward_pre_hooks _get_name "
    "_is_full_backward_hook _load_from_state_dict _load_state_dict_post_hooks _load_state_dict_pre_hooks "
    "_maybe_warn_non_full_backward_hook _modules _named_members _non_persistent_buffers_set _parameters "
    "_register_load_state_dict_pre_hook _register_state_dict_hook _replicate_for_data_parallel "
    "_save_to_state_dict _slow_forward _state_dict_hooks _state_dict_pre_hooks _version "
    "_wrapped_call_impl add_module apply bfloat16 buffers call_super_init children clear compile cpu cuda "
    "double dump_patches eval extra_repr float forward get_buffer get_extra_state get_parameter "
    "get_submodule half ipu items keys load_state_dict modules mtia named_buffers named_children "
    "named_modules named_parameters parameters pop register_backward_hook register_buffer "
    "register_forward_hook register_forward_pre_hook register_full_backward_hook "
    "register_full_backward_pre_hook register_load_state_dict_post_hook register_load_state_dict_pre_hook "
    "register_module register_parameter register_state_dict_post_hook register_state_dict_pre_hook "
    "requires_grad_ set_extra_state set_submodule share_memory state_dict to to_empty train training type "
    "update values xpu zero_grad".split()
)


class _Spec(BaseModel):
    """Every part of a spec: unknown fields refused (named with the ones allowed), immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _an_object_of_known_fields(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        if not isinstance(data, Mapping):
            raise _Problem(f"must be an object, got {type(data).__name__}")
        allowed = sorted(cls.model_fields)
        unknown = sorted(str(key) for key in data if key not in cls.model_fields)
        if unknown:
            raise _Problem(f"unknown field (allowed: {', '.join(allowed)})", unknown[0])
        return data


# --------------------------------------------------------------------------- the models


class TableSpec(_Spec):
    # The pattern is in the schema too: a client (and the API's fuzzing) is told the rule up front.
    name: Annotated[str, StringConstraints(strict=True, pattern=rf"^{TABLE_NAME.pattern}$")]
    num_embeddings: Annotated[
        int, _Int(), Field(description="rows: at most 8 GiB of fp32 with embedding_dim")
    ]
    embedding_dim: Annotated[int, _Int(high=65536)]
    pooling_factor: Annotated[int, _Int(high=100_000)]

    @field_validator("name", mode="before")
    @classmethod
    def _a_module_name(cls, name: Any) -> Any:
        if isinstance(name, str) and not TABLE_NAME.fullmatch(name):
            raise _Problem(f"must be a non-empty name, not only spaces, with no '.' (a torch module's name), "
                           f"got {_shown(name)}")  # fmt: skip
        if isinstance(name, str) and (name in MODULE_DICT_ATTRIBUTES or name[:2] == name[-2:] == "__"):
            raise _Problem(f"{_shown(name)} is taken: torch's ModuleDict, which holds the tables, has an "
                           "attribute of that name")  # fmt: skip
        return name

    @model_validator(mode="after")
    def _fits(self) -> TableSpec:
        if self.num_embeddings * self.embedding_dim * 4 > MAX_TABLE_BYTES:
            raise _Problem(f"table of {self.num_embeddings} x {self.embedding_dim} fp32 exceeds 8 GiB")
        return self


class DenseSpec(_Spec):
    """The dense part of a DLRM job: bottom MLP over the dense features, interaction, top MLP."""

    in_features: Annotated[int, _Int(high=1 << 20)]
    arch: Layers  # the last layer is the embedding dim (DLRM projects dense into it)
    over_arch: Layers  # the last layer is 1 (the logit)
    interaction: Interaction = "dot"

    def parameters(self, num_tables: int) -> int:
        """The dense model's parameters (weights and biases) over `num_tables` tables, as TorchRec's
        DLRM / DLRM_DCN builds it: the bottom MLP, the DCN cross net (low rank, over every table's
        embedding and the dense one), and the top MLP, whose first layer takes the interaction's output
        (dot: the dense embedding, each table's dot with it and every pair's; dcn: every embedding)."""
        dim, tables = self.arch[-1], num_tables
        if self.interaction == "dcn":
            over_in = (tables + 1) * dim
            cross = DCN_LAYERS * (2 * over_in * DCN_LOW_RANK + over_in)
        else:
            over_in, cross = dim + tables * (tables - 1) // 2 + tables, 0
        return _mlp(self.in_features, self.arch) + cross + _mlp(over_in, self.over_arch)

    def activations(self, num_tables: int) -> int:
        """Values one sample's forward keeps for the backward pass, roughly: each layer's output, the
        stacked embeddings, and the interaction's (dot: every pair of the tables and the dense
        embedding, which grows with the square of the tables; dcn: each cross layer's)."""
        dim, tables = self.arch[-1], num_tables
        stacked = (tables + 1) * dim
        if self.interaction == "dcn":
            interaction = DCN_LAYERS * (stacked + DCN_LOW_RANK)
        else:
            interaction = (tables + 1) ** 2
        return self.in_features + sum(self.arch) + stacked + interaction + sum(self.over_arch)

    @model_validator(mode="after")
    def _ends_in_the_logit(self) -> DenseSpec:
        if self.over_arch[-1] != 1:
            raise _Problem(f"the last layer must be 1 (the logit), got {self.over_arch[-1]}", "over_arch")
        return self


def _mlp(in_features: int, layers: tuple[int, ...]) -> int:
    """Weights and biases of linear layers of widths `layers` over `in_features` inputs."""
    widths = (in_features, *layers)
    return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))


class OptimizerSpec(_Spec):
    embedding: EmbeddingOptimizer = "exact_adagrad"
    embedding_lr: Annotated[float, _Number(high=100)] = 0.01
    dense: DenseOptimizer = "adagrad"
    dense_lr: Annotated[float, _Number(high=100)] = 0.01


class WorkloadSpec(_Spec):
    """The training job as it runs today: what tuning compares against."""

    name: Text
    tables: Annotated[tuple[TableSpec, ...], Field(min_length=1)]
    sharding: Sharding = "table_wise"
    # The batch size per rank the training job runs today.
    batch_size: BatchSize | None = None
    # Without `dense`, the trial is the sparse part alone (pooled embeddings into a linear loss).
    dense: DenseSpec | None = None
    optimizer: OptimizerSpec = OptimizerSpec()
    compute_kernel: ComputeKernel = "fused"
    # The comm precision (forward, backward) the job runs today: the baseline's.
    comm_precision: tuple[Precision, Precision] = ("fp32", "fp32")

    @field_validator("tables", mode="before")
    @classmethod
    def _not_too_many(cls, tables: Any) -> Any:
        if isinstance(tables, list | tuple) and len(tables) > MAX_TABLES:
            raise _Problem(f"{len(tables):,} tables, above the {MAX_TABLES:,} a trial builds")
        return tables

    @field_validator("tables")
    @classmethod
    def _distinct_names(cls, tables: tuple[TableSpec, ...]) -> tuple[TableSpec, ...]:
        seen: set[str] = set()
        for table in tables:
            if table.name in seen:
                raise _Problem(f"table name {table.name!r} appears more than once")
            seen.add(table.name)
        return tables

    @field_validator("comm_precision", mode="before")
    @classmethod
    def _a_pair(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise _Problem(f'must be [forward, backward], e.g. ["fp32", "fp32"]; got {_shown(value)}')
        return value

    @model_validator(mode="after")
    def _runs(self) -> WorkloadSpec:
        if self.compute_kernel == "dense" and self.optimizer.embedding == "exact_rowwise_adagrad":
            raise _Problem(
                "exact_rowwise_adagrad runs fused only (compute_kernel fused)", "optimizer", "embedding"
            )
        problem = comm_precision_problem(*self.comm_precision, self.sharding)
        if problem:  # the job as declared cannot run: its baseline would fail in TorchRec
            raise _Problem(problem, "comm_precision")
        if self.row_bytes > MAX_WORKLOAD_TABLE_BYTES:
            raise _Problem(f"{self.row_bytes / GIB:,.1f} GiB of fp32 rows in all, above the "
                           f"{MAX_WORKLOAD_TABLE_BYTES // GIB} GiB a trial builds", "tables")  # fmt: skip
        if (
            self.dense is not None
            and (size := self.dense.parameters(len(self.tables))) > MAX_DENSE_PARAMETERS
        ):
            parts = (
                f"bottom MLP, {self.dense.interaction} interaction of {len(self.tables):,} table(s), top MLP"
            )
            raise _Problem(
                f"a dense model of {size:,} parameters ({parts}), above {MAX_DENSE_PARAMETERS:,}", "dense"
            )
        if self.dense is not None:  # DLRM's shape rules, checked here so a bad one fails before torch
            dims = sorted({t.embedding_dim for t in self.tables})
            if len(dims) > 1:
                raise _Problem(f"DLRM needs one embedding_dim for every table, got {dims}", "dense")
            if self.dense.arch[-1] != dims[0]:
                last = self.dense.arch[-1]
                raise _Problem(
                    f"the last layer must be the embedding dim {dims[0]}, got {last}", "dense", "arch"
                )
        return self

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

    @property
    def row_bytes(self) -> int:
        """Every table's rows in fp32: what the tables hold across the world (each row on one rank)."""
        return sum(t.num_embeddings * t.embedding_dim * 4 for t in self.tables)

    @property
    def sample_bytes(self) -> int:
        """What one sample of a convergence check holds in memory: its ids (int64) and dense features
        (fp32)."""
        dense = self.dense.in_features * 4 if self.dense is not None else 0
        return sum(t.pooling_factor for t in self.tables) * 8 + dense

    @property
    def input_sample_bytes(self) -> int:
        """What one sample of a timing's input batches holds (trials.model.make_batches): ids (int64)
        and a length (int32) per table, a label (int64) and dense features (fp32), which without a
        dense part are the weights of the sparse loss, one per pooled embedding column (dim_sum)."""
        width = self.dense.in_features if self.dense is not None else self.dim_sum
        return sum(t.pooling_factor * 8 + 4 for t in self.tables) + 8 + width * 4


def quality_bytes(workload: WorkloadSpec, train_samples: int, eval_samples: int, world: int) -> int:
    """What one rank of a convergence check of these samples (over all ranks) holds at its most while
    it builds them (trials.convergence.teacher_samples; both splits, one after the other): each
    sample's ids, dense features and label and, while they are built, its logit's two parts
    (SAMPLE_WORK_BYTES), the teacher's tables, and one chunk's draws and lookups (TEACHER_CHUNK_BYTES)."""
    samples = train_samples // world + -(-eval_samples // world)  # the first ranks hold one more held out
    teacher = _teacher_bytes(workload)
    return samples * (workload.sample_bytes + SAMPLE_WORK_BYTES) + teacher + TEACHER_CHUNK_BYTES


def _teacher_bytes(workload: WorkloadSpec) -> int:
    """The hidden teacher's tables (fp32), every rank holding them all while it builds its samples."""
    return sum(t.num_embeddings for t in workload.tables) * TEACHER_DIM * 4


def quality_problem(workload: WorkloadSpec, train_samples: int, eval_samples: int, world: int) -> str | None:
    """Why a convergence check of these samples (over all ranks) cannot be made (None: it can): each
    rank builds its share of both splits before the first step (what it holds: quality_bytes)."""
    size = quality_bytes(workload, train_samples, eval_samples, world)
    if size <= MAX_SAMPLE_BYTES:
        return None
    teacher = _teacher_bytes(workload)
    return (f"a convergence check of {train_samples:,} training and {eval_samples:,} held-out samples over "
            f"{world} rank(s) holds {size / GIB:,.1f} GiB of samples per rank ({workload.sample_bytes:,} bytes "
            f"each), above {MAX_SAMPLE_BYTES // GIB} GiB: fewer quality_samples, or more ranks (counted as they "
            f"are built: each sample's ids and dense features, and {SAMPLE_WORK_BYTES} bytes for its label, "
            f"logit and the allocator's slack; {teacher / GIB:,.1f} GiB of teacher tables; {TEACHER_CHUNK_BYTES // 2**20} MiB a chunk)")  # fmt: skip


class CandidateSpec(_Spec):
    """One point measured inside a launch. Fields left None fall back to the workload's."""

    fwd_precision: Precision
    bwd_precision: Precision
    batch_size: BatchSize
    sharding: Sharding | None = None
    num_threads: Annotated[int, _Int(high=1024)] | None = None
    pipeline: Pipeline | None = None
    model_seed: Seed | None = None  # quality launches: the model's initialization (None: the spec's seed)
    # quality launches: the learning rates' multiplier (a rule for a batch change) and this candidate's
    # training budget in samples over all ranks (None: quality.train_samples)
    lr_scale: Annotated[float, _Number(high=1024)] | None = None
    train_samples: Annotated[int, _Int(high=1 << 30)] | None = None
    # quality launches: past the common budget, stop once the held-out log loss reaches the score of
    # this earlier candidate (the baseline of the same seed): time to quality needs no more
    stop_at: Seed | None = None

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


class QualitySpec(_Spec):
    """A convergence check instead of timing: each candidate trains a fresh model on a learnable
    synthetic task (or the user's data, `data` = "module:function") on the same samples, then is
    scored on a held-out set."""

    train_samples: Annotated[int, _Int(high=1 << 30)] = 1 << 18  # over all ranks
    eval_samples: Annotated[int, _Int(high=1 << 24)] = 1 << 15
    data_seed: Seed = 0
    data: Annotated[str, StringConstraints(pattern=r"^[^:]*:[^:]*$")] | None = None
    # Held-out log loss every train_samples/checkpoints samples along the way (a candidate with a
    # larger budget goes on at the same spacing): the curve that time to quality is read from.
    checkpoints: Annotated[int, _Int(high=64)] = 1

    @field_validator("data", mode="before")
    @classmethod
    def _module_function(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or value.count(":") != 1):
            raise _Problem(f'must be "module:function", got {_shown(value)}')
        return value


class TrialExtra(_Spec):
    """Switches for testing what runs trials; none changes what a candidate measures."""

    fidelity: StrictBool = False  # replay each candidate's all-to-all calls alone right after it
    inject: Literal["hang", "crash"] | None = None  # the last rank hangs or dies after joining
    # a damaged codec (one byte of four kept) in this precision's place: a cost the check must see
    damaged_codec: Precision | None = None
    tag: str | None = None  # the engine's label of a launch (confirm, revalidate-N); the trial ignores it


class TrialSpec(_Spec):
    workload: WorkloadSpec
    candidates: Annotated[tuple[CandidateSpec, ...], Field(min_length=1)]
    warmup: Annotated[int, _Int(low=0, high=10_000)] = 5
    iterations: Annotated[int, _Int(high=1_000_000)] = 30
    device: Device = "auto"  # auto: CUDA + NCCL when GPUs are visible, else CPU + gloo
    seed: Seed = 0
    # Distinct input batches cycled through the measured loop (generated once per batch size).
    input_batches: Annotated[int, _Int(high=64)] = 4
    quality: QualitySpec | None = None
    extra: TrialExtra = TrialExtra()

    @model_validator(mode="after")
    def _consistent(self) -> TrialSpec:
        for i, c in enumerate(self.candidates):
            if c.stop_at is not None and c.stop_at >= i:
                raise _Problem(
                    f"must name an earlier candidate (< {i}), got {c.stop_at}", "candidates", i, "stop_at"
                )
        batch = max(c.batch_size for c in self.candidates)
        if (size := self.input_bytes(batch)) > MAX_INPUT_BYTES:
            raise _Problem(f"{self.input_batches} input batches of {batch} samples x {self.input_bytes(1) // self.input_batches:,} "
                           f"bytes are {size / GIB:,.1f} GiB per rank, above {MAX_INPUT_BYTES // GIB} GiB "
                           "(fewer or smaller batches, less pooling or fewer embedding columns)", "candidates")  # fmt: skip
        if (dense := self.workload.dense) is not None and (
            size := batch * dense.activations(len(self.workload.tables)) * 4
        ) > MAX_ACTIVATION_BYTES:
            raise _Problem(f"a step of {batch} samples keeps {size / GIB:,.1f} GiB of activations per rank (the "
                           f"{dense.interaction} interaction of {len(self.workload.tables):,} tables among them), "
                           f"above {MAX_ACTIVATION_BYTES // GIB} GiB: a smaller batch or fewer tables", "candidates")  # fmt: skip
        if self.quality is not None and self.workload.dense is None:
            raise _Problem("a convergence check trains a DLRM: the workload needs a dense part", "quality")
        return self

    def input_bytes(self, batch_size: int) -> int:
        """What one rank's input batches of `batch_size` hold (WorkloadSpec.input_sample_bytes)."""
        return batch_size * self.workload.input_sample_bytes * self.input_batches

    def sharding_of(self, candidate: CandidateSpec) -> str:
        return candidate.sharding or self.workload.sharding

    def pipeline_of(self, candidate: CandidateSpec) -> str:
        return candidate.pipeline or self.workload.default_pipeline

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON would carry it: candidates without their unset fields, `quality` and
        `extra` only when given."""
        data = self.model_dump(mode="json")
        data["workload"] = workload_to_dict(self.workload)
        data["candidates"] = [c.model_dump(mode="json", exclude_none=True) for c in self.candidates]
        data["extra"] = self.extra.model_dump(mode="json", exclude_defaults=True)
        return {k: v for k, v in data.items() if not (k in ("extra", "quality") and not v)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def workload_to_dict(workload: WorkloadSpec) -> dict[str, Any]:
    """The workload as a spec declares it (optional sections left out when not given)."""
    return workload.model_dump(mode="json", exclude_none=True)


# --------------------------------------------------------------------------- validation

_Model = TypeVar("_Model", bound=BaseModel)


def problem_of(error: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """One pydantic error of a spec as (where, problem): the location of the field at fault (below
    a model, for the rules that relate its fields) and a one-line problem in the spec's own words."""
    loc, kind, value = tuple(error.get("loc", ())), error.get("type"), error.get("input")
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, _Problem):
        return loc + cause.at, str(cause)
    if kind == "missing":
        return loc, "is required"
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        return loc, f"must be one of {', '.join(allowed)}; got {_shown(value)}"
    if kind in ("string_type", "string_too_short", "string_pattern_mismatch"):
        return loc, f"must be a non-empty string, got {_shown(value)}"
    if kind in ("too_short", "list_type", "tuple_type"):
        return loc, f"must be a non-empty list, got {_shown(value)}"
    if kind == "bool_type":
        return loc, f"must be true or false, got {_shown(value)}"
    return loc, str(error.get("msg", "")).removeprefix("Value error, ")


def where(loc: tuple[str | int, ...]) -> str:
    """("workload", "tables", 0, "name") -> "workload.tables[0].name"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parse(model: type[_Model], obj: Any, at: str = "") -> _Model:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        loc, problem = problem_of(exc.errors()[0])
        raise SpecError(where(((at,) if at else ()) + loc), problem) from None
    except RecursionError:  # a value nested deeper than any field holds
        raise SpecError(at, f"nested too deeply to validate ({_TOO_DEEP})") from None


_TOO_DEEP = f"past Python's recursion limit of {sys.getrecursionlimit():,} levels; a spec needs a few"


def parse_workload(obj: Any, at: str = "workload") -> WorkloadSpec:
    return _parse(WorkloadSpec, obj, at)


def parse_candidate(obj: Any, at: str) -> CandidateSpec:
    return _parse(CandidateSpec, obj, at)


def world_problem(spec: TrialSpec, world: int) -> None:
    """SpecError when the spec cannot run on `world` ranks (known from the launcher's WORLD_SIZE before
    torch is imported): a convergence check's held-out samples split too thin to score."""
    if spec.quality is not None and (share := spec.quality.eval_samples // world) < MIN_EVAL_SAMPLES_PER_RANK:
        raise SpecError("quality.eval_samples", f"{spec.quality.eval_samples:,} held-out samples over {world} "
                        f"rank(s) are {share:,} per rank, below the {MIN_EVAL_SAMPLES_PER_RANK} a rank "
                        f"scores: at least {MIN_EVAL_SAMPLES_PER_RANK * world:,}")  # fmt: skip


def parse_spec(obj: Any) -> TrialSpec:
    """Validate a decoded spec. Raises SpecError naming the first bad field."""
    if not isinstance(obj, Mapping):
        raise SpecError("", f"spec must be a JSON object, got {type(obj).__name__}")
    return _parse(TrialSpec, obj)


def load_spec(path: str | Path) -> TrialSpec:
    """Read and validate a spec file; every failure is a SpecError with a one-line message."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(str(path), f"cannot read spec: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:  # JSON is UTF-8: a bad spec, not a crash of the trial
        raise SpecError(str(path), f"not valid JSON: not UTF-8 (byte {exc.start}: {exc.reason})") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(
            str(path), f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except ValueError as exc:
        raise SpecError(str(path), f"not valid JSON ({exc})") from exc
    except RecursionError:  # json's decoder recurses per level: a bad spec, not a crash of the trial
        raise SpecError(str(path), f"not a spec: JSON nested too deeply ({_TOO_DEEP})") from None
    return parse_spec(obj)


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a spec never needs them.
    raise ValueError(f"{name} is not allowed in a spec")
