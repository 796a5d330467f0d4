"""The sharded model a trial drives: an EmbeddingBagCollection under DistributedModelParallel.

One table per feature, sharded with an explicit plan (not the planner: a plan is deterministic,
instant, and exactly the sharding type being measured). Comm codecs are SwitchableCodecs so a
launch can change precision between candidates without re-sharding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
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
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from trials.codecs import ROW_DIM, Effective, SwitchableCodec, effective_precisions, make_codec
from trials.spec import WorkloadSpec

LEARNING_RATE = 0.01


class SparseArch(torch.nn.Module):
    def __init__(self, ebc: EmbeddingBagCollection) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        return self.ebc(features).values()


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


class ShardedWorkload:
    """A workload sharded one way, with codecs that switch per candidate."""

    def __init__(
        self,
        workload: WorkloadSpec,
        sharding: str,
        device: torch.device,
        pg: dist.ProcessGroup,
        local_size: int,
    ) -> None:
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
        ebc = EmbeddingBagCollection(
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
            device=torch.device("meta"),  # DMP materialises only the local shards
        )
        sharder = EmbeddingBagCollectionSharder(
            fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": LEARNING_RATE},
            qcomm_codecs_registry=registry,
        )
        world_size = dist.get_world_size(pg)
        self.single_host = world_size <= local_size
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
        self.plan = ShardingPlan({"ebc": module_plan})
        self.dim_sum_per_rank = _dim_sum_per_rank(module_plan, world_size)
        self.model = DistributedModelParallel(
            SparseArch(ebc),
            env=ShardingEnv.from_process_group(pg),
            device=device,
            plan=self.plan,
            sharders=[sharder],
            init_data_parallel=False,  # no dense parameters to wrap in DDP
        )

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

    def set_precision(self, fwd: str, bwd: str) -> Effective:
        """Point every comm op at the codecs of (fwd, bwd); returns what actually runs."""
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
) -> list[KeyedJaggedTensor]:
    """`count` input batches with exactly `pooling_factor` ids per sample per feature.

    A fixed pooling factor keeps the work identical from iteration to iteration, which is what a
    low-noise measurement of comms needs; ids are uniform over each table.
    """
    gen = torch.Generator().manual_seed(seed)
    keys = [f"f_{t.name}" for t in workload.tables]
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
        batches.append(kjt.to(device))
    return batches
