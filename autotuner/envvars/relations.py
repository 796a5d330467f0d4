"""Relation rules: what a combination of variables means to NCCL, beyond each value on its own.

Each rule is a small function; `relation_problems` runs them from two tables. A rule sees Spans (every
value a variable can take), so the same rule judges a concrete env (one value each) and a whole search
space (`space=True`: a rule fires when some combination breaks it, and says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from autotuner.envvars.integers import is_decimal
from autotuner.envvars.model import EnvVar
from autotuner.envvars.problems import Problem
from autotuner.envvars.registry import lookup

MAX_SOCKETS = 64  # NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS (NCCL cuts NSOCKS to fit)
ORDERED_PAIRS = (
    ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
    ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
    ("NCCL_MIN_P2P_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS"),
    ("OFI_NCCL_RDMA_MIN_POSTED_EAGER_BUFFERS", "OFI_NCCL_RDMA_MAX_POSTED_EAGER_BUFFERS"),
)
RDMA_ONLY = (
    "OFI_NCCL_EAGER_MAX_SIZE",
    "OFI_NCCL_RDMA_MIN_POSTED_EAGER_BUFFERS",
    "OFI_NCCL_RDMA_MAX_POSTED_EAGER_BUFFERS",
)
# Variables NCCL reads as one setting: the sockets a connection opens are sockets per thread x threads
# (capped at 64, and NSOCKS is moot without threads), and a minimum bounds its maximum. A ladder step
# never changes one without the other: either alone can cross the cap or the bound, or measure nothing.
READ_TOGETHER = (("NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"), *ORDERED_PAIRS)
ALL_TO_ALL_SHARDING = frozenset({"table_wise", "column_wise"})
_TRANSPORT_WORDS = {
    "socket": "NCCL's TCP socket transport",
    "efa": "the aws-ofi-nccl (EFA) plugin",
    "ib": "NCCL's InfiniBand transport",
}


@dataclass(frozen=True)
class Span:
    """The values a variable can take in a concrete env (one value) or a search space (many)."""

    low: int | None = None  # numeric kinds: smallest and largest value
    high: int | None = None
    texts: frozenset[str] = field(default_factory=frozenset)  # every value, as exported (small sets only)

    @classmethod
    def of(cls, values: Iterable[str]) -> Span:
        values = list(values)
        ints = [int(v) for v in values if is_decimal(v)]
        return cls(min(ints, default=None), max(ints, default=None), frozenset(values))

    def can_be(self, text: str) -> bool:
        if self.texts:
            return text in self.texts
        return self.low is not None and self.high is not None and self.low <= int(text) <= self.high


@dataclass(frozen=True)
class _Scope:
    """What a rule knows besides the spans: env or space, the sharding types, the NCCL_NET values."""

    space: bool
    sharding: frozenset[str] | None
    net: Span | None
    nets: frozenset[str]  # NCCL_NET values, lower case (NCCL compares them case-insensitively)

    @classmethod
    def of(cls, spans: Mapping[str, Span], space: bool, sharding: Iterable[str] | None) -> _Scope:
        net = spans.get("NCCL_NET")
        nets = frozenset(t.lower() for t in net.texts) if net else frozenset()
        return cls(space, None if sharding is None else frozenset(sharding), net, nets)


# --------------------------------------------------------------------------- rules on one variable


def _deprecated(name: str, var: EnvVar, scope: _Scope) -> list[Problem]:
    if not var.deprecated:
        return []
    return [Problem.warn(name, "deprecated", f"{name} is deprecated: {var.deprecated}")]


def _unused_transport(name: str, var: EnvVar, scope: _Scope) -> list[Problem]:
    """A transport's setting while NCCL_NET picks another; pass-through settings only for InfiniBand."""
    nets = scope.nets
    if not nets:
        return []
    if var.transport == "ib":
        unused = "ib" not in nets
    elif var.passthrough:
        return []
    else:
        # EFA is reached through the plugin, whatever name it registers under: only socket/IB rule it out.
        unused = (var.transport == "socket" and "socket" not in nets) or (
            var.transport == "efa" and nets <= {"socket", "ib"}
        )
    if not unused:
        return []
    shown = ", ".join(sorted(scope.net.texts)) if scope.net else ""
    transport = _TRANSPORT_WORDS[var.transport]
    return [
        Problem.warn(name, "no-effect", f"{name} configures {transport}, which NCCL_NET={shown} does not use")
    ]


