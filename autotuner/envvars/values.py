"""Value rules: is a name a variable the tuner may set, and is one value of it what the library accepts.

A bad value does not fail loudly in NCCL: "4MB" reads as 4, an unknown name is ignored, a broken
aws-ofi-nccl setting makes NCCL fall back to another transport. A trial measured with any of those
measures the wrong thing, so every name and value is checked here against the registry first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from autotuner.envvars.integers import is_decimal, not_decimal_message
from autotuner.envvars.model import PATH_SUFFIXES, SAFE_CHARS, EnvVar, Safety
from autotuner.envvars.problems import Problem, errors, show_value
from autotuner.envvars.registry import family_of, lookup, suggest

MAX_VALUE_LEN = 256

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


def is_path_valued(name: str) -> bool:
    """NCCL_TOPO_FILE, NCCL_GRAPH_FILE, *_FILE, *_PATH, *_DIR: a value that is a path on the nodes."""
    return name.endswith(PATH_SUFFIXES)


def check_name(name: object) -> tuple[EnvVar | None, list[Problem]]:
    """The registry entry of `name`, or the problem with it (injection, unknown with a did-you-mean)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return None, [
            Problem(
                show_value(name),
                "injection",
                f"{show_value(name)} is not an environment variable name (letters, digits and _ only): "
                "it cannot be exported without changing the command around it",
            )
        ]
    var = lookup(name)
    if var is not None:
        return var, []
    upper = name.upper()
    # *_PLUGIN: whatever its stem, a plugin library to load (NCCL_NET_PLUGIN, a family's NCCL_IB_X_PLUGIN)
    if upper in _INJECTION_NAMES or upper.startswith(_INJECTION_PREFIXES) or upper.endswith("_PLUGIN"):
        return None, [
            Problem(
                name,
                "injection",
                f"{name} changes what runs (loader, interpreter, shell, launcher, devices or a plugin), not how "
                "NCCL communicates: the tuner never sets it",
            )
        ]
    family = family_of(name)
    if family is not None:  # a path the family's settings would have let through unchecked
        return None, [
            Problem(name, "unknown-variable",
                    f"{name} would name a file or directory on the nodes: {family.name} covers settings, not "
                    "paths; only a path variable the registry lists by name (NCCL_TOPO_FILE) can be set")
        ]  # fmt: skip
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
    if is_path_valued(name) and name not in set(allow_risky):
        return [
            Problem(
                name,
                "path-value",
                f"{name} names a file on the nodes that every job would read ({var.doc}): list it in "
                "allow_risky to pin it anyway",
            )
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


def served_problems(name: object, value: object) -> list[Problem]:
    """Why a served config may not hand NAME=VALUE to a job (empty: it may). The one gate between a
    config and a job's environment: the service serves only what passes (api/cache.py), and the
    pre-job hook applies it again to every answer it gets (autotuner.job.exports.check_exports), so a
    rogue server, a proxy or a tampered store or cache cannot put a loader, interpreter or plugin
    variable into a job. What passes is what a publish can carry: a registered variable that is not
    "never set" (a tunable, a correctness risk or a path the study allowed by name, a cluster
    pass-through), with a value the registry accepts; never an injection name (LD_*, PYTHON*,
    BASH_ENV, PATH, *_PLUGIN, ...), an unknown name, a name with '=', or a value with a control
    character."""
    var, found = check_name(name)
    if var is None:
        return found
    assert isinstance(name, str)
    if var.safety is Safety.NEVER and not var.passthrough:
        return safety_problems(name, var, as_dim=False)
    return errors(check_value(name, value, var))


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
        return [Problem(name, "schema", f"{show_value(value)} is not a value: write an integer or a string")]
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return [
            Problem(
                name,
                "unsafe-value",
                f"{show_value(value)} contains the control character {bad!r}, which a shell or an env file cannot carry",
            )
        ]
    if len(value) > MAX_VALUE_LEN:
        return [
            Problem(name, "unsafe-value", f"{show_value(value)} is longer than {MAX_VALUE_LEN} characters")
        ]
    if numeric:
        if not is_decimal(value):
            return [Problem(name, "not-decimal", not_decimal_message(value))]
        return _check_int(name, var, int(value))
    return _check_text(name, var, value)


def _check_int(name: str, var: EnvVar, value: int) -> list[Problem]:
    if not var.domain.contains(value):
        return [Problem(name, "out-of-domain", f"{value} is out of range: {name} takes {var.allowed()}")]
    if var.domain.pow2 and value > 0 and value & (value - 1):
        up = 1 << (value - 1).bit_length()
        return [Problem.warn(name, "not-pow2", f"NCCL rounds {value} up to {up}: use powers of two")]
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
                f"{show_value(text)} contains {shown}: values may only use A-Z a-z 0-9 _ . , : ^ = / + -"
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
        return [Problem(name, "out-of-domain", f"{show_value(text)} is not {var.allowed()}{extra}")]
    if var.kind == "list":
        body = text[1:] if d.exclude and text.startswith("^") else text
        bad_items = [item for item in body.split(",") if not _member(item, d.choices, d.ignore_case)]
        if bad_items:
            what = ", ".join(show_value(i) for i in bad_items)
            return [
                Problem(name, "out-of-domain", f"{what} in {show_value(text)}: {name} takes {var.allowed()}")
            ]
        return []
    if d.pattern and not re.fullmatch(d.pattern, text):
        return [Problem(name, "out-of-domain", f"{show_value(text)} is not {var.allowed()}")]
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
