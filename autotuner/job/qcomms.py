"""Adopt a tuned config inside a training script in one line.

The pre-job hook exports the non-NCCL part of a config as AUTOTUNER_* variables; this module turns
them into TorchRec objects. No service dependency (reads the environment only), and torch/torchrec
are imported only when you ask for TorchRec objects. It never fails a job: a value it cannot use
(unknown precision, a batch of "abc", a scale out of range, a pipeline it does not know) is ignored
with one "nccl-autotuner: ignored ..." line on stderr, and the job's own setting stays.

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from autotuner.job.qcomms import tuned, tuned_sharder_kwargs
    sharder = EmbeddingBagCollectionSharder(**tuned_sharder_kwargs(device))   # device: torch.device or "cpu"

or, piece by piece: `tuned()` (a plain dataclass), `qcomms_config()`, `qcomm_codecs_registry(device)`,
`tuned_constraints(table_names, sharder, device)` (the planner's sharding), `tuned_train_pipeline(model,
optimizer, device)` (the train pipeline); `torch.set_num_threads(t.num_threads)` where it says one.
deploy/examples/train_dlrm.py is a whole job (torchrun, the planner, the pipeline).

A config that changes the batch (per rank, as the workload's `batch_size`) may also change the learning
rate it was validated with: take both, or neither (`tuned().lr_scale` multiplies the rate you use at
your own batch size; it is 1.0 whenever `batch_size` is None):

    t = tuned()
    batch_size, lr = t.batch_size or batch_size, lr * t.lr_scale

`t.pipeline` names the train pipeline the config was measured with ("none": a plain loop,
"sparse_dist": TorchRec's TrainPipelineSparseDist, ...; None: the job's own);
`tuned_train_pipeline(model, optimizer, device, default="sparse_dist")` builds it. Its `progress(it)`
returns what the model returns beside the loss (DLRMTrain: (loss, logits, labels)).

Every rank adopts the same config or none. The hook runs per node and fails open on each alone, so
one node may get a cached v3 while another gets v4, or nothing (the service down for it): mixed comm
precision or batch across ranks hangs or crashes TorchRec's all-to-all. So where torch.distributed is
initialized, `tuned()` compares what each rank would adopt (its AUTOTUNER_CONFIG label and values)
through the process group's key-value store; if any rank differs, every rank keeps the job's own
settings, as if nothing was tuned, and says so once, naming the labels seen. The first read after
init_process_group compares, once a process (later reads adopt what it agreed on, whatever the
environment says by then). One decision stands for all ranks (the first written wins), so none can
adopt what another does not. It is no collective and touches no GPU: a rank whose script reads the
config alone (on rank 0 only) waits AGREE_TIMEOUT_S for the others (any rank at most twice that), then
decides that every rank keeps the job's own settings (read it on every rank alike, right after
init_process_group). The keys carry torchrun's run id and the agent's restart count: one agent's
restarted job shares its store with the attempt before. Not covered: a multi-node elastic restart in
which the nodes' agents count restarts differently, on a store shared across attempts; torch's own
init_process_group reads the attempt before's keys there too. The NCCL variables the hook exported are read by NCCL itself and cannot be taken back
here; the warning says so. Before init (or on one rank) nothing is compared, and torch is not imported for it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, astuple, dataclass
from datetime import timedelta
from typing import Any

from autotuner.job.exports import MAX_BATCH, MAX_LR_SCALE, MAX_THREADS, MIN_LR_SCALE, is_count, is_lr_scale
from autotuner.text import printable

# The spec's own lists (standard library only, as this module must stay: a training script imports it).
from trials.choices import PIPELINES, PRECISIONS, SHARDING_TYPES

_said: set[str] = set()  # what this process already said on stderr (every helper reads the config again)


def _say(message: str) -> None:
    """Best effort: a closed stderr (None: print would go to stdout) or one whose reader is gone
    (BrokenPipeError) must not fail the job. One write a line: the ranks of a node share one stderr,
    and print's separate newline let two ranks' lines run into one."""
    if message not in _said and sys.stderr is not None:
        _said.add(message)
        try:
            sys.stderr.write(f"nccl-autotuner: {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


@dataclass(frozen=True)
class Tuned:
    """What the config says beside the NCCL variables; None where it says nothing."""

    fwd_precision: str = "fp32"
    bwd_precision: str = "fp32"
    batch_size: int | None = None  # per rank
    sharding: str | None = None  # a TorchRec ShardingType value ("table_wise", ...)
    num_threads: int | None = None  # for torch.set_num_threads
    # TorchRec train pipeline the config was measured with ("none": a plain loop); None: unsaid.
    pipeline: str | None = None
    config: str | None = None  # e.g. "cluster/workload/2n/v3", for logs
    # With batch_size: the factor on the job's learning rate the convergence check trained it under.
    lr_scale: float = 1.0

    @property
    def quantized(self) -> bool:
        return (self.fwd_precision, self.bwd_precision) != ("fp32", "fp32")


class _Reader:
    """Reads AUTOTUNER_* leniently: a bad value is collected (strict: raised) and reads as unsaid."""

    def __init__(self, env: Mapping[str, str], strict: bool) -> None:
        self.env = env
        self.strict = strict
        self.bad: dict[str, str] = {}

    def reject(self, name: str, value: str, expected: str) -> None:
        shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value):,} characters)"
        problem = f"{name}={shown}: expected {expected}"
        if self.strict:
            raise ValueError(problem)
        self.bad[name] = problem

    def choice(self, name: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
        value = (self.env.get(name) or "").strip().lower()
        if not value:
            return default
        if value not in choices:
            self.reject(name, value, f"one of {', '.join(choices)}")
            return default
        return value

    def positive(self, name: str, most: int) -> int | None:
        value = (self.env.get(name) or "").strip()
        if not value:
            return None
        if not is_count(value, most):
            self.reject(name, value, f"an integer from 1 to {most:,}")
            return None
        return int(value)

    def scale(self, name: str) -> float | None:
        value = (self.env.get(name) or "").strip()
        if not value:
            return None
        if not is_lr_scale(value):  # the hook's own rule for what a config may export
            self.reject(name, value, f"a number from {MIN_LR_SCALE!r} to {MAX_LR_SCALE:g}")
            return None
        return float(value)


_OWN = "the job's own"
# What stays when a variable is ignored: its partner goes too (a config is validated as a whole).
_KEPT = {
    "AUTOTUNER_FWD_PRECISION": "fp32/fp32 comms",
    "AUTOTUNER_BWD_PRECISION": "fp32/fp32 comms",
    "AUTOTUNER_BATCH_SIZE": "the job's batch and learning rate",
    "AUTOTUNER_LR_SCALE": "the job's batch and learning rate",
}


def tuned(environ: Mapping[str, str] | None = None, *, strict: bool = False) -> Tuned:
    """Read AUTOTUNER_* from the environment. A bad value is ignored and said on stderr, with what
    goes with it: both precisions, or the batch and its learning-rate factor, are taken together or
    not at all. strict=True raises ValueError naming the variable instead (for checks, not jobs)."""
    read = _Reader(os.environ if environ is None else environ, strict)
    fwd = read.choice("AUTOTUNER_FWD_PRECISION", PRECISIONS, "fp32")
    bwd = read.choice("AUTOTUNER_BWD_PRECISION", PRECISIONS, "fp32")
    batch_size = read.positive("AUTOTUNER_BATCH_SIZE", MAX_BATCH)
    lr_scale = read.scale("AUTOTUNER_LR_SCALE")
    sharding = read.choice("AUTOTUNER_SHARDING", SHARDING_TYPES)
    num_threads = read.positive("AUTOTUNER_NUM_THREADS", MAX_THREADS)
    pipeline = read.choice("AUTOTUNER_PIPELINE", PIPELINES)
    if lr_scale is not None and batch_size is None and "AUTOTUNER_BATCH_SIZE" not in read.bad:
        value = (read.env.get("AUTOTUNER_LR_SCALE") or "").strip()
        read.reject(
            "AUTOTUNER_LR_SCALE", value, "only with AUTOTUNER_BATCH_SIZE (the factor of a batch change)"
        )
    if {"AUTOTUNER_FWD_PRECISION", "AUTOTUNER_BWD_PRECISION"} & read.bad.keys():
        fwd = bwd = "fp32"
    if {"AUTOTUNER_BATCH_SIZE", "AUTOTUNER_LR_SCALE"} & read.bad.keys():
        batch_size, lr_scale = None, None
    for name, problem in read.bad.items():
        _say(f"ignored {problem}; keeping {_KEPT.get(name, _OWN)}")
    mine = Tuned(
        fwd_precision=fwd or "fp32",
        bwd_precision=bwd or "fp32",
        batch_size=batch_size,
        sharding=sharding,
        num_threads=num_threads,
        pipeline=pipeline,
        config=(read.env.get("AUTOTUNER_CONFIG") or "").strip() or None,
        lr_scale=1.0 if lr_scale is None else lr_scale,
    )
    return mine if strict else _agreed(mine)


_UNSAID = asdict(Tuned())
_SHOWN = 8  # configs named in the warning; a thousand nodes each on its own would fill a screen
# (what this rank read, what the ranks agreed on): compared once a process, at the first read after
# init_process_group. Each helper reads the config again; comparing again could wait on ranks that
# never read again (their environment read the same, another's not), so there is no second time.
_agreement: tuple[Tuned, Tuned] | None = None
_round = 0  # agreements made in this process (one in a job; the store's keys are per round)
AGREE_TIMEOUT_S = 120.0  # how long a rank waits for the others' answers: they start within this of it


def _agreed(mine: Tuned) -> Tuned:
    """What every rank of the default process group adopts: `mine` if all would adopt the same, else
    the job's own (Tuned()) on every rank. Torch is never imported here: a script that has not
    imported it has no process group to agree with."""
    global _agreement
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return mine
    if _agreement is None:
        _agreement = mine, _compared(mine, dist)
    read, agreed = _agreement
    if mine not in (read, agreed):  # the environment changed, or another `environ` was passed, since
        now = printable(mine.config or "no config")[:100]
        then = printable(agreed.config or "the job's own settings")[:100]
        _say(f"AUTOTUNER_* now read as {now}, after the ranks agreed on {then}: keeping what they agreed on")
    return agreed


def _compared(mine: Tuned, dist: Any) -> Tuned:
    """`mine` if every rank of the default group would adopt the same as rank 0 does, else the job's own
    (Tuned()): one decision for all, taken through the process group's own key-value store.

    Each rank compares its label and values with rank 0's; one that differs decides "differ", the last
    to match decides "agree", and a rank that waited AGREE_TIMEOUT_S for either decides "timeout". A
    decision is written once (compare_set: the first writer wins) and every rank adopts the one that
    stands, so a rank that timed out and one that came late never part ways. Not a collective: a rank
    that reads the config alone (on rank 0 only) waits, then keeps the job's own settings, where a
    collective would hang it; no GPU is touched (an object collective on NCCL runs on the current
    device); a rank does O(1) store operations. The keys carry torchrun's run id and restart count: a
    restarted job shares its store with the attempt before."""
    global _round
    _round += 1
    prefix = "nccl-autotuner/{}/{}/{}/".format(
        os.environ.get("TORCHELASTIC_RUN_ID", ""), os.environ.get("TORCHELASTIC_RESTART_COUNT", ""), _round
    )
    values = [mine.config, list(astuple(mine))]
    try:
        store = dist.distributed_c10d._get_default_store()
        decision = _decide(store, prefix, values, dist.get_rank(), dist.get_world_size())
    except Exception as exc:  # no answer is no agreement; the job runs on regardless
        _say(printable(f"could not check that every rank adopts the same tuned config ({type(exc).__name__}: "
                       f"{exc}); keeping the job's own settings"))  # fmt: skip
        return Tuned()
    if decision[0] == "agree":
        return mine
    try:  # the words only: a decision written by another version of this module must not fail the job
        _say(_why_not(decision))
    except Exception:
        _say("the ranks did not agree on one tuned config: every rank keeps the job's own settings")
    return Tuned()


def _why_not(decision: list[Any]) -> str:
    if decision[0] == "differ":
        _, rank, theirs, reference = decision
        seen = [(0, _hashable(reference)), (rank, _hashable(theirs))]
        return (f"the ranks were handed different tuned configs ({_labels(seen)}, the first seen to differ): "
                "every rank keeps the job's own settings (the NCCL variables the hook exported stay as each "
                "node got them)")  # fmt: skip
    return printable(f"could not check that every rank adopts the same tuned config (not every rank read it "
                     f"within {AGREE_TIMEOUT_S:g} s: read it on every rank alike; {decision[-1]}); keeping the "
                     "job's own settings")  # fmt: skip


def _decide(store: Any, prefix: str, values: list[Any], rank: int, world: int) -> list[Any]:
    """The decision that stands for this round (see `_compared`), as [kind, ...]."""
    wait = timedelta(seconds=AGREE_TIMEOUT_S)
    decision_key = prefix + "decision"

    def decide(kind: list[Any]) -> list[Any]:
        return list(json.loads(store.compare_set(decision_key, "", json.dumps(kind))))

    try:
        if rank == 0:
            store.set(prefix + "reference", json.dumps(values))
        store.wait([prefix + "reference"], wait)
        reference = json.loads(store.get(prefix + "reference"))
        if reference != values:
            return decide(["differ", rank, values, reference])
        if store.add(prefix + "matched", 1) == world:
            return decide(["agree"])
        store.wait([decision_key], wait)
        return list(json.loads(store.get(decision_key)))
    except Exception as exc:  # a wait that timed out (DistStoreError), or the store in trouble
        return decide(["timeout", f"{type(exc).__name__}: {exc}"[:300]])


def _hashable(value: Any) -> Any:
    """JSON read back (lists) as the tuples `_labels` groups by."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _labels(seen: list[tuple[int, Any]]) -> str:
    """Which ranks would adopt what, from (rank, (label, values)) pairs, e.g. "c/w/2n/v3 on ranks 0-1;
    none on rank 2". Under one label read two ways (a value ignored on one node only) the values tell
    them apart."""
    groups: dict[Any, list[int]] = {}
    for rank, values in seen:
        groups.setdefault(values, []).append(rank)
    labels = [printable(values[0] or "none")[:100] for values in groups]
    parts = []
    for (values, ranks), label in zip(groups.items(), labels, strict=True):
        if labels.count(label) > 1:
            said = asdict(Tuned(*values[1])).items()
            label += " as " + (", ".join(f"{k}={v}" for k, v in said if k != "config" and v != _UNSAID[k])
                               or "the job's own")  # fmt: skip
        parts.append(f"{label} on rank{'s' if len(ranks) > 1 else ''} {_spans(ranks)}")
    more = f"; and {len(parts) - _SHOWN} more" if len(parts) > _SHOWN else ""
    return "; ".join(parts[:_SHOWN]) + more


