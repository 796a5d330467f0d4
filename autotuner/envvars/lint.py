"""The linter's entry points for concrete variables: a job's KEY=VALUE env, from the CLI or a config.

Every problem is reported, not just the first: names, safety, values, then the relations between the
variables whose values are valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autotuner.envvars.problems import Problem, errors
from autotuner.envvars.relations import Span, relation_problems
from autotuner.envvars.values import canonical, check_name, check_value, safety_problems


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
