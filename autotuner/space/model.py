"""The search space as a pydantic model: what a study searches, validated against the registry on
construction, and the points it yields.

NCCL reads its environment once per process, so the space has two halves: `env` (a new launch per point)
and precisions x batch sizes x sharding x threads x pipelines (many candidates measured in one launch).
Declared in YAML, JSON or a request body, a space is refused with every problem named before a single
process starts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from autotuner.envvars import Problem, errors, lint_env
from autotuner.limits import limits, over
from autotuner.space.checks import INPROC_FIELDS, SpaceError, check_declaration, schema_problems
from autotuner.space.dims import InProcPoint, IntRange, to_env_strings
from autotuner.space.sources import with_preset
from autotuner.text import shortened
from trials.choices import Pipeline, Precision, Sharding
from trials.spec import MAX_BATCH  # a typo must not allocate a terabyte

Knob = Literal["precision", "batch", "pipeline", "env", "sharding", "threads"]
LrScaling = Literal["none", "sqrt", "linear"]
KNOBS: tuple[Knob, ...] = get_args(Knob)
MAX_THREADS = 1024
MAX_GRID = 10_000  # env_grid() enumerates up to this many points; beyond, sample instead

EnvDim = list[StrictInt | str | None] | IntRange


def _distinct(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError(
            f"each at most once ({next(v for v in values if values.count(v) > 1)!r} is listed twice)"
        )
    return values


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
    batch_sizes: list[BatchSize] = [512]  # left out: the workload's batch_size, if it has one (create_study)
    sharding: list[Sharding] = ["table_wise"]
    num_threads: list[Threads | None] = [None]  # null = torch's default
    pipelines: list[Pipeline | None] = [None]  # null = the workload's own (sparse_dist with a dense part)
    # A number, never `yes` or "0.5" (read as 1.0, these limits' loosest: any error, any quality cost).
    max_quant_error: Annotated[StrictFloat, Field(gt=0, le=1, allow_inf_nan=False)] = 0.05
    allow_risky: list[str] = Field(default_factory=list)
    # What a published config may claim. A batch above the job's changes the training itself.
    allow_batch_change: StrictBool = False
    # The path from the baseline to the tuned config, one knob group at a time (the published case's order).
    ladder: list[Knob] = Field(default_factory=lambda: list(KNOBS))
    max_logloss_delta: Annotated[StrictFloat, Field(gt=0, le=1, allow_inf_nan=False)] = 0.002
    # The convergence check trains baseline and variants under this many paired model seeds (a 95% CI
    # over the pairs), and a batch change under each learning-rate rule listed (lr x (batch / the
    # job's) ** 0, 0.5 or 1): more than one is searched, in the quality launch, and the best of m
    # judged on intervals at 1 - 5%/m (stats.family_confidence).
    quality_seeds: Annotated[StrictInt, Field(ge=2, le=32)] = 3
    lr_scaling: Annotated[list[LrScaling], AfterValidator(_distinct)] = Field(
        default_factory=lambda: list[LrScaling](["none"]), min_length=1, max_length=3
    )
    quality_data: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # "module:function"
    # Variables searched even where they cannot act (reported "inert here", never published).
    force_inert: list[str] = Field(default_factory=list)

    _warnings: list[Problem] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _against_registry(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> SearchSpace:
        if not isinstance(data, Mapping):
            return handler(data)
        data = with_preset(dict(data))
        problems, clean = check_declaration(data)
        try:
            space = handler(clean)
        except ValidationError as exc:
            raise SpaceError(problems + schema_problems(exc)) from None
        if errors(problems):
            raise SpaceError(problems)
        problems += _grid_problems(space)
        if errors(problems):
            raise SpaceError(problems)
        newer = _newer_rules(space)
        if STORED.get():  # a study's, from before them
            newer = [Problem.warn(p.variable, p.rule, p.message) for p in newer]
        problems += _combination_problems(space) + newer
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
        pipeline becomes `default_pipeline` (the workload's). Combinations that cannot run (int8 comms
        on a reduce-scatter sharding: InProcPoint.problem) are left out; validation warned of them."""
        pipelines = list(dict.fromkeys(p or default_pipeline for p in self.pipelines))
        points = (
            InProcPoint(fwd, bwd, batch, sharding, threads, pipeline)
            for (fwd, bwd), batch, sharding, threads, pipeline in itertools.product(
                self.precisions, self.batch_sizes, self.sharding, self.num_threads, pipelines
            )
        )
        return [p for p in points if p.problem() is None]

    def env_dims(self) -> dict[str, list[int | str | None] | IntRange]:
        return dict(self.env)

    def env_grid(self) -> list[dict[str, str]] | None:
        """Every env point as exported (unset variables omitted, fixed_env not included), leaving out the
        points check_env rejects. None when a range has no step or the grid exceeds MAX_GRID points."""
        sizes = [dim.count() if isinstance(dim, IntRange) else len(dim) for dim in self.env.values()]
        if None in sizes or math.prod(sizes) > MAX_GRID:  # type: ignore[arg-type]
            return None  # a continuum, or too many points to list: sampled instead
        axes: list[list[tuple[str, int | str | None]]] = []
        for name, dim in self.env.items():
            values: list[int | str | None] = []
            if isinstance(dim, IntRange):
                values.extend(dim.values() or [])
            else:
                values.extend(dim)
            axes.append([(name, v) for v in values])
        grid = []
        for combo in itertools.product(*axes):
            env = to_env_strings(dict(combo))
            if not errors(self.check_env(env)):
                grid.append(env)
        return grid

    def without(self, names: Collection[str]) -> SearchSpace:
        """This space with those env dimensions left out (validated already: a copy, not a re-check)."""
        return self.model_copy(update={"env": {k: v for k, v in self.env.items() if k not in names}})

    def check_env(self, env: Mapping[str, str]) -> list[Problem]:
        """Problems of one concrete point (fixed_env merged under it); errors mean: do not launch it."""
        return lint_env({**self.fixed_env, **env}, allow_risky=self.allow_risky)


