"""A TorchRec DLRM job that adopts a tuned config (autotuner.job.qcomms): the job author's side.

    torchrun --standalone --nproc-per-node 2 deploy/examples/train_dlrm.py [--steps 30]
    autotuner exec --server URL --cluster C --workload W -- \
        torchrun --standalone --nproc-per-node 2 deploy/examples/train_dlrm.py

Without AUTOTUNER_* variables it runs its own settings (batch 512 per rank, lr 0.01, table-wise,
TrainPipelineSparseDist, fp32 comms); under the hook it takes the config's comm precision, batch with
its learning-rate factor, sharding, threads and train pipeline. A value it cannot use is ignored and
said on stderr ("nccl-autotuner: ignored ..."). CPU ranks on gloo, or one GPU a rank on NCCL. Random
data: it shows the wiring, not a model worth training.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torchrec.datasets.utils import Batch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from autotuner.job.qcomms import tuned, tuned_constraints, tuned_sharder_kwargs, tuned_train_pipeline

# The job's own settings: what it runs without a tuned config.
BATCH_SIZE, LR, SHARDING, PIPELINE = 512, 0.01, "table_wise", "sparse_dist"
TABLES = {"user": 4000, "item": 8000, "category": 200}  # name: rows; every table 32 wide
DIM, DENSE_IN = 32, 13


def random_batches(batch_size: int, seed: int, device: torch.device) -> Iterator[Batch]:
    """Click-log-shaped random data: 13 dense features, 1-3 ids per table, a 0/1 label."""
    g = torch.Generator().manual_seed(seed)
    while True:
        lengths = torch.randint(1, 4, (len(TABLES), batch_size), generator=g)
        values = [
            torch.randint(0, rows, (int(n.sum()),), generator=g)
            for rows, n in zip(TABLES.values(), lengths, strict=True)
        ]
        sparse = KeyedJaggedTensor.from_lengths_sync(
            keys=[f"f_{name}" for name in TABLES], values=torch.cat(values), lengths=lengths.reshape(-1)
        )
        batch = Batch(
            dense_features=torch.randn(batch_size, DENSE_IN, generator=g),
            sparse_features=sparse,
            labels=torch.randint(0, 2, (batch_size,), generator=g).float(),
        )
        yield batch.to(device)


def build(
    device: torch.device, batch_size: int, lr: float
) -> tuple[DistributedModelParallel, CombinedOptimizer]:
    """The DLRM, sharded the tuned way with the tuned comm codecs, and its optimizers."""
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=r, feature_names=[f"f_{n}"])
                for n, r in TABLES.items()],
        device=torch.device("meta"),
    )  # fmt: skip
    model = DLRMTrain(DLRM(ebc, DENSE_IN, [64, DIM], [64, 1]))
    # The embedding optimizer runs fused in the backward; the comm precision comes from the config.
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"learning_rate": lr}, **tuned_sharder_kwargs(device)
    )
    planner = EmbeddingShardingPlanner(
        batch_size=batch_size, constraints=tuned_constraints(TABLES, sharder, device, default=SHARDING)
    )
    plan = planner.collective_plan(model, [sharder], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=[sharder])
    dense = KeyedOptimizerWrapper(
        dict(p for p in dmp.named_parameters() if "embedding_bags" not in p[0]),
        lambda params: torch.optim.Adagrad(params, lr=lr),
    )
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)

    t = tuned()  # the config's settings; None/1.0 where it says nothing
    batch_size, lr = t.batch_size or BATCH_SIZE, LR * t.lr_scale  # both, or neither
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    dmp, optimizer = build(device, batch_size, lr)
    pipeline = tuned_train_pipeline(dmp, optimizer, device, default=PIPELINE)
    if rank == 0:
        sharded = sorted({s.sharding_type for m in dmp.plan.plan.values() for s in m.values()})
        print(f"config {t.config or '(none)'}: comms {t.fwd_precision}/{t.bwd_precision}, batch {batch_size} "
              f"per rank, lr {lr:g}, tables {'/'.join(sharded)}, pipeline {type(pipeline).__name__}",
              flush=True)  # fmt: skip
    data = random_batches(batch_size, seed=rank, device=device)
    for step in range(args.steps):
        loss = pipeline.progress(data)[0]  # DLRMTrain's output: (loss, logits, labels)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step} loss {float(loss):.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without interpreter finalisation: torch's C++ threads can abort a finished rank at exit
    # ("terminate called without an active exception" on gloo), and torchrun then reports FAILED.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
