"""What NCCL says it actually used, parsed from `NCCL_DEBUG=INFO` output.

Environment variables are only requests: NCCL clamps them (NSOCKS x NTHREADS <= 64), aws-ofi-nccl
injects its own defaults, and /etc/nccl.conf fills the gaps. These lines are the ground truth:
the network and plugin NCCL loaded, the NICs it took, and, per peer, the transport a channel
really crosses (`via NET/Socket/0`, `via P2P/IPC`, `via SHM/direct/direct`): a network variable
acts only where some peer is reached through NET.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("nccl_version", re.compile(r"NCCL version (\S+)")),
    # "Using network Socket", "Using network IB", "Using network AWS Libfabric": the name is the rest
    ("network", re.compile(r"Using network (\S.*?)\s*$")),
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
# "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0", "Channel 01/1 : 1[1] -> 0[0] via P2P/IPC/read"
_PEER = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[\w+\] -> (\d+)\[\w+\](?: \[(send|receive)\])? via (\S+)")
# "NET/Socket : Using [0]lo:127.0.0.1<0> [1]eth0:10.0.0.2<0>", "NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:..."
_NICS = re.compile(r"NET/(Socket|IB)\s*:\s*Using (\[\d+\].*?)(?:\s*;|$)")
_NIC = re.compile(r"\[\d+\](\S+?)(?:<\d+>)?(?=\s|$)")
# "NET/Plugin: Loaded net plugin AWS Libfabric (v9)", "NET/Plugin: Could not find: libnccl-net.so ...",
# "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file ..."
_PLUGIN_LOADED = re.compile(
    r"NET/Plugin\s*:\s*(?:Loaded (?:net|coll) plugin|Successfully loaded external plugin) (\S.*?)\s*$"
)
_PLUGIN_NONE = re.compile(
    r"NET/Plugin\s*:\s*(?:Could not find|No plugin found|dlerror=|Plugin load returned)"
)
# NCCL 2.2x: "Assigned NET plugin Socket to comm" (the network plugin this communicator uses)
_PLUGIN_ASSIGNED = re.compile(r"Assigned NET plugin (\S.*?) to comm")
_INIT_COMPLETE = re.compile(r"comm \S+ rank (\d+) nranks (\d+) .*Init COMPLETE")


def parse_nccl_info(
    lines: Iterable[str],
    launch_env: Mapping[str, str] | None = None,
    conf_files: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Turn NCCL INFO lines into a flat dict of effective settings. Unknown lines are ignored.

    `launch_env` (what the launcher exported) and `conf_files` (path -> text of the nccl.conf files
    NCCL reads) say where each "set by environment" value came from: NCCL logs the values it took
    from /etc/nccl.conf with those same words.
    """
    found: dict[str, Any] = {}
    env_applied: dict[str, str] = {}
    transports: dict[str, int] = {}
    peers: set[tuple[int, int, str]] = set()
    nics: list[str] = []
    comms: set[tuple[str, str]] = set()
    for raw in lines:
        line = raw.rstrip()
        if "NCCL INFO" not in line:
            continue
        m = _SET_BY_ENV.search(line)
        if m:
            env_applied[m.group(1)] = m.group(2)
            continue
        if m := _PEER.search(line):
            via = m.group(4)
            transports[via] = transports.get(via, 0) + 1
            peers.add((int(m.group(1)), int(m.group(2)), via.split("/")[0]))
            continue
        if m := _NICS.search(line):
            nics += [n for n in _NIC.findall(m.group(2)) if n not in nics]
            found.setdefault("nic_transport", m.group(1))
        if m := _PLUGIN_LOADED.search(line):
            found["net_plugin"] = m.group(1)
        elif _PLUGIN_NONE.search(line):
            found.setdefault("net_plugin", "none (NCCL's internal network)")
        if m := _PLUGIN_ASSIGNED.search(line):
            found["net_plugin_assigned"] = m.group(1)
        if m := _INIT_COMPLETE.search(line):
            comms.add((m.group(1), m.group(2)))
        _read_patterns(line, found)
    if env_applied:
        found["set_by_environment"] = env_applied
        found["env_source"] = env_sources(env_applied, launch_env, conf_files)
    if transports:
        found["peer_transports"] = dict(sorted(transports.items()))
        # the kinds every connection of this rank uses: NET, P2P, SHM, COLLNET
        found["transport_kinds"] = sorted({kind for _, _, kind in peers})
    if nics:
        found["nics"] = nics
    if comms:
        found["init_complete"] = len(comms)
    return found


def _read_patterns(line: str, found: dict[str, Any]) -> None:
    """The settings one line states (the first statement of each wins)."""
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


def crosses_network(effective: Mapping[str, Any]) -> bool | None:
    """Whether any peer is reached through NCCL's NET transport (None: the log did not say)."""
    kinds = effective.get("transport_kinds")
    if kinds is None:
        return None
    return "NET" in kinds or "COLLNET" in kinds


def env_sources(
    applied: Mapping[str, str], launch_env: Mapping[str, str] | None, conf_files: Mapping[str, str] | None
) -> dict[str, str]:
    """For each value NCCL took: "environment" (the launch exported it) or the nccl.conf that set it."""
    conf = {path: _conf_values(text) for path, text in (conf_files or {}).items()}
    sources = {}
    for name, value in applied.items():
        if launch_env is not None and name in launch_env:
            sources[name] = "environment"
            continue
        path = next((p for p, values in conf.items() if values.get(name) == value), None)
        if path is None:
            path = next((p for p, values in conf.items() if name in values), None)
        sources[name] = path or ("environment" if launch_env is None else "environment (not the launch's)")
    return sources


def _conf_values(text: str) -> dict[str, str]:
    """NAME=VALUE lines of an nccl.conf (comments and blanks skipped), as NCCL reads them."""
    values = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            name, value = line.split("=", 1)
            values[name.strip()] = value.strip()
    return values


def route_nccl_debug(name: str) -> Path | None:
    """NCCL's INFO log into a file of this process, to be read back with `read_log`; None when the
    launcher routed it already (then it is not ours to read). NCCL reads these once, at communicator
    init: call before the first collective."""
    if "NCCL_DEBUG" not in os.environ:
        os.environ["NCCL_DEBUG"] = "INFO"
        # INIT also carries the per-peer transport lines ("via NET/Socket/0"); P2P their connects.
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET,P2P")
    if "NCCL_DEBUG_FILE" in os.environ:
        return None
    path = Path(tempfile.gettempdir()) / f"autotuner-{name}-{os.getpid()}.log"
    os.environ["NCCL_DEBUG_FILE"] = str(path)
    return path


MAX_WARNINGS = 50  # of a log handed over to the launch's: the last ones (a flood repeats itself)


def hand_over(path: Path | None, stream: TextIO) -> None:
    """NCCL's warnings of a routed log into the launch's own log (`stream`: stderr), then the file
    removed: routed away, a failed or hung launch lost NCCL's word on why, and every process left a file
    in the temporary directory."""
    if path is None:
        return
    warned = [line for line in read_log(path) if " NCCL WARN " in line]
    for line in warned[-MAX_WARNINGS:]:
        print(f"nccl: {line}", file=stream)
    if len(warned) > MAX_WARNINGS:
        print(f"nccl: ({len(warned) - MAX_WARNINGS} earlier warnings not shown)", file=stream)
    stream.flush()
    path.unlink(missing_ok=True)


def read_log(path: Path | None) -> list[str]:
    """The lines of a routed log (none when there is none, or it cannot be read)."""
    if path is None:
        return []
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []
