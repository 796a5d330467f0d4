"""The sampler's view of a study: Optuna's live state in memory, its record in the database.

An Optuna study on RDB storage re-reads every trial at each ask, and TPE keeps proposing points
already measured; answered through the database, those "echoes" made planning grow with the square
of a study's length (a 12-point replay study: ~2 minutes of CPU, 1,293 Optuna trials for a few dozen
candidates). So the sampler asks an in-memory study, loaded at start from the candidates in our
store; echoes are answered there and never written; and Optuna's own record in the database (what
the dashboard's parameter importance reads) gets exactly one trial per measured search candidate,
numbered as the candidate's `optuna_number`. Our store stays the single source of truth: the
in-memory state is rebuilt from it after a restart, and a record that missed trials catches up.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotuner.space import InProcPoint, IntRange, SearchSpace, to_env_strings
from autotuner.store import Candidate, CandidateState, LaunchKind, env_hash
from autotuner.store.db import libpq_deadlines, schema_lock
from autotuner.tuning.context import StudyContext, point_of

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger("autotuner.tuning")

PRECISION = "precision"  # the Optuna parameter holding "fwd/bwd"
INPROC_PARAMS = (PRECISION, "batch_size", "sharding", "num_threads", "pipeline")


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage in our database. Creating it creates Optuna's tables the first time, which
    is not safe against a concurrent creator (a fresh service's scheduler and an API worker both
    opening one failed a study with `UNIQUE constraint failed: alembic_version.version_num`): one
    process at a time creates (schema_lock), and a creator that does not take the lock (another
    version of this, another tool) costs a retry, never an error."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    else:  # its engine is not make_engine's: without these, a partitioned server held the scheduler (the
        # record is written at each launch) or a dashboard request for minutes
        kwargs["pool_pre_ping"] = True
        kwargs["connect_args"] = libpq_deadlines(url)
    for attempt in range(1, 6):
        try:
            with schema_lock(url):
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except sqlalchemy.exc.DBAPIError as exc:
            if attempt == 5 or not _created_meanwhile(exc):
                raise
            log.info("Optuna's schema was being created by another process: trying again (%s)", exc.orig)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def _created_meanwhile(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(
        s in text for s in ("already exists", "unique constraint", "duplicate key", "database is locked")
    )


def record_name(study_id: int) -> str:
    return f"autotuner-study-{study_id}"


def distributions(space: SearchSpace, points: list[InProcPoint]) -> dict[str, BaseDistribution]:
    dists: dict[str, BaseDistribution] = {}
    for name, dim in space.env_dims().items():
        if isinstance(dim, IntRange):
            dists[name] = IntDistribution(dim.low, dim.high, log=dim.log, step=dim.step or 1)
        else:
            dists[name] = CategoricalDistribution(list(dim))
    dists[PRECISION] = CategoricalDistribution([f"{f}/{b}" for f, b in space.precisions])
    dists["batch_size"] = CategoricalDistribution(list(space.batch_sizes))
    dists["sharding"] = CategoricalDistribution(list(space.sharding))
    dists["num_threads"] = CategoricalDistribution(list(space.num_threads))
    pipelines = list(dict.fromkeys(p.pipeline for p in points))
    if len(pipelines) > 1:  # a dimension only where there is a choice (keeps older studies' draws)
        dists["pipeline"] = CategoricalDistribution(pipelines)
    return dists


def sampler(ctx: StudyContext) -> optuna.samplers.BaseSampler:
    if ctx.settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=ctx.settings.seed)
    # Multivariate: precision and batch size interact (bytes on the wire = both).
    return optuna.samplers.TPESampler(
        seed=ctx.settings.seed, multivariate=True, n_startup_trials=max(4, len(ctx.points) // 8)
    )


def _inside(dist: BaseDistribution, value: Any) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    assert isinstance(dist, IntDistribution)
    return isinstance(value, int) and dist.low <= value <= dist.high and (value - dist.low) % dist.step == 0


def quant_error(row: Candidate) -> float:
    values = [v for v in (row.quant_error_fwd, row.quant_error_bwd) if v is not None]
    return max(values, default=0.0)


class Search:
    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx
        self.dists = distributions(ctx.space, ctx.points)
        self.memory = optuna.create_study(direction="maximize", sampler=sampler(ctx))
        self.record = optuna.create_study(
            storage=optuna_storage(ctx.store.url), study_name=record_name(ctx.study_id),
            direction="maximize", sampler=optuna.samplers.RandomSampler(), load_if_exists=True,
        )  # fmt: skip
        self._pending: dict[int, optuna.trial.Trial] = {}  # asked in memory, waiting for a measurement
        self.measured: dict[str, dict[str, Candidate]] = {}  # env hash -> point key -> row
        self._recorded = self._catch_up()

    def _catch_up(self) -> int:
        """Learn every measured search candidate; give the record the trials it misses (a crash
        between our write and Optuna's, or a launch a restart collected before any search ran)."""
        recorded = len(self.record.get_trials(deepcopy=False))
        rows = self.ctx.store.candidates(self.ctx.study_id, kinds=[LaunchKind.SEARCH])
        numbered = sorted(
            (r for r in rows if r.optuna_number is not None), key=lambda r: r.optuna_number or 0
        )
        for row in rows:
            self._learn(row)
            self.ctx.lease.beat()  # a long history takes a while to learn: the lease must not lapse meanwhile
        for row in numbered:
            if (row.optuna_number or 0) >= recorded:
                self._write(row)
                self.ctx.lease.beat()
        self._recorded = max([recorded, *((r.optuna_number or 0) + 1 for r in numbered)])
        for row in rows:
            if row.optuna_number is None:
                self._write(self.ctx.store.update_candidate(row.id, optuna_number=self.claim_number()))
        return self._recorded

    # ------------------------------------------------------------------ asking

    def ask(self, env_params: dict[str, Any] | None = None) -> optuna.trial.Trial:
        """A proposal; with `env_params`, one at that env point (the in-process dimensions sampled)."""
        if env_params is not None:
            self.memory.enqueue_trial(env_params, skip_if_exists=False)
        trial = self.memory.ask(self.dists)
        self._pending[trial.number] = trial
        return trial

    def env_of(self, params: dict[str, Any]) -> dict[str, str]:
        env = to_env_strings({k: v for k, v in params.items() if k not in INPROC_PARAMS})
        return {**self.ctx.space.fixed_env, **env}

    def point_of(self, params: dict[str, Any]) -> InProcPoint:
        fwd, bwd = params[PRECISION].split("/")
        pipeline = params.get("pipeline", self.ctx.baseline_point.pipeline)
        return InProcPoint(
            fwd, bwd, params["batch_size"], params["sharding"], params["num_threads"], pipeline
        )

    def measured_at(self, env: dict[str, str]) -> dict[str, Candidate]:
        return self.measured.get(env_hash(env), {})

    # ------------------------------------------------------------------ answering

    def skip(self, trial: optuna.trial.Trial, reason: str) -> None:
        """A proposal that is never launched (breaks a constraint, or crashed before)."""
        trial.set_user_attr("skipped", reason)
        self._tell(trial.number, None)

    def answer(self, number: int, row: Candidate | None) -> None:
        """An echo: a proposal answered with what was measured already (memory only)."""
        self._tell(number, row)

    def claim_number(self) -> int:
        """The record's number for the next measured search candidate (its `optuna_number`)."""
        number = self._recorded
        self._recorded += 1
        return number

    def learn(self, rows: list[Candidate], asked: list[int | None]) -> None:
        """Measured search candidates: into memory (answering the proposal that asked for each, if
        any) and into the record, in `optuna_number` order."""
        for row, number in zip(rows, asked, strict=True):
            if row.kind != LaunchKind.SEARCH:
                continue
            if number is not None and number in self._pending:
                self._tell(number, row)
                self._remember(row)
            else:
                self._learn(row)
            if row.optuna_number is not None:
                self._write(row)

    def _tell(self, number: int, row: Candidate | None) -> None:
        trial = self._pending.pop(number, None)
        if trial is None:
            return  # answered already
        if row is None or row.state == CandidateState.FAILED or row.samples_per_s is None:
            self.memory.tell(trial, state=TrialState.FAIL)
            return
        # Accuracy guardrail: a codec whose error exceeds the tolerance is infeasible for the sampler.
        trial.set_constraint("quant_error", quant_error(row) - self.ctx.space.max_quant_error)
        self.memory.tell(trial, row.samples_per_s)

    def _learn(self, row: Candidate) -> None:
        frozen = self.frozen(row)
        if frozen is not None:
            self.memory.add_trial(frozen)
        self._remember(row)

    def _remember(self, row: Candidate) -> None:
        self.measured.setdefault(env_hash(row.env), {})[point_of(row).key()] = row

    def _write(self, row: Candidate) -> None:
        frozen = self.frozen(row)
        if frozen is not None:
            self.record.add_trial(frozen)

    # ------------------------------------------------------------------ rows as trials

    def params_of(self, row: Candidate) -> dict[str, Any] | None:
        """The Optuna parameters of a measured row (None when the row lies outside this space)."""
        params: dict[str, Any] = {}
        for name, dim in self.ctx.space.env_dims().items():
            raw = row.env.get(name)
            if isinstance(dim, IntRange):
                if raw is None:
                    return None
                params[name] = int(raw)
                continue
            choice = [v for v in dim if (None if v is None else str(v)) == raw]
            if not choice:
                return None
            params[name] = choice[0]
        params.update({PRECISION: f"{row.fwd_precision}/{row.bwd_precision}", "batch_size": row.batch_size,
                       "sharding": row.sharding, "num_threads": row.num_threads})  # fmt: skip
        if "pipeline" in self.dists:
            params["pipeline"] = row.pipeline
        return params if all(_inside(self.dists[k], v) for k, v in params.items()) else None

    def frozen(self, row: Candidate) -> FrozenTrial | None:
        params = self.params_of(row)
        if params is None:
            return None
        dists = {k: self.dists[k] for k in params}
        attrs = {"candidate_id": row.id}
        if row.state == CandidateState.FAILED or row.samples_per_s is None:
            return create_trial(state=TrialState.FAIL, params=params, distributions=dists, user_attrs=attrs)
        return create_trial(value=row.samples_per_s, params=params, distributions=dists, user_attrs=attrs,
                            constraints={"quant_error": quant_error(row) - self.ctx.space.max_quant_error})  # fmt: skip
