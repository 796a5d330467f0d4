"""A study's search space: env dimensions searched across launches, in-process dimensions inside one.

NCCL reads its environment once per process, so the space has two halves: `env` (a new launch per point)
and precisions x batch sizes x sharding x threads (many candidates measured in one launch). Declared in
YAML, JSON or a request body and validated against the registry, so a bad value is refused with every
problem named before a single process starts.
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from autotuner.lint import (
    Problem,
    Span,
    _show,
    canonical,
    check_name,
    check_value,
    errors,
    lint_env,
    relation_problems,
    safety_problems,
)
from autotuner.registry import EnvVar, Safety

Precision = Literal["fp32", "fp16", "bf16", "fp8", "int8"]
Sharding = Literal["table_wise", "row_wise", "table_row_wise", "column_wise"]
Pipeline = Literal["none", "base", "sparse_dist", "semi_sync", "fused_sparse_dist"]
MAX_BATCH = 1 << 20  # as trials.spec: a typo must not allocate a terabyte
MAX_THREADS = 1024
MAX_GRID = 10_000  # env_grid() enumerates up to this many points; beyond, sample instead

PRESET_DIR = Path(__file__).parent / "presets"
PRESETS: dict[str, Path] = {p.stem: p for p in sorted(PRESET_DIR.glob("*.yaml"))}
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
)


class SpaceError(ValueError):
    """A space that cannot be searched. `.problems` holds every problem found; `str()` lists one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid search space")


