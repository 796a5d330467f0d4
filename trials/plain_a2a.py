"""The plain all-to-all loop: the reference for a trial's bandwidth, and NCCL's own sweep.

`replay_calls` replays exactly the all-to-all calls one trial iteration issued (dtype, element
counts, splits) in a bare `torch.distributed.all_to_all_single` loop, timed the way the trial times
them (issue to completion, as the last rank to arrive sees it), with no TorchRec around them. It
waits on each call at once, so there issue to wait is issue to completion. On NCCL with its timing on
(the trial sets TORCH_NCCL_ENABLE_TIMING) it also reads NCCL's own start/end events of each call
(`nccl_ms`): the instrument the trial's breakdown uses, so the two compare like with like. The trial runner calls it
in process; on its own,
`torchrun ... -m trials.plain_a2a --result R.json --out RAW.json` does it per candidate of a trial
result (on the same number of ranks) and reports its bandwidth beside the trial's. Or, with
`--bytes N[,M...]`, one all-to-all of N bytes per rank per size (nccl-tests style, float32): the
sweep `make gpu-check` runs under each socket setting. On NCCL the report says what NCCL took
(`nccl_effective`, from its INFO log), since a variable is only a request.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trials.nccl_log import parse_nccl_info, read_log, route_nccl_debug
from trials.percentiles import summarize
from trials.result import collect_env, load_result, write_json_atomic

if TYPE_CHECKING:
    import torch

Work = list[tuple[int | None, list[dict[str, Any]], dict[str, Any] | None]]


def replay_calls(
    calls: list[dict[str, Any]],
    device: torch.device,
    warmup: int,
    iterations: int,
    world_size: int,
) -> dict[str, Any]:
    """Time `calls` (one iteration's all-to-alls) `iterations` times after `warmup`; the wire statistic."""
    import torch
    import torch.distributed as dist

    from trials.probe import nccl_seconds

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

    def timed_call(send: torch.Tensor, recv: torch.Tensor, in_splits: Any, out_splits: Any) -> Timed:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work = dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True)
            work.wait()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0, nccl_seconds(work)
        t0 = time.perf_counter()
        dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True).wait()
        return time.perf_counter() - t0, None

    def one_iteration() -> list[Timed]:
        return [timed_call(*b) for b in buffers]

    for _ in range(warmup):
        one_iteration()
    dist.barrier()
    local = [one_iteration() for _ in range(iterations)]
    everyone: list[list[list[Timed]]] = [[] for _ in range(world_size)]
    dist.all_gather_object(everyone, local)
    nbytes = sum(send.numel() * send.element_size() for send, *_ in buffers)
    sent = [0.0] * world_size
    dist.all_gather_object(sent, float(nbytes))
    return wire_figures(everyone, sum(sent) / world_size)


Timed = tuple[float, float | None]  # a call's seconds: on the issuing stream (or the clock), by NCCL's events


def wire_figures(everyone: list[list[list[Timed]]], mean_bytes: float) -> dict[str, Any]:
    """Per-iteration wire time of every rank's timed calls (rank -> iteration -> call), as the trial
    takes it: per call, the last rank to arrive sees the wire time (the min over ranks). `ms` from the
    issuing stream's events (CUDA) or the clock (CPU); with NCCL's own events on every call, `nccl_ms`
    from them too: the instrument the trial's breakdown uses (trials.probe)."""
    world_size = len(everyone)
    iterations, calls = len(everyone[0]), len(everyone[0][0]) if everyone[0] else 0

    def per_iteration(seconds: Callable[[Timed], float]) -> list[float]:
        return [
            sum(min(seconds(rank[i][j]) for rank in everyone) for j in range(calls))
            for i in range(iterations)
        ]

    def as_ms(stats: dict[str, float]) -> dict[str, float]:
        return {k: (v * 1000 if k not in ("cv", "n") else v) for k, v in stats.items()}

    stats = summarize(per_iteration(lambda t: t[0]))
    algbw = mean_bytes / stats["median"] / 1e9 if stats["median"] > 0 else 0.0
    out: dict[str, Any] = {
        "calls_per_iter": calls,
        "bytes_per_iter": mean_bytes,
        "ms": as_ms(stats),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * (world_size - 1) / world_size,
    }
    if calls and all(t[1] is not None for rank in everyone for it in rank for t in it):
        out["nccl_ms"] = as_ms(summarize(per_iteration(lambda t: t[1] or 0.0)))
    return out


