"""The registry checks on a declared space: every env dimension, fixed value and in-process list, then the
relations between them, each problem named with its variable and rule before anything is launched.

Also pydantic's own errors, turned into the same Problems, so a caller sees one list whatever found them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from autotuner.envvars import (
    EnvVar,
    Problem,
    Safety,
    Span,
    canonical,
    check_name,
    check_value,
    errors,
    is_path_valued,
    relation_problems,
    safety_problems,
    show_value,
)
from autotuner.limits import limits, over
from autotuner.space.dims import IntRange

# SearchSpace's fields, for the message on an unknown one (the model imports this module, not back).
FIELDS = (
    "env",
    "fixed_env",
    "precisions",
    "batch_sizes",
    "sharding",
    "num_threads",
    "pipelines",
    "max_quant_error",
    "allow_risky",
    "allow_batch_change",
    "ladder",
    "max_logloss_delta",
    "quality_seeds",
    "lr_scaling",
    "quality_data",
    "force_inert",
)


class SpaceError(ValueError):
    """A space that cannot be searched. `.problems` holds every problem found; `str()` lists one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        said = "\n".join(str(p) for p in self.problems) or "invalid search space"
        # a name of the request's in the words: pydantic encodes them as UTF-8, which a lone surrogate is not
        super().__init__(said.encode("utf-8", "backslashreplace").decode("utf-8"))


# Searched inside one launch: each a list that must be non-empty and repeat no value.
INPROC_FIELDS = ("precisions", "batch_sizes", "sharding", "num_threads", "pipelines")


def check_declaration(data: dict[str, Any]) -> tuple[list[Problem], dict[str, Any]]:
    """Registry checks on the raw declaration; also returns it with env values normalised (ints as ints,
    fixed values as exported strings) and invalid entries dropped so pydantic does not report them twice."""
    problems: list[Problem] = []
    clean = dict(data)
    oversized = [k for k in ("env", "fixed_env", "allow_risky", "force_inert", "ladder", *INPROC_FIELDS)
                 if _too_many(k, data.get(k), problems)]  # fmt: skip
    if oversized:  # nothing more is read of those: their size is the error
        data = clean = {**clean, **{k: type(data[k])() for k in oversized}}
    allowed = _check_allow_risky(data.get("allow_risky"), problems)
    dims: dict[str, list[int | str | None] | IntRange] = {}
    fixed: dict[str, str] = {}
    env = data.get("env", {})
    if isinstance(env, Mapping):
        dims = clean["env"] = _check_env(env, allowed, problems)
    fixed_env = data.get("fixed_env", {})
    if isinstance(fixed_env, Mapping):
        searched = env if isinstance(env, Mapping) else {}
        fixed = clean["fixed_env"] = _check_fixed_env(fixed_env, searched, allowed, problems)
    for key in INPROC_FIELDS:
        if key not in oversized:
            _check_inproc(key, data.get(key), problems)
    problems += _space_relations(dims, fixed, data.get("sharding", ["table_wise"]))
    return problems, clean


def _too_many(field: str, values: Any, problems: list[Problem]) -> bool:
    """A list or mapping of the space longer than AUTOTUNER_MAX_DIM_VALUES (a problem is recorded)."""
    if not isinstance(values, list | Mapping):
        return False
    limit = limits().max_dim_values
    if len(values) <= limit:
        return False
    what = f"the number of {'variables' if isinstance(values, Mapping) else 'values'} in {field}"
    problems.append(Problem(field, "too-large", over(what, len(values), limit, "AUTOTUNER_MAX_DIM_VALUES")))
    return True


def _check_env(
    env: Mapping[Any, Any], allowed: set[str], problems: list[Problem]
) -> dict[str, list[int | str | None] | IntRange]:
    dims: dict[str, list[int | str | None] | IntRange] = {}
    for name, dim in env.items():
        checked = _check_dim(name, dim, allowed, problems)
        if checked is not None:
            dims[name] = checked
    return dims


def _check_fixed_env(
    fixed_env: Mapping[Any, Any], searched: Mapping[Any, Any], allowed: set[str], problems: list[Problem]
) -> dict[str, str]:
    fixed: dict[str, str] = {}
    for name, value in fixed_env.items():
        found: list[Problem] = []
        checked_value = _check_fixed(name, value, allowed, found)
        if name in searched:
            found.append(
                Problem(name, "duplicate", f"{name} is both a search dimension (env) and fixed (fixed_env)")
            )
        elif checked_value is not None:
            fixed[name] = checked_value
        problems += [replace(p, where=("fixed_env", name)) for p in found]
    return fixed


