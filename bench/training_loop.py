"""A reference TorchRec training job, written from torchrec's public API only (never `trials`).

    torchrun --standalone --nproc-per-node 2 bench/training_loop.py --workload W.json \
        --precision int8/int8 --batch 1024 --out result.json

What a user's DLRM job does: `DLRM` in `DLRMTrain`, every table sharded table-wise on the FUSED
kernel with the declared optimizer in the backward, comm codecs from `get_qcomm_codecs_registry`,
the dense part under DDP with its own optimizer (`KeyedOptimizerWrapper` in a `CombinedOptimizer`),
driven by `TrainPipelineSparseDist` at the declared learning rates. It reports its own throughput
(samples over wall time of the timed steps), which the training-fidelity benchmark compares with
what the trial predicted. Imports torch and torchrec only: it runs under torchrun on the ranks.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--precision", default="fp32/fp32", help="forward/backward comm precision")
    p.add_argument("--batch", type=int, required=True, help="batch size per rank")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    workload = json.loads(Path(args.workload).read_text())
    fwd, bwd = args.precision.split("/")
    model, optimizer = build(workload, fwd, bwd)
    pipeline = TrainPipelineSparseDist(model, optimizer, torch.device("cpu"))
    data = itertools.cycle(batches(workload, args.batch, 8, seed=dist.get_rank()))
    for _ in range(args.warmup):
        pipeline.progress(data)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.steps):
        pipeline.progress(data)
    dist.barrier()
    elapsed = time.perf_counter() - started
    if dist.get_rank() == 0:
        samples = args.steps * args.batch * dist.get_world_size()
        result = {"precision": args.precision, "batch_size": args.batch, "steps": args.steps,
                  "seconds": elapsed, "samples_per_s": samples / elapsed}  # fmt: skip
        Path(args.out).write_text(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
