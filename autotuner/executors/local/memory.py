"""Whether this host can hold the ranks of a launch, asked before it starts.

Every rank of a local launch runs on the host that runs the tuner (the service, when it schedules):
64 ranks of 355 MiB each fill a 24 GiB machine, and the kernel's OOM killer then picks a process, which
may be the service itself. A launch whose ranks cannot fit in the memory available now is refused with
what it would need, rather than started.
"""

from __future__ import annotations

from pathlib import Path

from trials.spec import parse_spec, parse_workload

GIB = 1024**3
# What one rank holds before its tables and inputs: torch, TorchRec, FBGEMM, the process group and the
# dense model. 355 MiB measured for a CPU rank of the demo workload; the rest is margin.
RANK_BASE_BYTES = 512 * 1024**2
MEMINFO = Path("/proc/meminfo")


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of this host (None where there is no /proc/meminfo to say)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def launch_bytes(spec: dict, ranks: int) -> int:
    """What `ranks` ranks of a trial of `spec` hold at most: each its base and its input batches at
    the launch's largest batch, and the workload's fp32 rows once (sharded: each row lives on one rank).
    A spec without candidates (a study's check before its first launch) counts no inputs."""
    if not spec.get("candidates"):
        return ranks * RANK_BASE_BYTES + parse_workload(spec.get("workload")).row_bytes
    trial = parse_spec(spec)
    inputs = trial.input_bytes(max(c.batch_size for c in trial.candidates))
    return ranks * (RANK_BASE_BYTES + inputs) + trial.workload.row_bytes


def check_host_memory(spec: dict, ranks: int, available: int | None) -> None:
    """ValueError naming the need and what is available when `ranks` ranks of `spec` cannot fit here."""
    if available is None:
        return
    need = launch_bytes(spec, ranks)
    if need > available:
        raise ValueError(
            f"{ranks} ranks on this host would hold about {need / GIB:,.1f} GiB ({RANK_BASE_BYTES >> 20} MiB "
            f"each before their inputs, plus the workload's rows), and {available / GIB:,.1f} GiB is "
            "available: run fewer ranks per node or nodes here (--nproc, --nnodes), or a smaller workload"
        )