def _combination_problems(space: SearchSpace) -> list[Problem]:
    """Precision x sharding pairs that cannot run are never searched: a warning for each, an error when
    nothing is left to search."""
    problems = []
    for (fwd, bwd), sharding in itertools.product(space.precisions, space.sharding):
        why = InProcPoint(fwd, bwd, 1, sharding).problem()
        if why:
            problems.append(
                Problem.warn("precisions", "cannot-run", f"{fwd}/{bwd} x {sharding} is not searched: {why}")
            )
    if problems and len(problems) == len(space.precisions) * len(space.sharding):
        return [
            Problem(
                "precisions", "cannot-run", f"no precision x sharding pair can run: {problems[0].message}"
            )
        ]
    return problems


# Set while a study's stored space is read (loader.stored_space): the rules added since it was
# accepted are warnings then. A context variable: pydantic's validation context would need a wrap
# validator's info, typed differently across the pydantic versions this package supports.
STORED: ContextVar[bool] = ContextVar("stored_space", default=False)


def _newer_rules(space: SearchSpace) -> list[Problem]:
    """Fields that would silently do nothing or mislead: a new space is refused for them; a study's
    stored space (accepted before these rules) only warned of, so the study resumes and its configs
    stay re-validatable."""
    problems = [
        Problem(
            "force_inert",
            "not-searched",
            f"{shortened(name, 80)} is not a variable of env (what this space searches)",
        )
        for name in space.force_inert
        if name not in space.env
    ]  # a typo there would search nothing more
    if not space.ladder:  # nothing could be credited: the finalist would publish as the baseline
        problems.append(Problem("ladder", "empty", f"lists no knob group (give some of {', '.join(KNOBS)})"))
    twice = sorted({knob for knob in space.ladder if space.ladder.count(knob) > 1})
    if twice:
        problems.append(Problem("ladder", "repeated", f"lists {', '.join(twice)} more than once"))
    return problems


def _grid_problems(space: SearchSpace) -> list[Problem]:
    """The in-process grid (what `inproc_points` lists and the scheduler draws from) within the cap."""
    sizes = {key: len(getattr(space, key)) for key in INPROC_FIELDS}
    total = math.prod(sizes.values())
    limit = limits().max_candidates
    if total <= limit:
        return []
    shape = " x ".join(f"{key} {n:,}" for key, n in sizes.items())
    what = f"the in-process grid ({shape})"
    return [
        Problem("space", "too-large", over(what, total, limit, "AUTOTUNER_MAX_CANDIDATES", " candidates"))
    ]
