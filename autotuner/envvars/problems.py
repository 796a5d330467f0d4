"""What a check reports: a Problem (variable, stable rule id, message, severity), and how it is shown.

The rule identifiers in RULES are an interface: the CLI, the REST API and tests key on them, so a rule
may be added but never renamed.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

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
    "batch-change": "a batch above the job's, which changes the training: searched only when allowed",
    "path-value": "a path on the nodes (NCCL_TOPO_FILE, *_FILE, *_PATH), used only when listed in allow_risky",
    "too-large": "more values or candidates than the limit (AUTOTUNER_MAX_CANDIDATES, AUTOTUNER_MAX_DIM_VALUES)",
    # warnings
    "debug-while-timing": "logging or checks that distort timings",
    "no-effect": "a setting that does nothing in this combination",
    "not-pow2": "NCCL rounds the value up to a power of two",
    "deprecated": "superseded by another variable",
}


class Severity(StrEnum):
    # A StrEnum so that JSON output stays "error" / "warning" and `p.severity == "error"` keeps working.
    ERROR = "error"  # blocks: the env or the space is refused
    WARNING = "warning"  # informs


@dataclass(frozen=True)
class Problem:
    variable: str
    rule: str
    message: str
    severity: Severity = Severity.ERROR
    # Where in a search space the entry stands when it is not `env.<variable>`: ("fixed_env", name),
    # ("allow_risky", index). A REST answer locates the problem there; the words stay the same.
    where: tuple[str | int, ...] = ()

    def __post_init__(self) -> None:
        # Callers may pass the plain string ("warning"); store the enum so every Problem compares alike.
        object.__setattr__(self, "severity", Severity(self.severity))

    @classmethod
    def warn(cls, variable: str, rule: str, message: str) -> Problem:
        return cls(variable, rule, message, Severity.WARNING)

    def __str__(self) -> str:
        tag = self.rule if self.severity is Severity.ERROR else f"{self.rule}, warning"
        return f"{self.variable}: {self.message} [{tag}]"


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity is Severity.ERROR]


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 40, 6, 4, 2


def show_value(value: object, limit: int = 40) -> str:
    """A value for a message: repr'd (control characters escaped), containers cut short, then cut to `limit`."""
    text = repr(value) if isinstance(value, str | int | float | bool | None) else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_problems(problems: Iterable[Problem]) -> str:
    """One aligned line per problem: variable, rule (", warning" for warnings), message. Empty = ""."""
    rows = [
        (p.variable, p.rule if p.severity is Severity.ERROR else f"{p.rule} (warning)", p.message)
        for p in problems
    ]
    if not rows:
        return ""
    wv = max(len(r[0]) for r in rows)
    wr = max(len(r[1]) for r in rows)
    return "\n".join(f"{v:<{wv}}  {r:<{wr}}  {m}" for v, r, m in rows)
