"""The local executor's options: how N nodes run on this machine, and an emulated fabric."""

from typing import Annotated, Literal

from pydantic import StrictStr

from autotuner.executors.options import ExecutorOptions, fullmatch, option

FABRIC_RATE = r"[1-9][0-9]{0,5}(kbit|mbit|gbit)"  # tc's rate units that tbf takes, as `--fabric` gives them


class LocalOptions(ExecutorOptions):
    executor = "local"

    fabric: Annotated[StrictStr, fullmatch(FABRIC_RATE)] | None = option(
        None, "emulate a fabric: the ranks' loopback limited to this rate (tbf) in a network namespace (root)",
        "a number with kbit, mbit or gbit, e.g. 2gbit",
    )  # fmt: skip
    nodes: Literal["one", "ranks", "hostids", "namespaces"] = option(
        "one",
        "how a launch of N nodes runs here: one (refused), ranks (N x nproc_per_node ranks in one torchrun), "
        "hostids (a torchrun agent per node, each its own NCCL_HOSTID, NCCL's socket transport over "
        "loopback: NCCL's own knobs act, also with every node on one GPU), "
        "namespaces (a network namespace and hostname per node, a shaped bridge between them, a torchrun "
        "agent each; root)",
        "one, ranks, hostids or namespaces",
    )