def _spans(ranks: list[int]) -> str:
    """[0, 1, 2, 5] as "0-2, 5": a job of a thousand ranks names its groups in a line."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def qcomms_config(environ: Mapping[str, str] | None = None) -> Any:
    """TorchRec's QCommsConfig for the tuned precisions (fp8 row-wise, as the trial measured it)."""
    from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig

    from trials.codecs import ROW_DIM

    t = tuned(environ)
    fp8 = "fp8" in (t.fwd_precision, t.bwd_precision)
    return QCommsConfig(
        forward_precision=CommType(t.fwd_precision),
        backward_precision=CommType(t.bwd_precision),
        fp8_quantize_dim=ROW_DIM if fp8 else None,
    )


def qcomm_codecs_registry(device: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The codecs registry a sharder takes (None when the config keeps fp32 both ways). `device`: a
    torch.device or its name ("cpu", "cuda:0"). TorchRec's own codecs, with its fallbacks (bf16 on
    gloo, fp8 on a reduce-scatter); off CUDA, FBGEMM's fp8 kernels do not run ("fp8 is not supported
    by CPU" at the first step), so fp8 gets the CPU codec the trial measured: the same wire format."""
    import torch
    from torchrec.distributed.fbgemm_qcomm_codec import get_qcomm_codecs_registry

    if not tuned(environ).quantized:
        return None
    device = torch.device(device)
    registry = get_qcomm_codecs_registry(qcomms_config(environ), device=device)
    if registry is None or device.type == "cuda":
        return registry
    from fbgemm_gpu.split_embedding_configs import SparseType

    from trials.codecs import CpuFp8RowwiseCodec

    def cpu_fp8(codec: Any, is_fwd: bool) -> Any:
        fp8 = getattr(codec, "_comm_precision", None) == SparseType.FP8
        return CpuFp8RowwiseCodec(is_fwd=is_fwd) if fp8 else codec

    for codecs in registry.values():
        codecs.forward = cpu_fp8(codecs.forward, True)
        codecs.backward = cpu_fp8(codecs.backward, False)
    return registry


