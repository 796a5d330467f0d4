"""Every environment variable the autotuner knows: what it does, what the library accepts, whether it is safe.

The facts come from shared/reference/search-space.md (NCCL, aws-ofi-nccl, libfabric, ProcessGroupNCCL). A
variable that is not here is refused by the linter: the tuner only searches and serves settings it can
explain, and an unknown name is more often a typo (or an attempt to change what runs) than a new knob.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import Enum

KINDS = ("int", "bool", "enum", "list", "string")
TRANSPORTS = ("socket", "efa", "ib", "any")

# All-to-all over NCCL is grouped send/recv; the others are NCCL "collectives" (algo/proto/tuner apply).
P2P = ("all_to_all", "send_recv")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
EVERY_OP = P2P + COLLECTIVES

# What a value may contain: survives a shell `export`, an env file and a Slurm TaskProlog line unquoted.
SAFE_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,:^=/+-"


class Safety(str, Enum):
    TUNABLE = "tunable"
    RISKY = "risky"  # can corrupt results or fail init: searched only when the user allows it by name
    NEVER = "never"  # not a search dimension (cluster settings, logging, safety checks)


@dataclass(frozen=True)
class Domain:
    """The values a variable accepts. Integers: low..high plus `negative` sentinels (-1 = off)."""

    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()
    pow2: bool = False  # NCCL rounds the value up to a power of two
    negative: tuple[int, ...] = ()  # legal values below `low`, such as -1
    exclude: bool = False  # list kinds: a leading ^ means "all but these"
    ignore_case: bool = False  # the library compares choices with strcasecmp
    pattern: str | None = None  # string kinds: a regex the whole value must match
    extra_chars: str = ""  # string kinds: characters allowed beyond SAFE_CHARS
    shape: str = ""  # string kinds with a pattern: the pattern in words

    @property
    def allows_negative(self) -> bool:
        return bool(self.negative) or (self.low is not None and self.low < 0)

    def contains(self, value: int) -> bool:
        if value in self.negative:
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str
    default: str | None  # as the library documents it; None = chosen automatically
    domain: Domain
    transport: str
    collectives: tuple[str, ...]
    safety: Safety
    passthrough: bool  # a cluster setting: may be pinned (fixed_env, a served config), never searched
    read_once: bool  # read once per process (NCCL_PARAM); False = read per communicator / process group
    doc: str
    prefix: bool = False  # `name` is a family such as NCCL_IB_*: every variable starting with it
    deprecated: str | None = None

    def allowed(self) -> str:
        """What a value may be, in words, for error messages."""
        d = self.domain
        if self.kind == "bool":
            return "0 or 1"
        if self.kind == "int":
            text = f"a plain decimal integer from {d.low} to {d.high}"
            if d.negative:
                text += " (or " + ", ".join(str(n) for n in d.negative) + ")"
            return text + (", a power of two" if d.pow2 else "")
        if self.kind == "enum":
            return "one of " + ", ".join(d.choices)
        if self.kind == "list":
            text = "a comma-separated list of " + ", ".join(d.choices)
            return text + (" (a leading ^ excludes them instead)" if d.exclude else "")
        if d.pattern:
            return d.shape or f"a value matching {d.pattern}"
        return "a non-empty value of the characters A-Z a-z 0-9 _ . , : ^ = / + -" + "".join(
            f" {c}" for c in d.extra_chars
        )


_ALL: list[EnvVar] = []


def _add(
    name: str,
    kind: str,
    default: str | None,
    doc: str,
    *,
    low: int | None = None,
    high: int | None = None,
    choices: tuple[str, ...] = (),
    pow2: bool = False,
    negative: tuple[int, ...] = (),
    exclude: bool = False,
    ignore_case: bool = False,
    pattern: str | None = None,
    extra_chars: str = "",
    shape: str = "",
    transport: str = "any",
    collectives: tuple[str, ...] = EVERY_OP,
    safety: Safety = Safety.TUNABLE,
    passthrough: bool = False,
    read_once: bool = True,
    prefix: bool = False,
    deprecated: str | None = None,
) -> None:
    if kind == "bool":
        low, high = 0, 1
    domain = Domain(low, high, choices, pow2, negative, exclude, ignore_case, pattern, extra_chars, shape)
    var = EnvVar(
        name,
        kind,
        default,
        domain,
        transport,
        collectives,
        safety,
        passthrough,
        read_once,
        doc,
        prefix,
        deprecated,
    )
    assert kind in KINDS and transport in TRANSPORTS, var
    _ALL.append(var)


T, R, N = Safety.TUNABLE, Safety.RISKY, Safety.NEVER
KiB, MiB = 1024, 1024 * 1024

# --- NCCL: network transport and P2P (what all-to-all actually uses) ---------------------------------
_add(
    "NCCL_NSOCKS_PERTHREAD",
    "int",
    None,
    "Sockets per helper thread of NCCL's TCP transport (auto: 8 on AWS ENA, else 1); more sockets fill a fat NIC.",
    low=1,
    high=64,
    transport="socket",
)
_add(
    "NCCL_SOCKET_NTHREADS",
    "int",
    None,
    "Helper threads per TCP connection (auto: AWS 2, GCP gVNIC 4, else 0); costs CPU, 0 makes NSOCKS moot.",
    low=0,
    high=16,
    transport="socket",
)
_add(
    "NCCL_BUFFSIZE",
    "int",
    "4194304",
    "Simple-protocol buffer per channel (aws-ofi-nccl injects 8 MiB); caps the P2P chunk at BUFFSIZE/8, memory grows with it.",
    low=64 * KiB,
    high=256 * MiB,
)
_add(
    "NCCL_P2P_NET_CHUNKSIZE",
    "int",
    "131072",
    "Step size of send/recv across nodes (aws-ofi-nccl injects 512 KiB): the inter-node all-to-all knob.",
    low=4 * KiB,
    high=32 * MiB,
    collectives=P2P,
)
_add(
    "NCCL_NCHANNELS_PER_NET_PEER",
    "int",
    None,
    "Channels per remote peer for inter-node P2P (all-to-all); NCCL rounds it up to a power of two.",
    low=1,
    high=64,
    pow2=True,
    collectives=P2P,
)
_add(
    "NCCL_MIN_NCHANNELS",
    "int",
    None,
    "Lower bound on NCCL channels (EFA docs advise leaving it unset).",
    low=1,
    high=64,
    deprecated="NCCL 2.17 replaced it with NCCL_MIN_CTAS",
)
_add(
    "NCCL_MAX_NCHANNELS",
    "int",
    None,
    "Upper bound on NCCL channels (EFA docs advise leaving it unset).",
    low=1,
    high=64,
    deprecated="NCCL 2.17 replaced it with NCCL_MAX_CTAS",
)
_add(
    "NCCL_MIN_CTAS",
    "int",
    None,
    "Lower bound on CTAs (channels) per communicator (max 32 before NCCL 2.25).",
    low=1,
    high=64,
)
_add(
    "NCCL_MAX_CTAS",
    "int",
    None,
    "Upper bound on CTAs (channels) per communicator (max 32 before NCCL 2.25).",
    low=1,
    high=64,
)
_add(
    "NCCL_MIN_P2P_NCHANNELS",
    "int",
    "1",
    "Smallest size of the P2P channel pool that send/recv spreads over.",
    low=1,
    high=64,
    collectives=P2P,
)
_add(
    "NCCL_MAX_P2P_NCHANNELS",
    "int",
    "64",
    "Largest size of the P2P channel pool that send/recv spreads over.",
    low=1,
    high=64,
    collectives=P2P,
)
_add(
    "NCCL_P2P_PXN_LEVEL",
    "int",
    "2",
    "When send/recv goes through another GPU's NIC over NVLink (PXN): 0 never, 1 if rails differ, 2 always.",
    low=0,
    high=2,
    collectives=P2P,
)
_add(
    "NCCL_PXN_DISABLE",
    "bool",
    "0",
    "Disables PXN (NIC of another GPU over NVLink) for collectives.",
    collectives=COLLECTIVES,
)
_add(
    "NCCL_CROSS_NIC",
    "int",
    "2",
    "Whether rings/trees and P2P may use different NICs across nodes (0 no, 1 yes, 2 auto); topology-dependent.",
    low=0,
    high=2,
)
_add(
    "NCCL_NETDEVS_POLICY",
    "string",
    "AUTO",
    "How many NICs each GPU uses (NCCL 2.28+): AUTO, ALL or MAX:N.",
    pattern=r"AUTO|ALL|MAX:[1-9][0-9]*",
    shape="AUTO, ALL or MAX:N (N NICs at most, N >= 1)",
)
_add(
    "NCCL_NET_GDR_LEVEL",
    "enum",
    None,
    "Topology distance up to which GPUDirect RDMA is used between NIC and GPU memory.",
    choices=("LOC", "PIX", "PXB", "PHB", "SYS"),
)
_add(
    "NCCL_NET_FORCE_FLUSH",
    "bool",
    None,
    "Flush GPUDirect RDMA writes before use (aws-ofi-nccl sets 0 on p5+); wrong value risks stale data.",
    safety=R,
)

# --- NCCL: collectives only (not all-to-all) --------------------------------------------------------
_add(
    "NCCL_PROTO",
    "list",
    None,
    "Protocols for collectives (not send/recv); LL128 where unsupported corrupts data.",
    choices=("LL", "LL128", "Simple"),
    exclude=True,
    ignore_case=True,
    collectives=COLLECTIVES,
    safety=R,
)
_add(
    "NCCL_ALGO",
    "list",
    None,
    "Algorithms for collectives (not send/recv); an invalid list fails init since NCCL 2.24.",
    choices=("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
    exclude=True,
    ignore_case=True,
    collectives=COLLECTIVES,
    safety=R,
)
_add(
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
    "bool",
    "0",
    "Allocates LL buffers for network P2P so small sends use LL; suspected to corrupt data on EFA.",
    collectives=P2P,
    safety=R,
)
_add(
    "NCCL_P2P_LL_THRESHOLD",
    "int",
    "16384",
    "Largest P2P message sent with the LL protocol; suspected to corrupt data on EFA.",
    low=0,
    high=16 * MiB,
    collectives=P2P,
    safety=R,
)

# --- NCCL: cluster settings, logging, files ---------------------------------------------------------
_add(
    "NCCL_SOCKET_IFNAME",
    "string",
    None,
    "Interfaces for bootstrap and the socket transport; a wrong value fails or hangs: pass through from the cluster.",
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_NET",
    "string",
    None,
    "Which network transport NCCL uses (IB, Socket, Libfabric); pin it so a broken plugin fails instead of falling back.",
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_IB_*",
    "string",
    None,
    "NCCL's InfiniBand verbs transport settings (NCCL_IB_HCA, ...): cluster settings, no effect on EFA.",
    transport="ib",
    safety=N,
    passthrough=True,
    prefix=True,
)
_add(
    "NCCL_DEBUG",
    "enum",
    None,
    "NCCL log level; TRACE slows everything down, never while timing.",
    choices=("VERSION", "WARN", "INFO", "ABORT", "TRACE"),
    ignore_case=True,
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_DEBUG_SUBSYS",
    "list",
    None,
    "Which NCCL subsystems log (INIT,ENV,NET shows what took effect).",
    choices=(
        "INIT",
        "COLL",
        "P2P",
        "SHM",
        "NET",
        "GRAPH",
        "TUNING",
        "ENV",
        "ALLOC",
        "CALL",
        "PROXY",
        "NVLS",
        "BOOTSTRAP",
        "REG",
        "PROFILE",
        "RAS",
        "ALL",
    ),
    exclude=True,
    ignore_case=True,
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_DEBUG_FILE",
    "string",
    None,
    "Where NCCL writes its log (%h host, %p pid): the trial sets it; a served path would make jobs overwrite it.",
    extra_chars="%",
    safety=N,
)
_add(
    "NCCL_NO_CACHE",
    "bool",
    None,
    "NCCL 2.29.7+: re-read variables instead of caching them per process; our trials use a process per env.",
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_TOPO_FILE",
    "string",
    None,
    "XML topology NCCL uses instead of probing (aws-ofi-nccl sets it on AWS).",
    safety=N,
    passthrough=True,
)
_add(
    "NCCL_CONF_FILE",
    "string",
    None,
    "A file of NCCL variables read for unset ones: settings that would bypass this validation.",
    safety=N,
)
_add(
    "NCCL_TUNER_PLUGIN",
    "string",
    None,
    "Tuner plugin library NCCL loads (aws-ofi-nccl sets its own): loads code, so never set by a served config.",
    collectives=COLLECTIVES,
    safety=N,
)

# --- aws-ofi-nccl (read once at plugin init) --------------------------------------------------------
_add(
    "OFI_NCCL_PROTOCOL",
    "enum",
    None,
    "The main EFA knob: SENDRECV or RDMA (default RDMA on p5/p5e/p5en/p6); RDMA fails init without RDMA write.",
    choices=("SENDRECV", "RDMA"),
    transport="efa",
)
_add(
    "OFI_NCCL_MIN_STRIPE_SIZE",
    "int",
    "131072",
    "Messages above this size are striped across the EFA rails.",
    low=0,
    high=256 * MiB,
    transport="efa",
)
_add(
    "OFI_NCCL_EAGER_MAX_SIZE",
    "int",
    "8192",
    "Largest message sent eagerly, without a handshake (RDMA protocol only; -1 turns eager off).",
    low=0,
    high=16 * MiB,
    negative=(-1,),
    transport="efa",
)
_add(
    "OFI_NCCL_SCHED_MAX_SMALL_RR_SIZE",
    "int",
    "64",
    "Messages up to this size go round-robin to one rail instead of being striped.",
    low=0,
    high=16 * MiB,
    transport="efa",
)
_add(
    "OFI_NCCL_RDMA_MIN_POSTED_EAGER_BUFFERS",
    "int",
    "64",
    "Fewest posted eager receive buffers: memory vs speed.",
    low=1,
    high=65536,
    transport="efa",
)
_add(
    "OFI_NCCL_RDMA_MAX_POSTED_EAGER_BUFFERS",
    "int",
    "128",
    "Most posted eager receive buffers: memory vs speed.",
    low=1,
    high=65536,
    transport="efa",
)
_add(
    "OFI_NCCL_CQ_READ_COUNT",
    "int",
    "4",
    "Completions read from the EFA completion queue per poll.",
    low=1,
    high=1024,
    transport="efa",
)
_add(
    "OFI_NCCL_CQ_SIZE",
    "int",
    "12288",
    "Entries of the EFA completion queue.",
    low=1,
    high=1 << 20,
    transport="efa",
)
_add(
    "OFI_NCCL_NIC_DUP_CONNS",
    "int",
    "0",
    "Duplicate endpoints per NIC (more connections per rail).",
    low=0,
    high=64,
    transport="efa",
)
for _name, _what in [
    ("OFI_NCCL_GDR_FLUSH_DISABLE", "Skips the GPUDirect flush: received data may be read stale."),
    (
        "OFI_NCCL_DISABLE_NATIVE_RDMA_CHECK",
        "Skips the check that RDMA write is supported: init or data may fail.",
    ),
    (
        "OFI_NCCL_DISABLE_GDR_REQUIRED_CHECK",
        "Skips the GPUDirect RDMA requirement check: silent slow or bad paths.",
    ),
    (
        "OFI_NCCL_DISABLE_DMABUF",
        "Disables dma-buf memory registration: a stability setting, not a speed knob.",
    ),
    (
        "OFI_NCCL_MR_CACHE_DISABLE",
        "Disables the memory registration cache: a stability setting, not a speed knob.",
    ),
]:
    _add(_name, "bool", None, _what, transport="efa", safety=N)

# --- libfabric EFA provider (read once at provider init) --------------------------------------------
_add(
    "FI_PROVIDER",
    "string",
    None,
    "libfabric provider; leave unset on EC2 (a non-EFA provider forces NCCL_PROTO=simple).",
    extra_chars=";",  # layered providers: "tcp;ofi_rxm" (values are quoted wherever a shell reads them)
    transport="efa",
    safety=N,
    passthrough=True,
)
_add(
    "FI_EFA_USE_DEVICE_RDMA",
    "bool",
    None,
    "Use EFA device RDMA (not needed with libfabric >= 1.18 and the plugin >= 1.7; 1 aborts without it).",
    transport="efa",
    safety=N,
    passthrough=True,
)
_add(
    "FI_EFA_FORK_SAFE",
    "bool",
    None,
    "Makes EFA registration fork-safe (aws-ofi-nccl sets 1).",
    transport="efa",
    safety=N,
    passthrough=True,
)
_add(
    "FI_EFA_USE_HUGE_PAGE",
    "bool",
    None,
    "Huge pages for EFA buffers; 0 if fork() fails with ENOMEM.",
    transport="efa",
    safety=N,
    passthrough=True,
)

# --- PyTorch ProcessGroupNCCL (read when a process group is created) --------------------------------
_add(
    "TORCH_NCCL_HIGH_PRIORITY",
    "bool",
    "0",
    "Runs NCCL kernels on high-priority CUDA streams.",
    read_once=False,
)
_add(
    "TORCH_NCCL_ENABLE_TIMING",
    "bool",
    "0",
    "Times every collective with CUDA events: overhead while timing.",
    safety=N,
    passthrough=True,
    read_once=False,
)
_add(
    "TORCH_NCCL_NAN_CHECK",
    "bool",
    "0",
    "Checks inputs for NaN before every collective: overhead while timing.",
    safety=N,
    passthrough=True,
    read_once=False,
)
_add(
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "int",
    "3",
    "What a failed or timed-out collective does (0 nothing, 1 tear down, 2 clean up, 3 skip cleanup).",
    low=0,
    high=3,
    safety=N,
    passthrough=True,
    read_once=False,
)
_add(
    "TORCH_NCCL_BLOCKING_WAIT",
    "bool",
    "0",
    "Makes wait() block and raise on timeout: turns hangs into errors.",
    safety=N,
    passthrough=True,
    read_once=False,
)

del _name, _what

# A prefix entry is named like "NCCL_IB_*": the star keeps it from being mistaken for a real variable.
REGISTRY: dict[str, EnvVar] = {v.name: v for v in _ALL}
_PREFIXES = tuple(v for v in _ALL if v.prefix)


def lookup(name: str) -> EnvVar | None:
    """The entry for `name`; NCCL_IB_HCA finds the NCCL_IB_* family. Names are case-sensitive, as in env."""
    var = REGISTRY.get(name)
    if var is not None and not var.prefix:
        return var
    for family in _PREFIXES:
        stem = family.name.rstrip("*")
        if name.startswith(stem) and len(name) > len(stem) and "*" not in name:
            return family
    return None


def suggest(name: str) -> str | None:
    """The registered name `name` was most likely meant to be (typo, wrong case), or None."""
    exact = [n for n in REGISTRY if not REGISTRY[n].prefix]
    upper = name.upper()
    if upper in exact:
        return upper
    close = difflib.get_close_matches(upper, exact, n=1, cutoff=0.8)
    return close[0] if close else None