def _check_inproc(key: str, values: Any, problems: list[Problem]) -> None:
    if not isinstance(values, list):
        return  # pydantic names the type
    if not values:
        problems.append(Problem(key, "empty-dimension", f"{key} is empty: give at least one value"))
    seen: set[Any] = set()  # linear: a long list must not cost its square
    for value in values:
        item = _hashable(value)
        if item in seen:
            problems.append(Problem(key, "duplicate", f"{_shown(value)} appears twice in {key}"))
        seen.add(item)


def _hashable(value: Any) -> Any:
    """A key equal where the values are (a precision pair arrives as a list; anything odd by its JSON).
    A list's is flat, its brackets as markers, made and compared without recursion: a list nested 900
    deep (a request body under 2 KB) overflowed the recursion, a 500."""
    if not isinstance(value, list):
        return _hashable_leaf(value)
    key: list[Any] = []
    inside: set[int] = set()  # the lists being read: one found inside itself (YAML can say so) is a mark
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, closing = stack.pop()
        if closing:
            inside.discard(id(item))
            key.append(_CLOSE)
        elif isinstance(item, list) and id(item) in inside:
            key.append(_CYCLE)
        elif isinstance(item, list):
            inside.add(id(item))
            key.append(_OPEN)
            stack.append((item, True))
            stack.extend((v, False) for v in reversed(item))
        else:
            key.append(_hashable_leaf(item))
    return tuple(key)


_OPEN, _CLOSE, _CYCLE = ("[",), ("]",), ("...",)  # no JSON value is a tuple: never equal to one


