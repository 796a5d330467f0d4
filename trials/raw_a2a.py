"""The plain all-to-all loop on its own: `torchrun ... -m trials.raw_a2a --result R.json --out RAW.json`.

Replays, per candidate of a trial result, the exact all-to-all calls one iteration issued (same
dtypes, element counts and splits, on the same number of ranks) in a bare
`torch.distributed.all_to_all_single` loop, and reports its bandwidth beside the trial's. Or, with
`--bytes N[,M...]`, one all-to-all of N bytes per rank per size (nccl-tests style, float32): the
sweep `make gpu-check` runs under each socket setting. On NCCL the report says what NCCL took
(`nccl_effective`, from its INFO log), since a variable is only a request.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from trials.nccl_log import parse_nccl_info
from trials.result import collect_env, load_result, write_json_atomic


def _uniform_calls(nbytes: int, world_size: int) -> list[dict[str, Any]]:
    numel = max(world_size, nbytes // 4 // world_size * world_size)
    return [
        {"dtype": "float32", "in_numel": numel, "out_numel": numel, "in_splits": None, "out_splits": None}
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trials.raw_a2a", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--result", help="trial result whose all-to-all calls to replay")
    source.add_argument("--bytes", help="one all-to-all of this many bytes per rank (a comma list: a sweep)")
    parser.add_argument("--out", required=True, help="where rank 0 writes the JSON report")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    from trials import replay

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if args.result:
        trial = load_result(args.result)
        if trial.get("world_size") != world_size:
            print(
                f"trials.raw_a2a: result has {trial.get('world_size')} ranks, this launch {world_size}",
                file=sys.stderr,
            )
            return 2
        work = [
            (c["index"], c["a2a_calls_by_rank"][rank], c) for c in trial["candidates"] if c["status"] == "ok"
        ]
    else:
        try:
            sizes = [int(b) for b in args.bytes.split(",") if b.strip()]
        except ValueError:
            sizes = []
        if not sizes or min(sizes) <= 0:
            print(f"trials.raw_a2a: --bytes takes positive integers, got {args.bytes!r}", file=sys.stderr)
            return 2
        work = [(None, _uniform_calls(n, world_size), None) for n in sizes]

    use_cuda = (
        torch.cuda.is_available() and trial.get("device") == "cuda"
        if args.result
        else torch.cuda.is_available()
    )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # Emulated nodes share the GPUs: rank r of a node is on GPU r modulo what this process sees.
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    nccl_log = None
    if use_cuda:
        torch.cuda.set_device(device)
        nccl_log = route_nccl_debug()
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    try:
        rows = []
        for index, calls, measured in work:
            raw = replay.replay_calls(calls, device, args.warmup, args.iterations, world_size)
            row: dict[str, Any] = {"candidate": index, "raw": raw}
            if measured is not None:
                row["trial_algbw_gbps"] = measured["algbw_gbps"]
                row["ratio"] = measured["algbw_gbps"] / raw["algbw_gbps"] if raw["algbw_gbps"] else None
            rows.append(row)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        report: dict[str, Any] = {"world_size": world_size, "device": device.type, "rows": rows,
                                  "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
                                  "env": collect_env(os.environ)}  # fmt: skip
        if nccl_log is not None:
            report["nccl_effective"] = parse_nccl_info(_read_lines(nccl_log))
        write_json_atomic(args.out, report)
        for row in rows:
            ratio = f"  trial/raw {row['ratio']:.2f}" if row.get("ratio") else ""
            print(
                f"candidate {row['candidate']}: raw algbw {row['raw']['algbw_gbps']:.3f} GB/s "
                f"({row['raw']['bytes_per_iter'] / 1e6:.2f} MB/iter){ratio}"
            )
    return 0


def route_nccl_debug() -> str | None:
    """NCCL's INFO log into a file of this process, unless the launcher routed it (then: not ours to read)."""
    if "NCCL_DEBUG" in os.environ:
        return (
            os.environ.get("NCCL_DEBUG_FILE") if "%" not in os.environ.get("NCCL_DEBUG_FILE", "%") else None
        )
    path = os.path.join(tempfile.gettempdir(), f"autotuner-raw-a2a-nccl-{os.getpid()}.log")
    os.environ.update(
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET,P2P", "NCCL_DEBUG_FILE": path}
    )
    return path


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
