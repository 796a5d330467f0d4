"""Emulated nodes on one machine: a network namespace per node, a two-tier fabric between them.

Each node has its own loopback (traffic inside the node: unshaped) and a veth `eth0` to a bridge in
a namespace of its own (traffic between nodes: through the bridge, tbf-shaped at the fabric rate on
each node's way out: the "EFA" of the emulation). Addresses live only inside namespaces the launch
made; nothing is routed to the host's interfaces. Emulation, labelled so wherever it is reported;
never a stand-in for real nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SUBNET = "10.77.0"  # /24, inside the launch's own namespaces only
PORT = 29500
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")


@dataclass(frozen=True)
class NodeNetwork:
    """N emulated nodes of a launch; `prefix` names its namespaces (and what a sweep removes)."""

    prefix: str  # e.g. "at-3f2a1c-s3-l7"
    nodes: int
    rate: str | None = None  # None: the bridge is not shaped
    burst: str = "128kb"
    latency: str = "50ms"

    def __post_init__(self) -> None:
        if not _NAME.match(self.prefix) or not 1 <= self.nodes <= 200:
            raise ValueError(f"emulated nodes: bad prefix {self.prefix!r} or node count {self.nodes}")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def node(self, i: int) -> str:
        return f"{self.prefix}-n{i}"

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def namespaces(self) -> list[str]:
        return [self.bridge, *(self.node(i) for i in range(self.nodes))]

    def label(self) -> str:
        link = f"{self.rate} (tbf)" if self.rate else "unshaped"
        return (f"emulated: {self.nodes} nodes as network namespaces, inter-node links {link} "
                "through a bridge, intra-node loopback unshaped")  # fmt: skip

    def setup(self) -> list[list[str]]:
        """The commands that make the nodes and the fabric, in order (each one must succeed)."""
        br = self.bridge
        steps = [["ip", "netns", "add", br], ["ip", "-n", br, "link", "set", "lo", "up"],
                 ["ip", "-n", br, "link", "add", "br0", "type", "bridge"], ["ip", "-n", br, "link", "set", "br0", "up"]]  # fmt: skip
        for i in range(self.nodes):
            steps += self._node_steps(i)
        return steps

    def _node_steps(self, i: int) -> list[list[str]]:
        ns, port = self.node(i), f"v{i}"
        steps = [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            [
                "ip",
                "-n",
                ns,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.bridge,
            ],
            ["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0"],
            ["ip", "-n", ns, "link", "set", "eth0", "up"],
            ["ip", "-n", self.bridge, "link", "set", port, "master", "br0"],
            ["ip", "-n", self.bridge, "link", "set", port, "up"],
        ]
        if self.rate:
            steps.append(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                          "rate", self.rate, "burst", self.burst, "latency", self.latency])  # fmt: skip
        return steps

    def teardown(self) -> list[list[str]]:
        """Removing a namespace removes its veth end too (and the peer with it)."""
        return [["ip", "netns", "del", ns] for ns in self.namespaces()]


# What versions before 2026-12-06 named a launch's namespaces: "at-" and the launch's name
# (s<study>-l<seq>) cut to 12 characters ("at-s12-l34"), then "-br" / "-n<i>" for nodes=namespaces
# (bare: a fabric's one namespace). No name of now matches: theirs start with six hex digits.
OLD_STYLE = "^at-s[0-9]+(-l?[0-9]*)?(-br|-n[0-9]+)?$"
_OLD_MEMBER = "-(br|n[0-9]+)$"  # stripped, a name leaves its launch's (the group swept together)


def sweep_command(prefix: str) -> str:
    """Shell: remove the namespaces whose name starts with `prefix` (what a killed launch of this
    study left), then `old_style_sweep()`."""
    if not _NAME.match(prefix):
        raise ValueError(f"bad namespace prefix {prefix!r}")
    ours = f"for ns in $(ip netns list | cut -d' ' -f1 | grep '^{prefix}'); do ip netns del \"$ns\"; done"
    return f"{ours}\n{old_style_sweep()}"


def old_style_sweep() -> str:
    """Shell: remove the namespaces an older version named the old way (`OLD_STYLE`) whose launch is
    gone. Their names say no study directory, so another store's launch, run by an older version on
    this host, may still use them: a launch's namespaces (its bridge and nodes) go together, and only
    when no process is in any of them (`ip netns pids` answers, and names none). Run in a subshell:
    it leaves the script's arguments and its exit code alone."""
    group = f"sed -E 's/{_OLD_MEMBER}//'"
    return (
        f"(old=$(ip netns list 2>/dev/null | cut -d' ' -f1 | grep -E '{OLD_STYLE}'); "
        f"for g in $(printf '%s\\n' $old | {group} | sort -u); do "
        f'set --; for ns in $old; do [ "$(printf %s "$ns" | {group})" = "$g" ] && set -- "$@" "$ns"; done; '
        f'busy=; for ns in "$@"; do p=$(ip netns pids "$ns" 2>/dev/null) || busy=1; [ -n "$p" ] && busy=1; done; '
        f'[ -n "$busy" ] || for ns in "$@"; do ip netns del "$ns"; done; '
        "done; true)"
    )
