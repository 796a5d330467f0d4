"""The values a trial spec's fields take, written once: the spec (trials.spec), the search space
(autotuner.space), the job-side helper (autotuner.job.qcomms), the served config's checks
(autotuner.job.exports) and the benchmarks read them from here.

Standard library only: a training script's `autotuner.job.qcomms` and the pre-job hook import it, and
neither may pull in pydantic, torch or anything else (tests/test_imports.py).
"""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["fp32", "fp16", "bf16", "fp8", "int8"]
Sharding = Literal["table_wise", "row_wise", "table_row_wise", "column_wise"]
# How the job drives a step: a plain loop, or one of TorchRec's train pipelines (which overlap stages
# on CUDA side streams; fused_sparse_dist only where the installed torchrec has it).
Pipeline = Literal["none", "base", "sparse_dist", "semi_sync", "fused_sparse_dist"]
ComputeKernel = Literal["fused", "dense"]  # fused: the optimizer runs inside the embedding backward
Interaction = Literal["dot", "dcn"]  # dot: DLRM; dcn: DLRM_DCN (low-rank cross net)
EmbeddingOptimizer = Literal["exact_sgd", "exact_adagrad", "exact_rowwise_adagrad"]
DenseOptimizer = Literal["sgd", "adagrad", "adam"]
Device = Literal["auto", "cpu", "cuda"]

PRECISIONS: tuple[str, ...] = get_args(Precision)
SHARDING_TYPES: tuple[str, ...] = get_args(Sharding)
PIPELINES: tuple[str, ...] = get_args(Pipeline)
COMPUTE_KERNELS: tuple[str, ...] = get_args(ComputeKernel)
INTERACTIONS: tuple[str, ...] = get_args(Interaction)
EMBEDDING_OPTIMIZERS: tuple[str, ...] = get_args(EmbeddingOptimizer)
DENSE_OPTIMIZERS: tuple[str, ...] = get_args(DenseOptimizer)
DEVICES: tuple[str, ...] = get_args(Device)
# Shardings whose pooled embeddings leave through a reduce-scatter (row_wise always; table_row_wise
# inside a host, then an all-to-all across hosts).
REDUCE_SCATTER_SHARDINGS: tuple[str, ...] = ("row_wise", "table_row_wise")
