"""The model a trial trains: the job's own, sharded as the job shards it.

With a `dense` section the workload is a DLRM (`DLRM` or `DLRM_DCN` inside `DLRMTrain`): the dense
arches under DDP (as DistributedModelParallel wraps them), the embedding tables on the FUSED kernel
with the declared optimizer running inside their backward, the dense optimizer beside it in one
`CombinedOptimizer`. Without it, the sparse part alone: pooled embeddings into a random linear loss.
Either way a step is what the job's step is: forward, loss, backward, optimizer.

One table per feature, sharded with an explicit plan (not the planner: a plan is deterministic,
instant, and exactly the sharding type being measured). Comm codecs are SwitchableCodecs so a
launch can change precision between candidates without re-sharding.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torchrec.datasets.utils import Batch
from torchrec.distributed.batched_embedding_kernel import BatchedDenseEmbeddingBag, BatchedFusedEmbeddingBag
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.sharding_plan import (
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_row_wise,
    table_wise,
)
from torchrec.distributed.types import CommOp, QuantizedCommCodecs, ShardingEnv, ShardingPlan
from torchrec.models.dlrm import DLRM, DLRM_DCN, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from trials.codecs import ROW_DIM, Effective, SwitchableCodec, effective_precisions, make_codec
from trials.spec import DenseSpec, OptimizerSpec, WorkloadSpec, comm_precision_problem

# DLRM_DCN's cross net, as torchrec's DLRM example configures it.
DCN_LAYERS, DCN_LOW_RANK = 3, 512

_FUSED_OPTIMIZER = {
    "exact_sgd": EmbOptimType.EXACT_SGD,
    "exact_adagrad": EmbOptimType.EXACT_ADAGRAD,
    "exact_rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
}
# The same update, outside the backward: for embeddings on the DENSE kernel (row-wise: fused only).
_EMBEDDING_TORCH_OPTIMIZER: dict[str, Any] = {
    "exact_sgd": torch.optim.SGD,
    "exact_adagrad": torch.optim.Adagrad,
}
_DENSE_OPTIMIZER: dict[str, Any] = {
    "sgd": torch.optim.SGD,
    "adagrad": torch.optim.Adagrad,
    "adam": torch.optim.Adam,
}


class SparseTrain(torch.nn.Module):
    """The sparse part alone as a trainable job: pooled embeddings into a random linear loss.

    The loss weights ride in `batch.dense_features` (batch x sum of embedding dims), so the backward
    all-to-all carries a realistic, non-constant gradient. Returns (loss, output) as DLRMTrain does,
    which is what TorchRec's train pipelines expect of a model.
    """

    def __init__(self, ebc: EmbeddingBagCollection) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = self.ebc(batch.sparse_features).values()
        loss = (pooled * batch.dense_features).sum()
        return loss, loss.detach()


@dataclass
class CodecSlots:
    """The switchable codecs behind one comm op (forward payload and backward gradient)."""

    fwd: SwitchableCodec
    bwd: SwitchableCodec

    def codecs(self) -> QuantizedCommCodecs:
        return QuantizedCommCodecs(forward=self.fwd, backward=self.bwd)  # type: ignore[arg-type]


def _parameter_sharding(sharding: str, index: int, world_size: int, local_size: int):
    if sharding == "table_wise":
        return table_wise(rank=index % world_size)
    if sharding == "row_wise":
        return row_wise()
    if sharding == "column_wise":
        return column_wise(ranks=list(range(world_size)))
    if sharding == "table_row_wise":
        return table_row_wise(host_index=index % max(1, world_size // local_size))
    raise ValueError(f"unknown sharding type {sharding!r}")


def _train_module(workload: WorkloadSpec, ebc: EmbeddingBagCollection, device: torch.device):
    """(the module a step calls, the path of its EmbeddingBagCollection inside it)."""
    dense = workload.dense
    if dense is None:
        return SparseTrain(ebc), "ebc"
    return DLRMTrain(_dlrm(dense, ebc, device)), "model.sparse_arch.embedding_bag_collection"


def _dlrm(dense: DenseSpec, ebc: EmbeddingBagCollection, device: torch.device) -> DLRM:
    args = (ebc, dense.in_features, list(dense.arch), list(dense.over_arch))
    if dense.interaction == "dcn":
        return DLRM_DCN(*args, dcn_num_layers=DCN_LAYERS, dcn_low_rank_dim=DCN_LOW_RANK, dense_device=device)
    return DLRM(*args, dense_device=device)


def _optimizer(dmp: DistributedModelParallel, spec: OptimizerSpec, embedding_path: str) -> CombinedOptimizer:
    """The fused embedding optimizer (inside the backward) and the dense one, stepped as one."""
    rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    embedding = {k: v for k, v in rest.items() if embedding_path in k}  # DENSE kernel only
    dense = {k: v for k, v in rest.items() if k not in embedding}
    parts: list[KeyedOptimizer] = [dmp.fused_optimizer]
    if embedding:
        emb_cls = _EMBEDDING_TORCH_OPTIMIZER[spec.embedding]
        parts.append(KeyedOptimizerWrapper(embedding, lambda p: emb_cls(p, lr=spec.embedding_lr)))
    if dense:
        dense_cls = _DENSE_OPTIMIZER[spec.dense]
        parts.append(KeyedOptimizerWrapper(dense, lambda p: dense_cls(p, lr=spec.dense_lr)))
    return CombinedOptimizer(parts)


def _embedding_bags(workload: WorkloadSpec) -> EmbeddingBagCollection:
    """One table per feature, on the meta device: DMP materialises only the local shards."""
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name=t.name,
                embedding_dim=t.embedding_dim,
                num_embeddings=t.num_embeddings,
                feature_names=[f"f_{t.name}"],
                pooling=PoolingType.SUM,
            )
            for t in workload.tables
        ],
        device=torch.device("meta"),
    )


def _module_plan(
    ebc: EmbeddingBagCollection,
    sharder: EmbeddingBagCollectionSharder,
    workload: WorkloadSpec,
    sharding: str,
    world_size: int,
    local_size: int,
    device: torch.device,
):
    """Every table sharded `sharding`, on the workload's compute kernel."""
    module_plan = construct_module_sharding_plan(
        ebc,
        {
            t.name: _parameter_sharding(sharding, i, world_size, local_size)
            for i, t in enumerate(workload.tables)
        },
        sharder=sharder,
        local_size=local_size,
        world_size=world_size,
        device_type=device.type,
    )
    # The plan builders default to the DENSE kernel; jobs run FUSED (optimizer in the backward).
    kernel = (
        EmbeddingComputeKernel.FUSED if workload.compute_kernel == "fused" else EmbeddingComputeKernel.DENSE
    )
    for parameter_sharding in module_plan.values():
        parameter_sharding.compute_kernel = kernel.value
    return module_plan