def tuned_sharder_kwargs(device: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for EmbeddingBagCollectionSharder(...) with the tuned comm precision (add
    your own, e.g. fused_params=...)."""
    return {"qcomm_codecs_registry": qcomm_codecs_registry(device, environ)}


def tuned_constraints(
    tables: Iterable[str],
    sharder: Any,
    device: Any,
    default: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Planner constraints that shard every named table the tuned way (AUTOTUNER_SHARDING, else
    `default`, the job's own; neither: {} and the planner chooses, data_parallel included, where the
    comm codecs then have no all-to-all to act on). A sharding the sharder cannot do on this device
    (TorchRec plans row_wise and table_row_wise on CUDA only) is said on stderr and `default` kept:

        constraints = tuned_constraints(table_names, sharder, device, default="table_wise")
        planner = EmbeddingShardingPlanner(batch_size=batch_size, constraints=constraints)
    """
    import torch
    from torchrec.distributed.planner.types import ParameterConstraints

    sharding = tuned(environ).sharding or default
    device_type = torch.device(device).type
    if sharding is not None and sharding != default and sharding not in sharder.sharding_types(device_type):
        _say(f"ignored AUTOTUNER_SHARDING={sharding!r}: {type(sharder).__name__} cannot shard it that way on "
             f"{device_type}; keeping the job's own ({default or 'the planner chooses'})")  # fmt: skip
        sharding = default
    if sharding is None:
        return {}
    return {name: ParameterConstraints(sharding_types=[sharding]) for name in tables}


def tuned_train_pipeline(
    model: Any,
    optimizer: Any,
    device: Any,
    default: str = "sparse_dist",
    environ: Mapping[str, str] | None = None,
) -> Any:
    """The train pipeline the config was measured with (AUTOTUNER_PIPELINE, else `default`, the job's
    own): a TorchRec TrainPipeline ("sparse_dist": TrainPipelineSparseDist, "semi_sync" from the first
    batch, as measured), or for "none" a plain loop with the same `progress(iterator)`. One the
    installed torchrec lacks is said on stderr and `default` is built instead."""
    import torch

    from trials.pipelines import make_pipeline

    device = torch.device(device)
    name = tuned(environ).pipeline or default
    try:
        return make_pipeline(name, model, optimizer, device)
    except (RuntimeError, KeyError) as exc:
        if name == default:
            raise
        _say(f"ignored AUTOTUNER_PIPELINE={name!r} ({exc}); keeping the job's own, {default}")
        return make_pipeline(default, model, optimizer, device)