def same_instrument_algbw(raw: dict[str, Any], nccl_timing: bool) -> float:
    """The plain loop's algbw as the trial's breakdown measures: from NCCL's own events when it used
    them (and the loop has them), else from the issuing stream or the clock."""
    nccl = raw.get("nccl_ms")
    if nccl_timing and nccl and nccl.get("median", 0) > 0:
        return float(raw["bytes_per_iter"] / (nccl["median"] / 1000) / 1e9)
    return float(raw["algbw_gbps"])


def _uniform_calls(nbytes: int, world_size: int) -> list[dict[str, Any]]:
    numel = max(world_size, nbytes // 4 // world_size * world_size)
    return [
        {"dtype": "float32", "in_numel": numel, "out_numel": numel, "in_splits": None, "out_splits": None}
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trials.plain_a2a", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--result", help="trial result whose all-to-all calls to replay")
    source.add_argument("--bytes", help="one all-to-all of this many bytes per rank (a comma list: a sweep)")
    parser.add_argument("--out", required=True, help="where rank 0 writes the JSON report")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    trial = load_result(args.result) if args.result else None
    work = _trial_work(trial, rank, world_size) if trial is not None else _sweep_work(args.bytes, world_size)
    if isinstance(work, str):
        print(f"trials.plain_a2a: {work}", file=sys.stderr)
        return 2
    use_cuda = torch.cuda.is_available() and (trial is None or trial.get("device") == "cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # Emulated nodes share the GPUs: rank r of a node is on GPU r modulo what this process sees.
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    nccl_log = None
    if use_cuda:
        torch.cuda.set_device(device)
        nccl_log = route_nccl_debug("plain-a2a")
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    try:
        rows = [_row(index, replay_calls(calls, device, args.warmup, args.iterations, world_size), measured)
                for index, calls, measured in work]  # fmt: skip
    finally:
        dist.destroy_process_group()
    if rank == 0:
        _report(args.out, rows, world_size, device.type, nccl_log)
    return 0


def _trial_work(trial: dict[str, Any], rank: int, world_size: int) -> Work | str:
    if trial.get("world_size") != world_size:
        return f"result has {trial.get('world_size')} ranks, this launch {world_size}"
    return [(c["index"], c["a2a_calls_by_rank"][rank], c) for c in trial["candidates"] if c["status"] == "ok"]


def _sweep_work(spec: str, world_size: int) -> Work | str:
    try:
        sizes = [int(b) for b in spec.split(",") if b.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) <= 0:
        return f"--bytes takes positive integers, got {spec!r}"
    return [(None, _uniform_calls(n, world_size), None) for n in sizes]


def _row(index: int | None, raw: dict[str, Any], measured: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"candidate": index, "raw": raw}
    if measured is not None:
        row["trial_algbw_gbps"] = measured["algbw_gbps"]
        row["ratio"] = measured["algbw_gbps"] / raw["algbw_gbps"] if raw["algbw_gbps"] else None
    return row


def _report(
    out: str, rows: list[dict[str, Any]], world_size: int, device: str, nccl_log: Path | None
) -> None:
    report: dict[str, Any] = {"world_size": world_size, "device": device, "rows": rows,
                              "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
                              "env": collect_env(os.environ)}  # fmt: skip
    if nccl_log is not None:
        report["nccl_effective"] = parse_nccl_info(read_log(nccl_log))
    write_json_atomic(out, report)
    for row in rows:
        ratio = f"  trial/raw {row['ratio']:.2f}" if row.get("ratio") else ""
        print(
            f"candidate {row['candidate']}: raw algbw {row['raw']['algbw_gbps']:.3f} GB/s "
            f"({row['raw']['bytes_per_iter'] / 1e6:.2f} MB/iter){ratio}"
        )


if __name__ == "__main__":
    sys.exit(main())
