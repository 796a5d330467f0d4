"""Knobs that cannot act where a study measures: never searched, never published, said why.

CPU ranks talk over gloo, which reads no NCCL, aws-ofi-nccl or libfabric variable; NCCL's socket
variables act only on its socket transport; aws-ofi-nccl's only where NCCL loaded that plugin; and
none of the network's variables act where no peer is reached through NCCL's NET transport (one
node: every peer via P2P or SHM), whatever network NCCL's INIT line names.
What is known before the first launch (the local machine has no GPU, a replay landscape was
recorded on gloo) is said when the study is created; the baseline's own report (backend, the
network NCCL chose) settles the rest.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.envvars import lookup
from autotuner.space import SearchSpace
from autotuner.tuning.settings import StudySettings

COMM_PREFIXES = ("NCCL_", "OFI_NCCL_", "FI_", "TORCH_NCCL_")
NET_TRANSPORTS = ("socket", "ib", "efa")  # the registry's transports that live in NCCL's NET


@dataclass(frozen=True)
class Where:
    """What is known of where launches run; None: not known (yet)."""

    backend: str | None = None  # gloo | nccl
    network: str | None = None  # what NCCL chose: Socket, IB, AWS Libfabric, ...
    ofi_plugin: bool | None = None
    # Whether some peer is reached through NET (from NCCL's per-peer transport lines); None: unknown.
    crosses_network: bool | None = None
    peer_transports: tuple[str, ...] = ()

    @classmethod
    def of_result(cls, summary: dict[str, Any]) -> Where:
        """From a launch's report (the baseline's)."""
        effective = summary.get("nccl_effective") or {}
        backend = summary.get("backend")
        ofi = bool(effective.get("ofi_plugin_version")) if backend == "nccl" else None
        kinds = effective.get("transport_kinds") if backend == "nccl" else None
        crosses = None if kinds is None else bool({"NET", "COLLNET"} & set(kinds))
        if crosses is None and backend == "nccl" and effective.get("nnodes") == 1:
            crosses = False  # NCCL's own count: one node, whatever network its INIT line names
        return cls(backend, effective.get("network"), ofi, crosses, tuple(kinds or ()))


def where_before_launching(settings: StudySettings) -> Where:
    """What the executor says before anything runs: a local run on a machine without a GPU is gloo;
    a replay answers with what its landscape recorded."""
    if settings.executor == "local" and not _gpu_here():
        return Where("gloo")
    if settings.executor == "replay":
        try:
            meta = json.loads(Path(settings.executor_options["landscape"]).read_text())
        except (OSError, KeyError, ValueError):
            return Where()
        return Where(meta.get("backend"))
    return Where()


def _gpu_here() -> bool:
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def why_inert(name: str, where: Where) -> str | None:
    """Why a variable cannot act here (None: it may)."""
    if where.backend == "gloo" and name.startswith(COMM_PREFIXES):
        return "CPU ranks talk over gloo, which reads no NCCL, aws-ofi-nccl or libfabric variable"
    var = lookup(name)
    if var is None or where.backend != "nccl":
        return None
    network = (where.network or "").lower()
    if var.transport in NET_TRANSPORTS and where.crosses_network is False:
        via = (
            f"every peer via {'/'.join(where.peer_transports)}"
            if where.peer_transports
            else "NCCL counts one node"
        )
        return f"acts only on NCCL's network transport, and no peer is reached through it here ({via})"
    if var.transport == "socket" and network and network != "socket":
        return f"acts only on NCCL's socket transport; NCCL uses {where.network} here"
    if var.transport == "efa" and where.ofi_plugin is False:
        return f"acts only through aws-ofi-nccl, which NCCL did not load here (it uses {where.network})"
    if var.transport == "ib" and network and network != "ib":
        return f"acts only on NCCL's IB verbs transport; NCCL uses {where.network} here"
    return None


def inert_variables(names: Iterable[str], where: Where) -> dict[str, str]:
    return {name: why for name in names if (why := why_inert(name, where)) is not None}


def searched(space: SearchSpace, inert: dict[str, str]) -> SearchSpace:
    """The space a study searches: inert dimensions left out, unless the space forces them in."""
    return space.without(set(inert) - set(space.force_inert))