class ShardedWorkload:
    """The job's model sharded one way, with its optimizer and codecs that switch per candidate."""

    def __init__(
        self,
        workload: WorkloadSpec,
        sharding: str,
        device: torch.device,
        pg: dist.ProcessGroup,
        local_size: int,
        seed: int = 0,
        learn: bool = False,
    ) -> None:
        """`learn=False` (timing): every optimizer runs its full update at learning rate 0. The step
        costs what the job's costs, while the model stays at its initialization, so each candidate
        sees the same gradients: a handful of cycled batches would otherwise be memorized within
        dozens of steps, and the vanishing gradients would read as quantization error."""
        self.workload = workload
        self.sharding = sharding
        self.device = device
        self.backend = dist.get_backend(pg)
        fp32 = make_codec("fp32", device, is_fwd=True)
        self.a2a = CodecSlots(SwitchableCodec(fp32), SwitchableCodec(fp32))
        self.reduce_scatter = CodecSlots(SwitchableCodec(fp32), SwitchableCodec(fp32))
        registry = {
            CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL.name: self.a2a.codecs(),
            CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER.name: self.reduce_scatter.codecs(),
        }
        torch.manual_seed(seed)  # the dense init; DDP then broadcasts rank 0's to every rank
        ebc = _embedding_bags(workload)
        opt = (
            workload.optimizer
            if learn
            else workload.optimizer.model_copy(update={"embedding_lr": 0.0, "dense_lr": 0.0})
        )
        sharder = EmbeddingBagCollectionSharder(
            fused_params={"optimizer": _FUSED_OPTIMIZER[opt.embedding], "learning_rate": opt.embedding_lr},
            qcomm_codecs_registry=registry,
        )
        world_size = dist.get_world_size(pg)
        self.single_host = world_size <= local_size
        module_plan = _module_plan(ebc, sharder, workload, sharding, world_size, local_size, device)
        module, path = _train_module(workload, ebc, device)
        self.plan = ShardingPlan({path: module_plan})
        self.dim_sum_per_rank = _dim_sum_per_rank(module_plan, world_size)
        # The tables are allocated here, rank by rank, and one rank can fail where its peers do not (out
        # of memory on the rank holding the big table). The ranks agree before DDP's collectives and
        # after them: a rank that raised alone would meet its peers in another collective than theirs.
        self.model = agreed(pg, "building the sharded tables", lambda: DistributedModelParallel(
            module, env=ShardingEnv.from_process_group(pg), device=device, plan=self.plan, sharders=[sharder],
            init_data_parallel=False))  # fmt: skip
        agreed(pg, "wrapping the dense part in DDP", self.model.init_data_parallel)
        self.kernels = _kernels_in_use(self.model)
        self.ddp = _ddp_of(self.model)
        if self.ddp is not None:
            # DDP's own all-reduce, issued from Python so the probe sees it (same op, same averaging).
            self.ddp.register_comm_hook(pg, allreduce_hook)
        self.optimizer = _optimizer(self.model, opt, path)

    @property
    def output_is_reduce_scatter(self) -> bool:
        """Whether pooled embeddings leave through a reduce-scatter rather than an all-to-all.

        row_wise always; table_row_wise reduce-scatters inside a host and all-to-alls across
        hosts, so on a single host only the reduce-scatter carries data.
        """
        if self.sharding == "row_wise":
            return True
        return self.sharding == "table_row_wise" and self.single_host

    @property
    def output_slots(self) -> CodecSlots:
        """Codecs of the comm op that carries pooled embeddings out for this sharding type."""
        return self.reduce_scatter if self.output_is_reduce_scatter else self.a2a

    def dense_parameter_bytes(self) -> int:
        """Bytes of the gradients DDP all-reduces every step (0 for a sparse-only job)."""
        if self.ddp is None:
            return 0
        return sum(p.numel() * p.element_size() for p in self.ddp.parameters() if p.requires_grad)

    def set_precision(self, fwd: str, bwd: str) -> Effective:
        """Point every comm op at the codecs of (fwd, bwd); returns what actually runs.

        Precisions this sharding cannot carry (int8 on a reduce-scatter) are refused here, before any
        step and identically on every rank, with the reason (the candidate is reported failed);
        otherwise FBGEMM would assert inside the collective.
        """
        problem = comm_precision_problem(fwd, bwd, self.sharding)
        if problem:
            raise ValueError(problem)
        for slots, is_rs in ((self.a2a, False), (self.reduce_scatter, True)):
            eff = effective_precisions(fwd, bwd, self.backend, reduce_scatter=is_rs)
            slots.fwd.current = make_codec(eff.fwd, self.device, is_fwd=True)
            slots.bwd.current = make_codec(eff.bwd, self.device, is_fwd=False)
        return effective_precisions(fwd, bwd, self.backend, reduce_scatter=self.output_is_reduce_scatter)

    def check_row_alignment(self, fwd: str, bwd: str, batch_size: int) -> None:
        """Row-wise codecs (int8, fp8) need B x dims_of_each_rank divisible by their row length.

        Checked up front and identically on every rank, so a bad candidate fails cleanly instead of
        one rank raising inside a collective while the others wait in it.
        """
        if self.output_is_reduce_scatter or not ({fwd, bwd} & {"int8", "fp8"}):
            return
        for rank, dim_sum in enumerate(self.dim_sum_per_rank):
            if dim_sum and (batch_size * dim_sum) % ROW_DIM:
                raise ValueError(
                    f"{'/'.join(sorted({fwd, bwd} & {'int8', 'fp8'}))} comms quantize rows of "
                    f"{ROW_DIM} values: batch {batch_size} x rank {rank}'s embedding dims "
                    f"{dim_sum} = {batch_size * dim_sum} is not a multiple of {ROW_DIM}"
                )


class PeerBuildError(RuntimeError):
    """A step of building the sharded model failed on some rank: raised on every rank alike."""


_T = TypeVar("_T")


def agreed(pg: dist.ProcessGroup, step: str, build: Callable[[], _T]) -> _T:
    """`build()` on every rank, then one collective in which the ranks say whether it worked: when any
    rank failed, every rank raises PeerBuildError with the first failed rank's error (and lets go of
    what it built), so that all of them go on to the same next collective."""
    made: list[_T] = []
    problem = None
    try:
        made.append(build())
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        problem = f"rank {dist.get_rank(pg)}: {type(exc).__name__}: {exc}"
    problems: list[str | None] = [None] * dist.get_world_size(pg)
    dist.all_gather_object(problems, problem, group=pg)
    failed = next((p for p in problems if p), None)
    if failed is not None:
        made.clear()
        raise PeerBuildError(f"{failed} ({step})")
    return made[0]


def _kernels_in_use(model: torch.nn.Module) -> list[str]:
    """The embedding kernels the sharded model really runs (not what the plan asked for).

    A sharded collection keeps its lookups in a plain list (`_lookups`), outside `modules()`.
    """
    lookups = [lookup for m in model.modules() for lookup in getattr(m, "_lookups", [])]
    names = {type(m).__name__ for lookup in lookups for m in lookup.modules()}
    return sorted(
        kernel
        for kernel, cls in (("fused", BatchedFusedEmbeddingBag), ("dense", BatchedDenseEmbeddingBag))
        if cls.__name__ in names
    )


