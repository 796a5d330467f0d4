"""The linter: what is wrong with a set of NCCL-family variables, and why, before anything runs.

A bad value does not fail loudly in NCCL: "4MB" reads as 4, "010" as 8, an unknown name is ignored, and a
broken aws-ofi-nccl setting makes NCCL fall back to another transport. A trial measured with any of those
measures the wrong thing, so every value is checked here against the registry first.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotuner.registry import SAFE_CHARS, EnvVar, Safety, lookup, suggest

# Stable rule identifiers: the CLI, the REST API and tests key on them.
RULES: dict[str, str] = {
    "unknown-variable": "not a variable the registry knows",
    "injection": "a name that changes what runs (loader, interpreter, shell, launcher) or is not a name",
    "not-decimal": "an integer that is not plain decimal digits: NCCL's strtoll would read something else",
    "out-of-domain": "a value the variable does not accept",
    "unsafe-value": "characters a shell, an env file or a Slurm prolog cannot carry safely",
    "constraint": "a combination of variables NCCL would not honour",
    "risky": "a correctness risk, used only when listed in allow_risky",
    "never-tune": "never a search dimension, or never set by the tuner at all",
    "empty-dimension": "a dimension with no value to try",
    "duplicate": "the same value or variable given twice",
    "schema": "the declaration has the wrong shape (field, type, file)",
    # warnings
    "debug-while-timing": "logging or checks that distort timings",
    "no-effect": "a setting that does nothing in this combination",
    "not-pow2": "NCCL rounds the value up to a power of two",
    "deprecated": "superseded by another variable",
}

MAX_SOCKETS = 64  # NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS (NCCL cuts NSOCKS to fit)
MAX_VALUE_LEN = 256
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
ALL_TO_ALL_SHARDING = frozenset({"table_wise", "column_wise"})

# Not in the registry and able to change what runs: the loader, the interpreter, the shell, the launcher,
# the CUDA driver, a plugin library. A tuned config must never carry one.
_INJECTION_NAMES = frozenset(
    {
        "PATH", "IFS", "ENV", "BASH_ENV", "SHELL", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH",
        "GLOBIGNORE", "HOME", "TMPDIR", "USER", "LOGNAME", "TERM", "EDITOR", "PAGER", "LANG", "LC_ALL",
        "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "LOCALDOMAIN", "TZDIR",
        "OPENSSL_CONF", "SSL_CERT_FILE", "SSL_CERT_DIR", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "NODE_OPTIONS",
        "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "GIT_SSH", "GIT_SSH_COMMAND", "SSH_ASKPASS",
        "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "ROLE_RANK", "OMP_NUM_THREADS", "NCCL_NET_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
        "NCCL_GIN_PLUGIN", "FI_PROVIDER_PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    }
)  # fmt: skip
_INJECTION_PREFIXES = (
    "LD_", "DYLD_", "PYTHON", "BASH_FUNC_", "MALLOC_", "GLIBC_", "CUDA_", "NVIDIA_", "TORCHELASTIC_", "SLURM_",
    "OMPI_", "PMIX_", "PMI_", "KUBERNETES_", "AUTOTUNER_",
)  # fmt: skip
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DECIMAL_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_C_SPACE = " \t\n\v\f\r"
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Problem:
    variable: str
    rule: str
    message: str
    severity: str = "error"  # "error" blocks; "warning" informs

    def __str__(self) -> str:
        tag = self.rule if self.severity == "error" else f"{self.rule}, warning"
        return f"{self.variable}: {self.message} [{tag}]"


def _warn(variable: str, rule: str, message: str) -> Problem:
    return Problem(variable, rule, message, "warning")


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 40, 6, 4, 2


def _show(value: object, limit: int = 40) -> str:
    """A value for a message: repr'd (control characters escaped), containers cut short, then cut to `limit`."""
    text = repr(value) if isinstance(value, str | int | float | bool | None) else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- integers as NCCL reads them


