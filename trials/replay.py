"""A plain `torch.distributed.all_to_all_single` loop: the reference for the trial's bandwidth.

It replays exactly the all-to-all calls one trial iteration issued (dtype, element counts, splits),
timed the same way (issue to completion, as the last rank to arrive sees it), with no TorchRec around
them. It waits on each call at once, so there issue to wait is issue to completion.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from trials.stats import summarize


def replay_calls(
    calls: list[dict[str, Any]],
    device: torch.device,
    warmup: int,
    iterations: int,
    world_size: int,
) -> dict[str, Any]:
    buffers = [
        (
            torch.ones(c["in_numel"], dtype=getattr(torch, c["dtype"]), device=device),
            torch.empty(c["out_numel"], dtype=getattr(torch, c["dtype"]), device=device),
            c["in_splits"],
            c["out_splits"],
        )
        for c in calls
    ]
    cuda = device.type == "cuda"

    def timed_call(send: torch.Tensor, recv: torch.Tensor, in_splits: Any, out_splits: Any) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True).wait()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter()
        dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True).wait()
        return time.perf_counter() - t0

    def one_iteration() -> list[float]:
        return [timed_call(*b) for b in buffers]

    for _ in range(warmup):
        one_iteration()
    dist.barrier()
    local = [one_iteration() for _ in range(iterations)]
    everyone: list[list[list[float]]] = [[] for _ in range(world_size)]
    dist.all_gather_object(everyone, local)
    # Same statistic as the trial: per call, the last rank to arrive sees the wire time.
    per_iter = [
        sum(min(rank[i][j] for rank in everyone) for j in range(len(buffers))) for i in range(iterations)
    ]
    stats = summarize(per_iter)
    nbytes = sum(send.numel() * send.element_size() for send, *_ in buffers)
    sent = [0.0] * world_size
    dist.all_gather_object(sent, float(nbytes))
    mean_bytes = sum(sent) / world_size
    algbw = mean_bytes / stats["median"] / 1e9 if stats["median"] > 0 else 0.0
    return {
        "calls_per_iter": len(buffers),
        "bytes_per_iter": mean_bytes,
        "ms": {k: (v * 1000 if k not in ("cv", "n") else v) for k, v in stats.items()},
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * (world_size - 1) / world_size,
    }