class IntRange(BaseModel):
    """An integer dimension sampled between low and high (inclusive); `step` makes it a grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: StrictInt
    high: StrictInt
    log: StrictBool = False
    step: StrictInt | None = None

    def values(self) -> list[int] | None:
        """Every point when the range has a step, else None (a continuum for the sampler)."""
        return list(range(self.low, self.high + 1, self.step)) if self.step else None


@dataclass(frozen=True)
class InProcPoint:
    """One candidate measured inside a launch; fields as trials.spec.CandidateSpec."""

    fwd_precision: str
    bwd_precision: str
    batch_size: int
    sharding: str
    num_threads: int | None = None
    pipeline: str | None = None  # None: the workload's own (trials.spec.WorkloadSpec.default_pipeline)

    def key(self) -> str:
        threads = "-" if self.num_threads is None else str(self.num_threads)
        key = f"{self.fwd_precision}/{self.bwd_precision}|{self.batch_size}|{self.sharding}|t{threads}"
        return key if self.pipeline is None else f"{key}|{self.pipeline}"

    def to_candidate(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fwd_precision": self.fwd_precision,
            "bwd_precision": self.bwd_precision,
            "batch_size": self.batch_size,
            "sharding": self.sharding,
        }
        if self.num_threads is not None:
            out["num_threads"] = self.num_threads
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline
        return out


EnvDim = list[StrictInt | str | None] | IntRange
BatchSize = Annotated[StrictInt, Field(ge=1, le=MAX_BATCH)]
Threads = Annotated[StrictInt, Field(ge=1, le=MAX_THREADS)]


class SearchSpace(BaseModel):
    """What a study searches. Constructing one validates it against the registry (SpaceError otherwise)."""

    model_config = ConfigDict(extra="forbid")

    # A list is categorical (null = leave unset); {low, high, log, step} an integer range.
    env: dict[str, EnvDim] = Field(default_factory=dict)
    # Exported to every launch (baseline included) and every served config: cluster pass-through settings.
    fixed_env: dict[str, str] = Field(default_factory=dict)
    # Defaults (pydantic copies them per instance): the baseline precision, batch and sharding only.
    precisions: list[tuple[Precision, Precision]] = [("fp32", "fp32")]
    batch_sizes: list[BatchSize] = [512]
    sharding: list[Sharding] = ["table_wise"]
    num_threads: list[Threads | None] = [None]  # null = torch's default
    pipelines: list[Pipeline | None] = [None]  # null = the workload's own (sparse_dist with a dense part)
    max_quant_error: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.05
    allow_risky: list[str] = Field(default_factory=list)

    _warnings: list[Problem] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _against_registry(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> SearchSpace:
        if not isinstance(data, Mapping):
            return handler(data)
        data = _with_preset(dict(data))
        problems, clean = _check(data)
        try:
            space = handler(clean)
        except ValidationError as exc:
            raise SpaceError(problems + _schema_problems(exc)) from None
        if errors(problems):
            raise SpaceError(problems)
        space._warnings = problems
        return space

    @property
    def warnings(self) -> list[Problem]:
        """What validation found worth saying but not worth refusing (no-effect, not-pow2, ...)."""
        return list(self._warnings)

    def inproc_points(self, default_pipeline: str | None = None) -> list[InProcPoint]:
        """precisions x batch_sizes x sharding x num_threads x pipelines, in declaration order; a null
        pipeline becomes `default_pipeline` (the workload's)."""
        pipelines = list(dict.fromkeys(p or default_pipeline for p in self.pipelines))
        return [
            InProcPoint(fwd, bwd, batch, sharding, threads, pipeline)
            for (fwd, bwd), batch, sharding, threads, pipeline in itertools.product(
                self.precisions, self.batch_sizes, self.sharding, self.num_threads, pipelines
            )
        ]

    def env_dims(self) -> dict[str, list[int | str | None] | IntRange]:
        return dict(self.env)

    def env_grid(self) -> list[dict[str, str]] | None:
        """Every env point as exported (unset variables omitted, fixed_env not included), leaving out the
        points check_env rejects. None when a range has no step or the grid exceeds MAX_GRID points."""
        axes: list[list[tuple[str, int | str | None]]] = []
        for name, dim in self.env.items():
            values = dim.values() if isinstance(dim, IntRange) else list(dim)
            if values is None:
                return None
            axes.append([(name, v) for v in values])
        if math.prod(len(a) for a in axes) > MAX_GRID:
            return None
        grid = []
        for combo in itertools.product(*axes):
            env = to_env_strings(dict(combo))
            if not errors(self.check_env(env)):
                grid.append(env)
        return grid

    def check_env(self, env: Mapping[str, str]) -> list[Problem]:
        """Problems of one concrete point (fixed_env merged under it); errors mean: do not launch it."""
        return lint_env({**self.fixed_env, **env}, allow_risky=self.allow_risky)


def to_env_strings(point: Mapping[str, object]) -> dict[str, str]:
    """A sampled point -> the strings exported: None (unset) dropped, integers as plain decimal."""
    out: dict[str, str] = {}
    for name, value in point.items():
        if value is None:
            continue
        if isinstance(value, bool):
            raise ValueError(f"{name}: {value!r} is a boolean, not an env value (use 0 or 1)")
        if isinstance(value, numbers.Integral):
            out[name] = str(int(value))
        elif isinstance(value, str):
            out[name] = value
        else:
            raise ValueError(f"{name}: {value!r} is not an integer or a string")
    return out


def load_space(source: str | Path | Mapping[str, Any]) -> SearchSpace:
    """A space from a .yaml/.yml/.json file, a preset name or a decoded dict ({"preset": ..., overrides}).
    Raises SpaceError with every problem found."""
    data = dict(source) if isinstance(source, Mapping) else _read(source)
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(_schema_problems(exc)) from None


# --------------------------------------------------------------------------- files and presets


class _StrictLoader(yaml.SafeLoader):
    """YAML 1.1 reads 010 as 8, 0x10 as 16 and 1_000 as 1000: only plain decimals are integers here, the
    rest stay strings so the linter can say what NCCL would do with them. Duplicate keys are refused."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789")
)


def _read(source: str | Path) -> dict[str, Any]:
    if isinstance(source, str) and source in PRESETS:
        return _read_file(PRESETS[source])
    path = Path(source)
    if not path.exists() and path.suffix == "" and isinstance(source, str):
        names = ", ".join(PRESETS)
        raise SpaceError([Problem(str(source), "schema", f"no such file or preset (presets: {names})")])
    return _read_file(path)


def _read_file(path: Path) -> dict[str, Any]:
    where = str(path)
    if path.suffix not in (".yaml", ".yml", ".json"):
        raise SpaceError([Problem(where, "schema", "a space file ends in .yaml, .yml or .json")])
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpaceError([Problem(where, "schema", f"cannot read: {exc.strerror}")]) from None
    try:
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
        else:
            data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        detail = " ".join(str(exc).split())
        raise SpaceError([Problem(where, "schema", f"not valid {kind}: {detail}")]) from None
    if not isinstance(data, dict):
        raise SpaceError(
            [Problem(where, "schema", f"must hold a mapping of fields, got {type(data).__name__}")]
        )
    return data


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def _with_preset(data: dict[str, Any]) -> dict[str, Any]:
    """{"preset": name, **overrides}: the preset's fields, each top-level key given replacing the preset's."""
    if "preset" not in data:
        return data
    name = data.pop("preset")
    if not isinstance(name, str) or name not in PRESETS:
        problem = Problem("preset", "schema", f"unknown preset {name!r} (presets: {', '.join(PRESETS)})")
        raise SpaceError([problem])
    base = _read_file(PRESETS[name])
    base.pop("preset", None)
    return {**base, **data}


# --------------------------------------------------------------------------- validation


def _check(data: dict[str, Any]) -> tuple[list[Problem], dict[str, Any]]:
    """Registry checks on the raw declaration; also returns it with env values normalised (ints as ints,
    fixed values as exported strings) and invalid entries dropped so pydantic does not report them twice."""
    problems: list[Problem] = []
    clean = dict(data)
    allowed = _check_allow_risky(data.get("allow_risky"), problems)
    dims: dict[str, list[int | str | None] | IntRange] = {}
    fixed: dict[str, str] = {}

    env = data.get("env", {})
    if isinstance(env, Mapping):
        for name, dim in env.items():
            checked = _check_dim(name, dim, allowed, problems)
            if checked is not None:
                dims[name] = checked
        clean["env"] = dims
    fixed_env = data.get("fixed_env", {})
    if isinstance(fixed_env, Mapping):
        for name, value in fixed_env.items():
            checked_value = _check_fixed(name, value, allowed, problems)
            if isinstance(env, Mapping) and name in env:
                problems.append(
                    Problem(
                        name, "duplicate", f"{name} is both a search dimension (env) and fixed (fixed_env)"
                    )
                )
            elif checked_value is not None:
                fixed[name] = checked_value
        clean["fixed_env"] = fixed

    for key in ("precisions", "batch_sizes", "sharding", "num_threads", "pipelines"):
        values = data.get(key)
        if not isinstance(values, list):
            continue
        if not values:
            problems.append(Problem(key, "empty-dimension", f"{key} is empty: give at least one value"))
        seen: list[Any] = []
        for value in values:
            item = tuple(value) if isinstance(value, list) else value
            if item in seen:
                problems.append(Problem(key, "duplicate", f"{_shown(value)} appears twice in {key}"))
            seen.append(item)

    spans = {name: _span(dim) for name, dim in dims.items()}
    spans.update({name: Span.of([value]) for name, value in fixed.items()})
    sharding = data.get("sharding", ["table_wise"])
    sharding = [s for s in sharding if isinstance(s, str)] if isinstance(sharding, list) else None
    problems += relation_problems(
        {n: s for n, s in spans.items() if s is not None}, space=True, sharding=sharding
    )
    return problems, clean


def _check_allow_risky(names: Any, problems: list[Problem]) -> set[str]:
    if not isinstance(names, list):
        return set()
    allowed = set()
    for name in names:
        if not isinstance(name, str):
            continue  # pydantic names the type
        var, found = check_name(name)
        problems += found
        if var is None:
            continue
        if var.safety is Safety.NEVER:
            problems.append(Problem(name, "never-tune", f"{name} cannot be allowed: {var.doc}"))
        elif var.safety is Safety.TUNABLE:
            problems.append(
                Problem(
                    name,
                    "no-effect",
                    f"{name} is not risky: listing it in allow_risky changes nothing",
                    "warning",
                )
            )
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
        problems += [Problem(name, p.rule, f"range {p.variable}: {p.message}") for p in _schema_problems(exc)]
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
            Problem(
                name,
                "not-pow2",
                f"NCCL rounds {name} up to a power of two: most points of a range repeat one setting; "
                "list powers of two instead",
                "warning",
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
    return _show(value)


_DOMAIN_ERRORS = (
    "literal_error",
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
)


def _schema_problems(exc: ValidationError) -> list[Problem]:
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