def _strtoll(text: str) -> tuple[int, int]:
    """C strtoll(text, &end, 0): the value and where parsing stopped (0 when no digits were read)."""
    i, n = 0, len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    sign = 1
    if i < n and text[i] in "+-":
        sign = -1 if text[i] == "-" else 1
        i += 1
    base = 10
    if text[i : i + 2].lower() == "0x" and i + 2 < n and text[i + 2].lower() in "0123456789abcdef":
        base, i = 16, i + 2
    elif text[i : i + 1] == "0":
        base = 8
    digits = "0123456789abcdef"[:base]
    j = i
    while j < n and text[j].isascii() and text[j].lower() in digits:
        j += 1
    if j == i:
        return 0, 0
    value = sign * int(text[i:j], base)
    return min(max(value, _INT64[0]), _INT64[1]), j


def nccl_int(text: str) -> int:
    """What NCCL reads from `text`: it parses integers with strtoll(s, NULL, 0), ignoring what follows."""
    return _strtoll(text)[0]


def is_decimal(text: str) -> bool:
    """Plain decimal digits with an optional minus: the only form NCCL and a human read the same way."""
    return bool(_DECIMAL_RE.match(text)) and text != "-0"


def _not_decimal(text: str) -> str:
    value, end = _strtoll(text)
    why = []
    stripped = text.lstrip(_C_SPACE)
    body = stripped.lstrip("+-")
    if not stripped:
        why.append("an empty value reads as 0")
    elif end == 0:
        why.append("no leading number at all reads as 0")
    else:
        if stripped != text:
            why.append("leading whitespace is skipped, and a shell or env file may drop it")
        if stripped[0] == "+":
            why.append("a + sign is not needed")
        if body[:2].lower() == "0x":
            why.append("0x means hexadecimal")
        elif len(body) > 1 and body[0] == "0" and body[1].isdigit():
            why.append("a leading 0 means octal")
        if end < len(text):
            why.append(f"the rest, {_show(text[end:])}, is ignored")
        if text.strip() == "-0":
            why.append("-0 is 0")
    return (
        f"{_show(text)} is not a plain decimal integer: NCCL parses it with strtoll(s, NULL, 0) and would read "
        f"{value} ({'; '.join(why)}); write the number in decimal digits, e.g. 4194304 for 4 MiB"
    )


# --------------------------------------------------------------------------- one name, one value