def _hashable_leaf(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        try:
            return ("unhashable", json.dumps(value, sort_keys=True, default=repr))
        except (ValueError, RecursionError):  # a dict nested too deep, or inside itself: never equal
            return ("unhashable", id(value))
    return value


def _space_relations(
    dims: Mapping[str, list[int | str | None] | IntRange], fixed: Mapping[str, str], sharding: Any
) -> list[Problem]:
    """The relation rules over every value each variable can take, searched or fixed."""
    spans = {name: _span(dim) for name, dim in dims.items()}
    spans.update({name: Span.of([value]) for name, value in fixed.items()})
    types = [s for s in sharding if isinstance(s, str)] if isinstance(sharding, list) else None
    return relation_problems({n: s for n, s in spans.items() if s is not None}, space=True, sharding=types)


def allow_risky_problems(names: list[str]) -> list[Problem]:
    """What is wrong with a list of variables accepted as risky (`autotuner lint --allow-risky`), as a
    space's allow_risky is judged: an unknown name, one that can never be allowed, one not risky."""
    problems: list[Problem] = []
    _check_allow_risky(names, problems)
    return [replace(p, where=()) for p in problems]


def _check_allow_risky(names: Any, problems: list[Problem]) -> set[str]:
    if not isinstance(names, list):
        return set()
    allowed = set()
    for index, name in enumerate(names):
        if not isinstance(name, str):
            continue  # pydantic names the type
        var, found = check_name(name)
        if var is not None and var.safety is Safety.NEVER and not (var.passthrough and is_path_valued(name)):
            found.append(Problem(name, "never-tune", f"{name} cannot be allowed: {var.doc}"))
        elif var is not None and var.safety is Safety.TUNABLE and not is_path_valued(name):
            found.append(
                Problem.warn(
                    name, "no-effect", f"{name} is not risky: listing it in allow_risky changes nothing"
                )
            )
        problems += [replace(p, where=("allow_risky", index)) for p in found]
        if var is not None:
            allowed.add(name)
    return allowed


def _check_dim(
    name: Any, dim: Any, allowed: set[str], problems: list[Problem]
) -> list[Any] | IntRange | None:
    """One env dimension: the normalised dimension, or None when it has errors (recorded in `problems`)."""
    var, found = check_name(name)
    if var is None:
        problems += found
        return None
    before = len(errors(problems))
    problems += safety_problems(name, var, as_dim=True, allow_risky=allowed)
    result: list[Any] | IntRange | None = None
    if isinstance(dim, IntRange | Mapping):
        result = _check_range(name, var, dim, problems)
    elif isinstance(dim, list):
        result = _check_list(name, var, dim, problems)
    else:
        problems.append(
            Problem(
                name, "schema", f"{_shown(dim)} is not a dimension: give a list of values or {{low, high}}"
            )
        )
    return result if len(errors(problems)) == before else None


def _check_list(name: str, var: EnvVar, values: list[Any], problems: list[Problem]) -> list[Any]:
    if _too_many(name, values, problems):
        return []
    if not values:
        problems.append(
            Problem(name, "empty-dimension", f"{name} has no values: list some (null = unset) or remove it")
        )
    out: list[Any] = []
    seen: dict[str | None, Any] = {}
    for value in values:
        if value is None:
            key = None
        else:
            found = check_value(name, value, var)
            problems += found
            if errors(found):
                continue
            key = canonical(var, value)
            value = int(value) if var.kind in ("int", "bool") else key
        if key in seen:
            what = "null (unset)" if key is None else f"{_shown(value)}"
            problems.append(Problem(name, "duplicate", f"{what} appears twice in the values of {name}"))
            continue
        seen[key] = value
        out.append(value)
    return out


def _check_range(name: str, var: EnvVar, dim: Any, problems: list[Problem]) -> IntRange | None:
    try:
        r = dim if isinstance(dim, IntRange) else IntRange.model_validate(dim)
    except ValidationError as exc:
        problems += [Problem(name, p.rule, f"range {p.variable}: {p.message}") for p in schema_problems(exc)]
        return None
    d = var.domain
    before = len(errors(problems))
    if var.kind not in ("int", "bool"):
        problems.append(
            Problem(
                name,
                "out-of-domain",
                f"a range needs an integer variable; {name} takes {var.allowed()}: list them",
            )
        )
    elif r.low > r.high:
        problems.append(Problem(name, "empty-dimension", f"low {r.low} > high {r.high}: the range is empty"))
    elif (d.low is not None and r.low < d.low) or (d.high is not None and r.high > d.high):
        extra = " (special values such as -1 go in a list)" if d.negative else ""
        problems.append(
            Problem(
                name,
                "out-of-domain",
                f"range {r.low}..{r.high} leaves {name}'s domain: {var.allowed()}{extra}",
            )
        )
    if r.step is not None and r.step < 1:
        problems.append(Problem(name, "schema", f"step {r.step} must be at least 1"))
    elif r.log and r.step not in (None, 1):
        problems.append(Problem(name, "schema", "a log range samples every integer: drop step, or drop log"))
    if r.log and r.low < 1:
        problems.append(Problem(name, "schema", f"a log range needs low >= 1, got {r.low}"))
    if d.pow2 and len(errors(problems)) == before:
        problems.append(
            Problem.warn(
                name,
                "not-pow2",
                f"NCCL rounds {name} up to a power of two: most points of a range repeat one setting; "
                "list powers of two instead",
            )
        )
    return r


def _check_fixed(name: Any, value: Any, allowed: set[str], problems: list[Problem]) -> str | None:
    var, found = check_name(name)
    if var is None:
        problems += found
        return None
    found = safety_problems(name, var, as_dim=False, allow_risky=allowed)
    if value is None:
        found.append(
            Problem(name, "schema", "null is not a fixed value: remove the variable to leave it unset")
        )
    elif isinstance(value, list | Mapping):
        found.append(
            Problem(name, "schema", "a fixed value is one integer or string; search dimensions go in env")
        )
    else:
        found += check_value(name, value, var)
    problems += found
    return None if errors(found) else canonical(var, value)


def _span(dim: list[Any] | IntRange) -> Span | None:
    if isinstance(dim, IntRange):
        return Span(dim.low, dim.high)
    values = [str(v) for v in dim if v is not None]
    return Span.of(values) if values else None


def _shown(value: Any) -> str:
    """A value as the user wrote it (JSON style for scalars), cut short; containers never in full."""
    if isinstance(value, str | int | float | None) and not isinstance(value, bool):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return show_value(value)


_DOMAIN_ERRORS = (
    "literal_error",
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
)


def schema_problems(exc: ValidationError) -> list[Problem]:
    """pydantic errors as Problems; a SpaceError raised inside validation passes through whole."""
    out: list[Problem] = []
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, SpaceError):
            out += inner.problems
            continue
        loc = err["loc"]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "space"
        if err["type"] == "extra_forbidden":
            out.append(Problem(where, "schema", f"unknown field (fields: {', '.join(FIELDS)})"))
        elif err["type"] == "missing":
            out.append(Problem(where, "schema", "is required"))
        else:
            rule = "out-of-domain" if err["type"] in _DOMAIN_ERRORS else "schema"
            out.append(Problem(where, rule, f"{err['msg']}, got {_shown(err.get('input'))}"))
    return out
