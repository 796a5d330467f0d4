"""What the registry records about a variable: its kind, its domain, its transport and its safety class.

Only the shape of an entry lives here; the entries themselves are in `catalog`, the lookup in `registry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

KINDS = ("int", "bool", "enum", "list", "string")
TRANSPORTS = ("socket", "efa", "ib", "any")

# All-to-all over NCCL is grouped send/recv; the others are NCCL "collectives" (algo/proto/tuner apply).
P2P = ("all_to_all", "send_recv")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
EVERY_OP = P2P + COLLECTIVES

# Names whose value is a file or directory on the nodes: every job handed one would read (or write) it.
PATH_SUFFIXES = ("_FILE", "_PATH", "_DIR")
# Names a family entry (NCCL_IB_*) never covers: a plugin loads code, a path names a file on the nodes.
# Such a variable is known only where the catalog lists it by name (NCCL_TOPO_FILE), with its own rules.
UNCOVERED_SUFFIXES = ("_PLUGIN", *PATH_SUFFIXES)

# What a value may contain: survives a shell `export`, an env file and a Slurm TaskProlog line unquoted.
SAFE_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,:^=/+-"


class Safety(StrEnum):
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