def _collectives_only(name: str, var: EnvVar, scope: _Scope) -> list[Problem]:
    """A collectives knob in a space whose sharding only ever runs all-to-all (send/recv)."""
    if not scope.space or scope.sharding is None or "all_to_all" in var.collectives:
        return []
    if not scope.sharding <= ALL_TO_ALL_SHARDING or var.passthrough:
        return []
    return [
        Problem.warn(
            name,
            "no-effect",
            f"{name} acts on collectives ({', '.join(var.collectives)}), not on the send/recv behind "
            "all-to-all; with only table_wise/column_wise sharding it changes little",
        )
    ]


# --------------------------------------------------------------------------- rules on a combination


def _too_many_sockets(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    socks, threads = spans.get("NCCL_NSOCKS_PERTHREAD"), spans.get("NCCL_SOCKET_NTHREADS")
    if not (socks and threads and socks.high is not None and threads.high is not None):
        return []
    a, b = socks.high, threads.high
    if a * b <= MAX_SOCKETS:
        return []
    verb = "can reach" if scope.space else "is"
    return [
        Problem(
            "NCCL_NSOCKS_PERTHREAD",
            "constraint",
            f"NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS {verb} {a} x {b} = {a * b}, more than "
            f"{MAX_SOCKETS} sockets: NCCL would cut NCCL_NSOCKS_PERTHREAD to {MAX_SOCKETS // b} and measure "
            f"something else; keep every combination <= {MAX_SOCKETS}",
        )
    ]


def _sockets_without_threads(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    socks, threads = spans.get("NCCL_NSOCKS_PERTHREAD"), spans.get("NCCL_SOCKET_NTHREADS")
    if not (socks and threads and threads.can_be("0")):
        return []
    return [
        Problem.warn(
            "NCCL_NSOCKS_PERTHREAD",
            "no-effect",
            "with NCCL_SOCKET_NTHREADS=0 NCCL_NSOCKS_PERTHREAD has no effect"
            + (": those points measure the same setting" if scope.space else ""),
        )
    ]


def _minimum_above_maximum(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    """MIN/MAX pairs: an error when the minimum is always above, a warning when only some points are."""
    out: list[Problem] = []
    for low_name, high_name in ORDERED_PAIRS:
        lo, hi = spans.get(low_name), spans.get(high_name)
        if not (lo and hi and lo.low is not None and hi.high is not None and lo.high is not None):
            continue
        assert hi.low is not None
        if lo.low > hi.high:
            out.append(
                Problem(
                    low_name,
                    "constraint",
                    f"{low_name} ({lo.low}) is above {high_name} ({hi.high})"
                    + (" in every combination" if scope.space else "")
                    + ": the minimum must not exceed the maximum",
                )
            )
        elif scope.space and lo.high > hi.low:
            out.append(
                Problem.warn(
                    low_name,
                    "constraint",
                    f"some combinations put {low_name} above {high_name} (up to {lo.high} > {hi.low}): those "
                    "points are rejected before launch",
                )
            )
    return out


def _rdma_only_under_sendrecv(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    proto = spans.get("OFI_NCCL_PROTOCOL")
    if not (proto and proto.texts == {"SENDRECV"}):
        return []
    return [
        Problem.warn(
            name, "no-effect", f"{name} applies to the RDMA protocol only (OFI_NCCL_PROTOCOL=SENDRECV)"
        )
        for name in RDMA_ONLY
        if name in spans
    ]


def _chunk_above_buffer_cap(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    chunk, buff = spans.get("NCCL_P2P_NET_CHUNKSIZE"), spans.get("NCCL_BUFFSIZE")
    if not (chunk and buff and chunk.high is not None and buff.low is not None):
        return []
    cap = buff.low // 8
    if chunk.high <= cap:
        return []
    return [
        Problem.warn(
            "NCCL_P2P_NET_CHUNKSIZE",
            "no-effect",
            f"NCCL caps the P2P chunk at NCCL_BUFFSIZE/8 = {cap} (NCCL_BUFFSIZE={buff.low}): "
            + (
                f"chunks above {cap} (up to {chunk.high}) measure the same as {cap}"
                if scope.space
                else f"a chunk of {chunk.high} measures the same as {cap}"
            ),
        )
    ]


def _trace_logging(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    debug = spans.get("NCCL_DEBUG")
    if not (debug and "trace" in {t.lower() for t in debug.texts}):
        return []
    return [
        Problem.warn(
            "NCCL_DEBUG", "debug-while-timing", "NCCL_DEBUG=TRACE slows every operation: timings are off"
        )
    ]


def _collective_checks(spans: Mapping[str, Span], scope: _Scope) -> list[Problem]:
    return [
        Problem.warn(name, "debug-while-timing", f"{name}=1 adds work to every collective: timings are off")
        for name in ("TORCH_NCCL_ENABLE_TIMING", "TORCH_NCCL_NAN_CHECK")
        if (span := spans.get(name)) and span.high
    ]


# Run in this order: per variable (in the order the variables were given), then on combinations.
VARIABLE_RULES: tuple[Callable[[str, EnvVar, _Scope], list[Problem]], ...] = (
    _deprecated,
    _unused_transport,
    _collectives_only,
)
COMBINATION_RULES: tuple[Callable[[Mapping[str, Span], _Scope], list[Problem]], ...] = (
    _too_many_sockets,
    _sockets_without_threads,
    _minimum_above_maximum,
    _rdma_only_under_sendrecv,
    _chunk_above_buffer_cap,
    _trace_logging,
    _collective_checks,
)


def relation_problems(
    spans: Mapping[str, Span], *, space: bool = False, sharding: Iterable[str] | None = None
) -> list[Problem]:
    """Cross-variable rules over what each set variable can be. `space`: any combination counts, not one."""
    scope = _Scope.of(spans, space, sharding)
    out: list[Problem] = []
    for name in spans:
        var = lookup(name)
        if var is None:
            continue
        for variable_rule in VARIABLE_RULES:
            out += variable_rule(name, var, scope)
    for combination_rule in COMBINATION_RULES:
        out += combination_rule(spans, scope)
    return out


def read_together(names: Iterable[str], also: Iterable[tuple[str, ...]] = ()) -> list[list[str]]:
    """The names in their order, grouped where NCCL reads them as one setting (READ_TOGETHER, and the
    groups `also` gives): each group where its first name stands."""
    names = list(dict.fromkeys(names))
    groups = [*READ_TOGETHER, *also]
    units: list[list[str]] = []
    placed: set[str] = set()
    for name in names:
        if name in placed:
            continue
        unit = [name]
        while True:  # groups may chain (a name in two of them)
            more = [other for group in groups if set(unit) & set(group) for other in names
                    if other in group and other not in unit]  # fmt: skip
            if not more:
                break
            unit += list(dict.fromkeys(more))
        units.append(unit)
        placed.update(unit)
    return units


def acting_with(target: Mapping[str, str], current: Mapping[str, str]) -> list[tuple[str, ...]]:
    """Variables of `target` that act only with another of its values, where `current` stands: a P2P
    chunk above NCCL_BUFFSIZE/8 of the current buffer (NCCL caps it there, and would run another
    chunk than the one exported) needs the target's buffer."""
    chunk, buffer = target.get("NCCL_P2P_NET_CHUNKSIZE"), target.get("NCCL_BUFFSIZE")
    if chunk is None or buffer is None:
        return []
    var = lookup("NCCL_BUFFSIZE")
    now = current.get("NCCL_BUFFSIZE") or (var.default if var else None) or ""
    if is_decimal(chunk) and is_decimal(now) and int(chunk) > int(now) // 8:
        return [("NCCL_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE")]
    return []