def _ddp_of(model: torch.nn.Module) -> DistributedDataParallel | None:
    """The DDP wrapper DMP put around the dense part (None when there is no dense part)."""
    return next((m for m in model.modules() if isinstance(m, DistributedDataParallel)), None)


def _dim_sum_per_rank(module_plan, world_size: int) -> list[int]:
    """Sum of embedding columns each rank sends out in the pooled all-to-all."""
    dims = [0] * world_size
    for param_sharding in module_plan.values():
        for shard in param_sharding.sharding_spec.shards:
            rank = shard.placement.rank()
            dims[rank] += shard.shard_sizes[1]
    return dims


def make_batches(
    workload: WorkloadSpec,
    batch_size: int,
    count: int,
    seed: int,
    device: torch.device,
) -> list[Batch]:
    """`count` training batches with exactly `pooling_factor` ids per sample per feature.

    A fixed pooling factor keeps the work identical from iteration to iteration, which is what a
    low-noise measurement needs; ids are uniform over each table. With a dense part: that many dense
    features and 0/1 labels; without: the weights of SparseTrain's linear loss.
    """
    gen = torch.Generator().manual_seed(seed)
    keys = [f"f_{t.name}" for t in workload.tables]
    dense_width = workload.dense.in_features if workload.dense else workload.dim_sum
    batches = []
    for _ in range(count):
        lengths = []
        values = []
        for t in workload.tables:
            lengths.append(torch.full((batch_size,), t.pooling_factor, dtype=torch.int32))
            values.append(torch.randint(0, t.num_embeddings, (batch_size * t.pooling_factor,), generator=gen))
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=keys, values=torch.cat(values), lengths=torch.cat(lengths)
        )
        batch = Batch(
            dense_features=torch.randn(batch_size, dense_width, generator=gen),
            sparse_features=kjt,
            labels=torch.randint(0, 2, (batch_size,), generator=gen),
        )
        batches.append(batch.to(device))
    return batches
