"""Planning a search launch: one env point from the sampler, and up to k in-process points at it.

NCCL reads its environment once per process, so the env point is the launch; the in-process points
(precision, batch, sharding, threads, pipeline) are proposed by the same sampler at that env, up to
SAMPLER_PROPOSALS a launch. A proposal of a point measured already is answered from memory (an echo);
when the sampler keeps echoing, or a wider launch has had its proposals, the launch is filled with
unmeasured points, so every launch measures something new.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import optuna

from autotuner.envvars import Severity
from autotuner.space import InProcPoint
from autotuner.store import Candidate, LaunchKind, env_hash
from autotuner.tuning.context import StudyContext
from autotuner.tuning.search import INPROC_PARAMS, Search

log = logging.getLogger("autotuner.tuning")
MAX_PROPOSALS = 50  # env proposals in a row that may be invalid, quarantined or exhausted
# In-process points the sampler proposes per launch; unmeasured points fill the rest of a wider launch.
# Each proposal reads every trial so far: launches of k = 1,000 took 11 s of CPU to plan the first and
# 561 s the third when the sampler proposed every point, 0.03 s and 0.95 s now, and found the same best
# point (bench/RESULTS.md, planning-wide); a launch that wide measures much of its env's grid anyway.
SAMPLER_PROPOSALS = 32


@dataclass
class PlannedLaunch:
    env: dict[str, str]
    points: list[InProcPoint]
    trials: list[int | None]  # the proposal (in-memory trial number) asking for each point
    kind: LaunchKind = LaunchKind.SEARCH
    echoes: dict[int, int] = field(default_factory=dict)  # proposal -> the slot that measures it too
    nnodes: int | None = None  # None: the study's
    tag: str | None = None  # the comparison a confirmation / ladder launch belongs to
    quality: dict | None = None  # a convergence check's `quality` section (trials.spec.QualitySpec)
    # quality launches: each candidate's model seed, learning-rate scale, sample budget (trials.spec)
    extras: list[dict] | None = None

    @classmethod
    def of(
        cls, env: dict[str, str], points: list[InProcPoint], kind: LaunchKind, **kw: object
    ) -> PlannedLaunch:
        """A launch of given points, none of them asked for by the sampler."""
        return cls(dict(env), list(points), [None] * len(points), kind, **kw)  # type: ignore[arg-type]


def plan_launch(ctx: StudyContext, search: Search, rng: random.Random) -> PlannedLaunch | None:
    quarantined = ctx.store.quarantined(ctx.cluster_id)
    k = min(ctx.settings.candidates_per_launch or len(ctx.points), len(ctx.points))
    for _ in range(MAX_PROPOSALS):
        first = search.ask()
        env = search.env_of(first.params)
        problems = [p.message for p in ctx.space.check_env(env) if p.severity == Severity.ERROR]
        reason = "; ".join(problems) or quarantined.get(env_hash(env))
        if reason:  # breaks a constraint, or crashed before on this cluster: never launched
            search.skip(first, reason)
            continue
        measured = search.measured_at(env)
        plan = PlannedLaunch(env, [], [])
        _add(plan, search, first, search.point_of(first.params), measured)
        if len(measured) < len(ctx.points):  # else this env is exhausted: propose another
            _ask_at(plan, search, first.params, measured, k)
            _fill(plan, ctx.points, measured, k, rng)
        if plan.points:
            return by_sharding(plan)
    if _exhausted(ctx, search, quarantined):  # a small space (the demo's on CPU): nothing is left to do
        said = "every runnable point of its space is measured: the search ends"
        log.info("study %s: %s", ctx.study_id, said)
        ctx.progress.on_note(said)  # `tune` shows no INFO log: "launches 1/2" was left unexplained
    else:
        log.warning("study %s: %d proposals in a row were invalid, quarantined or exhausted", ctx.study_id,
                    MAX_PROPOSALS)  # fmt: skip
    return None


def by_sharding(plan: PlannedLaunch) -> PlannedLaunch:
    """The launch's points with those of one sharding together (in the order each sharding first
    appears), so that the trial shards the model once per type: it runs candidates in the spec's order
    (paired rounds depend on it) and re-shards at every change. A search launch's order is free."""
    firsts: dict[str, int] = {}
    for i, point in enumerate(plan.points):
        firsts.setdefault(point.sharding, i)
    order = sorted(range(len(plan.points)), key=lambda i: firsts[plan.points[i].sharding])
    slot = {old: new for new, old in enumerate(order)}
    plan.points = [plan.points[i] for i in order]
    plan.trials = [plan.trials[i] for i in order]
    plan.echoes = {number: slot[old] for number, old in plan.echoes.items()}
    return plan


def _exhausted(ctx: StudyContext, search: Search, quarantined: dict[str, str]) -> bool:
    """Whether every point of the space that may run (its env grid, less what crashed here before) was
    measured at every in-process point; False where the grid is too large to list."""
    grid = ctx.space.env_grid()
    if grid is None:
        return False
    wanted = {p.key() for p in ctx.points}
    envs = ({**ctx.space.fixed_env, **env} for env in grid)
    return all(wanted <= search.measured_at(env).keys() for env in envs if env_hash(env) not in quarantined)


def _ask_at(
    plan: PlannedLaunch, search: Search, params: dict, measured: dict[str, Candidate], k: int
) -> None:
    """More in-process points at the same env, from the same sampler, until k (at most
    SAMPLER_PROPOSALS) are planned or it proposed as many in a row that this launch or an earlier one
    has (then unmeasured ones fill up)."""
    env_params = {n: v for n, v in params.items() if n not in INPROC_PARAMS}
    wanted, echoes = min(k, SAMPLER_PROPOSALS), 0
    while len(plan.points) < wanted and echoes < wanted:
        before = len(plan.points)
        trial = search.ask(env_params)
        _add(plan, search, trial, search.point_of(trial.params), measured)
        echoes = 0 if len(plan.points) > before else echoes + 1


def _add(
    plan: PlannedLaunch,
    search: Search,
    trial: optuna.trial.Trial,
    point: InProcPoint,
    measured: dict[str, Candidate],
) -> None:
    number = trial.number
    problem = point.problem()
    if problem:  # precision and sharding are sampled apart: a pair that cannot run is never launched
        search.skip(trial, problem)
    elif point.key() in measured:
        search.answer(number, measured[point.key()])
    elif point in plan.points:
        plan.echoes[number] = plan.points.index(point)
    else:
        plan.points.append(point)
        plan.trials.append(number)


def _fill(
    plan: PlannedLaunch, points: list[InProcPoint], measured: dict[str, Candidate], k: int, rng: random.Random
) -> None:
    """When the sampler keeps proposing what this env already has, fill up with unmeasured points."""
    unmeasured = [p for p in points if p.key() not in measured and p not in plan.points]
    rng.shuffle(unmeasured)
    for point in unmeasured[: k - len(plan.points)]:
        plan.points.append(point)
        plan.trials.append(None)