def check_name(name: object) -> tuple[EnvVar | None, list[Problem]]:
    """The registry entry of `name`, or the problem with it (injection, unknown with a did-you-mean)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return None, [
            Problem(
                _show(name),
                "injection",
                f"{_show(name)} is not an environment variable name (letters, digits and _ only): "
                "it cannot be exported without changing the command around it",
            )
        ]
    var = lookup(name)
    if var is not None:
        return var, []
    upper = name.upper()
    if upper in _INJECTION_NAMES or upper.startswith(_INJECTION_PREFIXES):
        return None, [
            Problem(
                name,
                "injection",
                f"{name} changes what runs (loader, interpreter, shell, launcher, devices or a plugin), not how "
                "NCCL communicates: the tuner never sets it",
            )
        ]
    hint = suggest(name)
    msg = f"{name} is not a known NCCL, aws-ofi-nccl, libfabric or PyTorch NCCL variable"
    msg += (
        f"; did you mean {hint}?" if hint else " (only variables in the registry can be searched or served)"
    )
    return None, [Problem(name, "unknown-variable", msg)]


def safety_problems(
    name: str, var: EnvVar, *, as_dim: bool, allow_risky: Iterable[str] = ()
) -> list[Problem]:
    """NEVER variables: not a dimension (and not set at all unless a cluster pass-through); RISKY: only if allowed."""
    if var.safety is Safety.NEVER:
        if as_dim and var.passthrough:
            return [
                Problem(
                    name,
                    "never-tune",
                    f"{name} is a cluster setting, never a search dimension: pin it in fixed_env ({var.doc})",
                )
            ]
        if not var.passthrough:
            return [
                Problem(name, "never-tune", f"{name} is never set by the tuner or a served config: {var.doc}")
            ]
    if var.safety is Safety.RISKY and name not in set(allow_risky):
        return [
            Problem(
                name,
                "risky",
                f"{name} is a correctness risk: {var.doc} List it in allow_risky to use it anyway",
            )
        ]
    return []


def check_value(name: str, value: object, var: EnvVar | None = None) -> list[Problem]:
    """Problems of one value (an int or a string, as declared) of a registered variable."""
    var = var or lookup(name)
    if var is None:
        return check_name(name)[1]
    numeric = var.kind in ("int", "bool")
    if isinstance(value, bool):
        if numeric:
            return [
                Problem(
                    name,
                    "not-decimal",
                    f"{value} is a boolean: write 1 or 0 (NCCL reads the text {str(value)!r} as 0)",
                )
            ]
        return [Problem(name, "out-of-domain", f"{value} is a boolean; {name} takes {var.allowed()}")]
    if isinstance(value, float):
        if numeric:
            hint = f": write {int(value)}" if value.is_integer() else ""
            return [Problem(name, "not-decimal", f"{value!r} is not an integer{hint}")]
        return [Problem(name, "out-of-domain", f"{value!r} is a number; {name} takes {var.allowed()}")]
    if isinstance(value, int):
        return _check_int(name, var, value) if numeric else _check_text(name, var, str(value))
    if not isinstance(value, str):
        return [Problem(name, "schema", f"{_show(value)} is not a value: write an integer or a string")]
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return [
            Problem(
                name,
                "unsafe-value",
                f"{_show(value)} contains the control character {bad!r}, which a shell or an env file cannot carry",
            )
        ]
    if len(value) > MAX_VALUE_LEN:
        return [Problem(name, "unsafe-value", f"{_show(value)} is longer than {MAX_VALUE_LEN} characters")]
    if numeric:
        if not is_decimal(value):
            return [Problem(name, "not-decimal", _not_decimal(value))]
        return _check_int(name, var, int(value))
    return _check_text(name, var, value)


def _check_int(name: str, var: EnvVar, value: int) -> list[Problem]:
    if not var.domain.contains(value):
        return [Problem(name, "out-of-domain", f"{value} is out of range: {name} takes {var.allowed()}")]
    if var.domain.pow2 and value > 0 and value & (value - 1):
        up = 1 << (value - 1).bit_length()
        return [_warn(name, "not-pow2", f"NCCL rounds {value} up to {up}: use powers of two")]
    return []


def _check_text(name: str, var: EnvVar, text: str) -> list[Problem]:
    d = var.domain
    unsafe = sorted({c for c in text if c not in SAFE_CHARS and c not in d.extra_chars})
    if unsafe:
        shown = " ".join(repr(c) for c in unsafe)
        return [
            Problem(
                name,
                "unsafe-value",
                f"{_show(text)} contains {shown}: values may only use A-Z a-z 0-9 _ . , : ^ = / + -"
                + "".join(f" {c}" for c in d.extra_chars)
                + " so that a shell, an env file and a Slurm prolog all read them the same",
            )
        ]
    if not text:
        return [
            Problem(
                name, "out-of-domain", f"an empty value is not {var.allowed()}: leave {name} unset instead"
            )
        ]
    if var.kind == "enum":
        if _member(text, d.choices, d.ignore_case):
            return []
        hint = next((c for c in d.choices if c.lower() == text.lower()), None)
        extra = f" (did you mean {hint!r}?)" if hint else ""
        return [Problem(name, "out-of-domain", f"{_show(text)} is not {var.allowed()}{extra}")]
    if var.kind == "list":
        body = text[1:] if d.exclude and text.startswith("^") else text
        bad_items = [item for item in body.split(",") if not _member(item, d.choices, d.ignore_case)]
        if bad_items:
            what = ", ".join(_show(i) for i in bad_items)
            return [Problem(name, "out-of-domain", f"{what} in {_show(text)}: {name} takes {var.allowed()}")]
        return []
    if d.pattern and not re.fullmatch(d.pattern, text):
        return [Problem(name, "out-of-domain", f"{_show(text)} is not {var.allowed()}")]
    return []


def _member(item: str, choices: tuple[str, ...], ignore_case: bool) -> bool:
    if ignore_case:
        return item.lower() in {c.lower() for c in choices}
    return item in choices


def canonical(var: EnvVar, value: int | str) -> str:
    """The exported string of a valid value: integers as plain decimal."""
    if var.kind in ("int", "bool"):
        return str(int(value))
    return str(value)


# --------------------------------------------------------------------------- relations between variables


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


def relation_problems(
    spans: Mapping[str, Span], *, space: bool = False, sharding: Iterable[str] | None = None
) -> list[Problem]:
    """Cross-variable rules over what each set variable can be. `space`: any combination counts, not one."""
    out: list[Problem] = []
    net = spans.get("NCCL_NET")
    nets = {t.lower() for t in net.texts} if net else set()

    for name in spans:
        var = lookup(name)
        if var is None:
            continue
        if var.deprecated:
            out.append(_warn(name, "deprecated", f"{name} is deprecated: {var.deprecated}"))
        if nets and not var.passthrough:
            if var.transport == "socket" and "socket" not in nets:
                out.append(_no_net_effect(name, "NCCL's TCP socket transport", net))
            elif var.transport == "efa" and nets <= {"socket", "ib"}:
                out.append(_no_net_effect(name, "the aws-ofi-nccl (EFA) plugin", net))
        if nets and var.transport == "ib" and "ib" not in nets:
            out.append(_no_net_effect(name, "NCCL's InfiniBand transport", net))
        if space and sharding is not None and "all_to_all" not in var.collectives:
            if set(sharding) <= ALL_TO_ALL_SHARDING and not var.passthrough:
                out.append(
                    _warn(
                        name,
                        "no-effect",
                        f"{name} acts on collectives ({', '.join(var.collectives)}), not on the send/recv behind "
                        "all-to-all; with only table_wise/column_wise sharding it changes little",
                    )
                )

    socks, threads = spans.get("NCCL_NSOCKS_PERTHREAD"), spans.get("NCCL_SOCKET_NTHREADS")
    if socks and threads and socks.high is not None and threads.high is not None:
        a, b = socks.high, threads.high
        if a * b > MAX_SOCKETS:
            verb = "can reach" if space else "is"
            out.append(
                Problem(
                    "NCCL_NSOCKS_PERTHREAD",
                    "constraint",
                    f"NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS {verb} {a} x {b} = {a * b}, more than "
                    f"{MAX_SOCKETS} sockets: NCCL would cut NCCL_NSOCKS_PERTHREAD to {MAX_SOCKETS // b} and measure "
                    f"something else; keep every combination <= {MAX_SOCKETS}",
                )
            )
    if socks and threads and threads.can_be("0"):
        out.append(
            _warn(
                "NCCL_NSOCKS_PERTHREAD",
                "no-effect",
                "with NCCL_SOCKET_NTHREADS=0 NCCL_NSOCKS_PERTHREAD has no effect"
                + (": those points measure the same setting" if space else ""),
            )
        )

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
                    + (" in every combination" if space else "")
                    + ": the minimum must not exceed the maximum",
                )
            )
        elif space and lo.high > hi.low:
            out.append(
                _warn(
                    low_name,
                    "constraint",
                    f"some combinations put {low_name} above {high_name} (up to {lo.high} > {hi.low}): those "
                    "points are rejected before launch",
                )
            )

    proto = spans.get("OFI_NCCL_PROTOCOL")
    if proto and proto.texts == {"SENDRECV"}:
        for name in RDMA_ONLY:
            if name in spans:
                out.append(
                    _warn(
                        name,
                        "no-effect",
                        f"{name} applies to the RDMA protocol only (OFI_NCCL_PROTOCOL=SENDRECV)",
                    )
                )

    chunk, buff = spans.get("NCCL_P2P_NET_CHUNKSIZE"), spans.get("NCCL_BUFFSIZE")
    if chunk and buff and chunk.high is not None and buff.low is not None and chunk.high > buff.low // 8:
        cap = buff.low // 8
        out.append(
            _warn(
                "NCCL_P2P_NET_CHUNKSIZE",
                "no-effect",
                f"NCCL caps the P2P chunk at NCCL_BUFFSIZE/8 = {cap} (NCCL_BUFFSIZE={buff.low}): "
                + (
                    f"chunks above {cap} (up to {chunk.high}) measure the same as {cap}"
                    if space
                    else f"a chunk of {chunk.high} measures the same as {cap}"
                ),
            )
        )

    debug = spans.get("NCCL_DEBUG")
    if debug and "trace" in {t.lower() for t in debug.texts}:
        out.append(
            _warn(
                "NCCL_DEBUG", "debug-while-timing", "NCCL_DEBUG=TRACE slows every operation: timings are off"
            )
        )
    for name in ("TORCH_NCCL_ENABLE_TIMING", "TORCH_NCCL_NAN_CHECK"):
        span = spans.get(name)
        if span and span.high:
            out.append(
                _warn(name, "debug-while-timing", f"{name}=1 adds work to every collective: timings are off")
            )
    return out


def _no_net_effect(name: str, transport: str, net: Span | None) -> Problem:
    shown = ", ".join(sorted(net.texts)) if net else ""
    return _warn(name, "no-effect", f"{name} configures {transport}, which NCCL_NET={shown} does not use")


# --------------------------------------------------------------------------- public entry points


def lint_env(env: Mapping[str, str], *, allow_risky: Iterable[str] = ()) -> list[Problem]:
    """Problems of concrete KEY=VALUE variables (a job's env, a config): errors first-class, warnings beside."""
    allowed = set(allow_risky)
    problems: list[Problem] = []
    valid: dict[str, str] = {}
    for name, value in env.items():
        var, found = check_name(name)
        problems += found
        if var is None:
            continue
        problems += safety_problems(name, var, as_dim=False, allow_risky=allowed)
        found = check_value(name, value, var)
        problems += found
        if not errors(found):
            valid[name] = canonical(var, value)  # type: ignore[arg-type]
    problems += relation_problems({n: Span.of([v]) for n, v in valid.items()})
    return problems


def lint_space(source: str | Path | Mapping[str, Any]) -> list[Problem]:
    """load_space's checks, returned instead of raised; warnings included. Empty = fine."""
    from autotuner.space import SpaceError, load_space

    try:
        return list(load_space(source).warnings)
    except SpaceError as exc:
        return list(exc.problems)


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """["K=V", ...] -> {K: V}. The value may contain "="; the linter judges names and values afterwards."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        if name in out:
            raise ValueError(f"{name} is given twice ({name}={out[name]!r} and {item!r})")
        out[name] = value
    return out


def format_problems(problems: Iterable[Problem]) -> str:
    """One aligned line per problem: variable, rule (", warning" for warnings), message. Empty = ""."""
    rows = [
        (p.variable, p.rule if p.severity == "error" else f"{p.rule} (warning)", p.message) for p in problems
    ]
    if not rows:
        return ""
    wv = max(len(r[0]) for r in rows)
    wr = max(len(r[1]) for r in rows)
    return "\n".join(f"{v:<{wv}}  {r:<{wr}}  {m}" for v, r, m in rows)
