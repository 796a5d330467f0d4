"""The emulated inter-node link, measured three ways between rank 0 and rank 1 on different nodes
(runs under torchrun, torch only): plain TCP both ways at once (what the fabric carries), gloo
send/recv one way, and a plain all_to_all_single (both ways at once, as the trial's comms). Each is
bytes per second leaving a node."""

from __future__ import annotations

import argparse
import fcntl
import json
import socket
import struct
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

PORT = 29611
SIOCGIFADDR = 0x8915


def _address(ifname: str = "eth0") -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return socket.inet_ntoa(
            fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()))[20:24]
        )


def _timed(fn, iterations: int) -> float:
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        fn()
    dist.barrier()
    return time.perf_counter() - started


def tcp_duplex(rank: int, nbytes: int) -> float:
    """Both ranks send `nbytes` to each other at once over one plain TCP connection; bytes/s each way."""
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        server = socket.create_server((_address(), PORT))
        store.set("link_probe_addr", _address())
        conn, _ = server.accept()
    else:
        conn = socket.create_connection((store.get("link_probe_addr").decode(), PORT))
    chunk = b"\0" * (1 << 20)
    sender = threading.Thread(target=lambda: [conn.sendall(chunk) for _ in range(nbytes >> 20)])
    dist.barrier()
    started = time.perf_counter()
    sender.start()
    got = 0
    while got < nbytes:
        got += len(conn.recv(1 << 20))
    sender.join()
    elapsed = time.perf_counter() - started
    conn.close()
    return nbytes / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=8, help="MB each rank sends per call, split over all ranks")
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit(f"link_probe: needs 2 ranks on 2 nodes, got {world}")
    send = torch.randn(args.mb * (1 << 20) // 4)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)  # warm up: connections made
    a2a = _timed(lambda: dist.all_to_all_single(recv, send), args.iterations)
    one_way = _timed(lambda: dist.send(send, 1) if rank == 0 else dist.recv(recv, 0), args.iterations)
    remote = send.numel() * 4 / 2  # what leaves a node per all_to_all call
    tcp = tcp_duplex(rank, args.mb * args.iterations << 20)
    if rank == 0:
        Path(args.out).write_text(json.dumps({
            "world_size": world, "bytes_per_call_each_way": remote,
            "bytes_per_s_each_way": remote * args.iterations / a2a,
            "gloo_one_way_bytes_per_s": send.numel() * 4 * args.iterations / one_way,
            "tcp_duplex_bytes_per_s_each_way": tcp}))  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
