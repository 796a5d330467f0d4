"""What NCCL says it actually used, parsed from `NCCL_DEBUG=INFO` output.

Environment variables are only requests: NCCL clamps them (NSOCKS x NTHREADS <= 64), aws-ofi-nccl
injects its own defaults, and /etc/nccl.conf fills the gaps. These lines are the ground truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("nccl_version", re.compile(r"NCCL version (\S+)")),
    ("network", re.compile(r"Using network (\S+)")),
    ("p2p_chunksize", re.compile(r"P2P Chunksize set to (\d+)")),
    (
        "socket_threads_and_socks",
        re.compile(r"NET/Socket\s*:\s*Using (\d+) threads and (\d+) sockets per thread"),
    ),
    ("ofi_provider", re.compile(r"NET/OFI Selected [Pp]rovider is ([\w-]+)")),
    ("ofi_plugin_version", re.compile(r"NET/OFI Initializing aws-ofi-nccl (\S+)")),
    (
        "channels",
        re.compile(r"(\d+) coll channels, .*?(\d+) p2p channels, (\d+) p2p channels per peer"),
    ),
    ("topology", re.compile(r"nRanks (\d+) nNodes (\d+) localRanks (\d+)")),
]
_SET_BY_ENV = re.compile(r"(\w+) set by environment to (\S+?)\.?$")


def parse_nccl_info(lines: Iterable[str]) -> dict[str, Any]:
    """Turn NCCL INFO lines into a flat dict of effective settings. Unknown lines are ignored."""
    found: dict[str, Any] = {}
    env_applied: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip()
        if "NCCL INFO" not in line:
            continue
        m = _SET_BY_ENV.search(line)
        if m:
            env_applied[m.group(1)] = m.group(2)
            continue
        for key, pattern in _PATTERNS:
            m = pattern.search(line)
            if not m or key in found:
                continue
            if key == "socket_threads_and_socks":
                found["socket_nthreads"] = int(m.group(1))
                found["socket_nsocks_perthread"] = int(m.group(2))
            elif key == "channels":
                found["coll_channels"] = int(m.group(1))
                found["p2p_channels"] = int(m.group(2))
                found["p2p_channels_per_peer"] = int(m.group(3))
            elif key == "topology":
                found["nranks"] = int(m.group(1))
                found["nnodes"] = int(m.group(2))
                found["local_ranks"] = int(m.group(3))
            elif key == "p2p_chunksize":
                found[key] = int(m.group(1))
            else:
                found[key] = m.group(1)
    if env_applied:
        found["set_by_environment"] = env_applied
    return found
