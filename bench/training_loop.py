"""A reference TorchRec training job, written from torchrec's public API only (never `trials`).

    torchrun --standalone --nproc-per-node 2 bench/training_loop.py --workload W.json \
        --candidate int8/int8:1024 [--candidate fp32/fp32:512 ...] [--rounds 4] --out result.json

What a user's DLRM job does: `DLRM` in `DLRMTrain`, every table sharded table-wise on the FUSED
kernel with the declared optimizer in the backward, comm codecs from `get_qcomm_codecs_registry`,
the dense part under DDP with its own optimizer (`KeyedOptimizerWrapper` in a `CombinedOptimizer`),
driven by `TrainPipelineSparseDist` at the declared learning rates. It reports its own throughput
(samples over the wall time of the timed steps), which the training-fidelity benchmark compares
with what the trial predicted. Imports torch and torchrec only: it runs under torchrun on the ranks.

With several candidates (comm precision : batch per rank), each is its own model, optimizer and
pipeline, and they take turns: every round visits them in a shuffled order, each training
`--warmup` then `--steps` timed steps. A shared machine's speed drifts over seconds; taking turns
puts every candidate under the same drift, so their ratios are what the candidates themselves do.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torchrec.datasets.utils import Batch
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig, get_qcomm_codecs_registry
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.distributed.types import ShardingEnv, ShardingPlan
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

FUSED = {"exact_sgd": EmbOptimType.EXACT_SGD, "exact_adagrad": EmbOptimType.EXACT_ADAGRAD,
         "exact_rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}  # fmt: skip
DENSE = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam}


def build(workload: dict, fwd: str, bwd: str) -> tuple[DistributedModelParallel, CombinedOptimizer]:
    world = dist.get_world_size()
    tables = workload["tables"]
    dense, opt = workload["dense"], workload.get("optimizer", {})
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=t["name"], embedding_dim=t["embedding_dim"], num_embeddings=t["num_embeddings"],
                                   feature_names=[f"f_{t['name']}"]) for t in tables],
        device=torch.device("meta"),
    )  # fmt: skip
    model = DLRMTrain(DLRM(ebc, dense["in_features"], dense["arch"], dense["over_arch"]))
    registry = None
    if (fwd, bwd) != ("fp32", "fp32"):
        qcomms = QCommsConfig(forward_precision=CommType(fwd), backward_precision=CommType(bwd))
        registry = get_qcomm_codecs_registry(qcomms, device=torch.device("cpu"))
    fused = {
        "optimizer": FUSED[opt.get("embedding", "exact_adagrad")],
        "learning_rate": opt.get("embedding_lr", 0.01),
    }
    sharder = EmbeddingBagCollectionSharder(fused_params=fused, qcomm_codecs_registry=registry)
    plan = construct_module_sharding_plan(
        ebc,
        {t["name"]: table_wise(rank=i % world, compute_kernel=EmbeddingComputeKernel.FUSED.value)
         for i, t in enumerate(tables)},
        sharder=sharder, local_size=world, world_size=world, device_type="cpu",
    )  # fmt: skip
    dmp = DistributedModelParallel(
        model, env=ShardingEnv.from_process_group(dist.group.WORLD), device=torch.device("cpu"),
        plan=ShardingPlan({"model.sparse_arch.embedding_bag_collection": plan}), sharders=[sharder],
    )  # fmt: skip
    dense_cls, lr = DENSE[opt.get("dense", "adagrad")], opt.get("dense_lr", 0.01)
    dense_opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                      lambda params: dense_cls(params, lr=lr))  # fmt: skip
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense_opt])


def batches(workload: dict, batch: int, count: int, seed: int) -> list[Batch]:
    """A dataloader's worth of random batches (ids uniform over each table), cycled."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        tables = workload["tables"]
        lengths = torch.cat([torch.full((batch,), t["pooling_factor"], dtype=torch.int32) for t in tables])
        values = torch.cat([torch.randint(0, t["num_embeddings"], (batch * t["pooling_factor"],), generator=gen)
                            for t in tables])  # fmt: skip
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=[f"f_{t['name']}" for t in tables], values=values, lengths=lengths
        )
        dense = torch.randn(batch, workload["dense"]["in_features"], generator=gen)
        out.append(
            Batch(
                dense_features=dense, sparse_features=kjt, labels=torch.randint(0, 2, (batch,), generator=gen)
            )
        )
    return out


def timed_steps(pipeline: TrainPipelineSparseDist, data: Iterator[Batch], warmup: int, steps: int) -> float:
    """Seconds of `steps` training steps (after `warmup` untimed ones), as the slowest rank saw them."""
    for _ in range(warmup):
        pipeline.progress(data)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        pipeline.progress(data)
    dist.barrier()
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--candidate", action="append", required=True, metavar="FWD/BWD:BATCH",
                   help="comm precision and batch size per rank, e.g. int8/int8:1024 (repeat for several)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="turns each candidate takes")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before each turn")
    p.add_argument("--steps", type=int, default=40, help="timed steps per turn")
    p.add_argument("--seed", type=int, default=0, help="of the turn order")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    workload = json.loads(Path(args.workload).read_text())
    world, rank = dist.get_world_size(), dist.get_rank()
    jobs = {}
    for candidate in args.candidate:
        precision, batch = candidate.split(":")
        model, optimizer = build(workload, *precision.split("/"))
        data = itertools.cycle(batches(workload, int(batch), 8, seed=rank))
        jobs[candidate] = (TrainPipelineSparseDist(model, optimizer, torch.device("cpu")), data, int(batch))
    order, rng = list(jobs), random.Random(args.seed)
    rates: dict[str, list[float]] = {c: [] for c in jobs}
    for _ in range(args.rounds):
        rng.shuffle(order)
        for candidate in order:
            pipeline, data, batch = jobs[candidate]
            seconds = timed_steps(pipeline, data, args.warmup, args.steps)
            rates[candidate].append(args.steps * batch * world / seconds)
    if rank == 0:
        result = {"steps": args.steps, "rounds": args.rounds, "samples_per_s": rates}
        Path(args.out).write_text(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
