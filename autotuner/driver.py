"""The study driver: Optuna ask/tell over launches, every step persisted so a killed driver resumes.

One launch = one process environment. Optuna proposes the launch-level point (NCCL / EFA
variables); the in-process dimensions (precision, batch size, sharding, threads) are measured as
candidates of that launch. Every measured candidate becomes an Optuna trial and a row in our store.
Order of a study: baseline (no overrides, fp32, today's batch) -> search launches until the budget
-> the finalist confirmed against the baseline in interleaved launches -> a published config.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotuner.executors import Executor, LaunchRequest, LaunchState, Outcome
from autotuner.space import InProcPoint, IntRange, SearchSpace, load_space, to_env_strings
from autotuner.stats import paired_speedup
from autotuner.store import Candidate, Launch, Store, Study, env_hash, utcnow
from autotuner.study import StudySettings, baseline_batch, default_data_dir
from trials.spec import WorkloadSpec, parse_spec, parse_workload

log = logging.getLogger("autotuner.driver")
optuna.logging.set_verbosity(optuna.logging.WARNING)

# A study's runner renews its lease every HEARTBEAT_EVERY_S; a runner that stops (killed, partitioned)
# loses the study to another process once LEASE_S passes without a renewal.
LEASE_S = float(os.environ.get("AUTOTUNER_LEASE_S", "60"))
HEARTBEAT_EVERY_S = min(5.0, LEASE_S / 4)
PRECISION = "precision"  # Optuna param holding "fwd/bwd"
INPROC_PARAMS = (PRECISION, "batch_size", "sharding", "num_threads", "pipeline")


class StudyBusy(RuntimeError):
    """Another live process holds this study's lease."""


class StudyCancelled(RuntimeError):
    pass


@dataclass
class Progress:
    """Callbacks a front end (CLI progress bar, service log) may hook; all optional."""

    on_launch_start: Callable[[Launch], None] = lambda launch: None
    on_launch_end: Callable[[Launch, list[Candidate]], None] = lambda launch, rows: None
    on_phase: Callable[[str], None] = lambda phase: None


@dataclass
class Echo:
    """An Optuna trial that proposed a point already measured at this env (earlier, or earlier in
    the same launch): answered with that measurement instead of measuring it twice."""

    number: int
    row: Candidate | None = None  # measured by an earlier launch
    slot: int | None = None  # or: measured by this launch, candidate `slot`


@dataclass
class PlannedLaunch:
    env: dict[str, str]
    points: list[InProcPoint]
    trials: list[int | None]  # Optuna trial number answering each point
    kind: str = "search"
    echoes: list[Echo] = field(default_factory=list)
    nnodes: int | None = None  # None: the study's


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str | None) -> bool:
    """A lease holder on this host whose process is gone (SIGKILLed): no need to wait out its lease."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def point_of(candidate: Candidate | dict[str, Any]) -> InProcPoint:
    get = candidate.get if isinstance(candidate, dict) else lambda k: getattr(candidate, k)
    return InProcPoint(
        get("fwd_precision"),
        get("bwd_precision"),
        get("batch_size"),
        get("sharding"),
        get("num_threads"),
        get("pipeline"),
    )


class StudyDriver:
    def __init__(
        self,
        store: Store,
        study_id: int,
        executor: Executor,
        *,
        owner: str | None = None,
        progress: Progress | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.store = store
        self.executor = executor
        self.owner = owner or owner_id()
        self.progress = progress or Progress()
        self.poll_s = poll_s
        study = store.study(study_id)
        if study is None:
            raise LookupError(f"study {study_id} not found")
        self.study_id = study.id
        self.settings = StudySettings.model_validate(study.settings)
        self.space: SearchSpace = load_space(study.space)
        self.workload_obj = study.workload.spec
        self.workload: WorkloadSpec = parse_workload(self.workload_obj)
        self.cluster_id = study.cluster_id
        self.cluster_name = study.cluster.name
        self.workload_name = study.workload.name
        self.baseline_point = InProcPoint(
            "fp32",
            "fp32",
            baseline_batch(self.workload, self.space),
            self.workload.sharding,
            None,
            self.workload.default_pipeline,
        )
        # Every in-process point, a null pipeline resolved to the job's own: rows store what ran.
        self.points = self.space.inproc_points(self.workload.default_pipeline)
        self.workdir = Path(self.settings.workdir or default_data_dir() / "runs") / f"study-{study.id}"
        self._last_beat = 0.0
        self._rng = random.Random(self.settings.seed)

    # ------------------------------------------------------------------ Optuna

    def _distributions(self) -> dict[str, BaseDistribution]:
        dists: dict[str, BaseDistribution] = {}
        for name, dim in self.space.env_dims().items():
            if isinstance(dim, IntRange):
                dists[name] = IntDistribution(dim.low, dim.high, log=dim.log, step=dim.step or 1)
            else:
                dists[name] = CategoricalDistribution(list(dim))
        dists[PRECISION] = CategoricalDistribution([f"{f}/{b}" for f, b in self.space.precisions])
        dists["batch_size"] = CategoricalDistribution(list(self.space.batch_sizes))
        dists["sharding"] = CategoricalDistribution(list(self.space.sharding))
        dists["num_threads"] = CategoricalDistribution(list(self.space.num_threads))
        pipelines = list(dict.fromkeys(p.pipeline for p in self.points))
        if len(pipelines) > 1:  # a dimension only where there is a choice (keeps older studies' draws)
            dists["pipeline"] = CategoricalDistribution(pipelines)
        return dists

    def _optuna(self) -> optuna.Study:
        if self.settings.sampler == "random":
            sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler(seed=self.settings.seed)
        else:
            # Multivariate: precision and batch size interact (bytes on the wire = both).
            sampler = optuna.samplers.TPESampler(
                seed=self.settings.seed,
                multivariate=True,
                n_startup_trials=max(4, len(self.points) // 8),
            )
        return optuna.create_study(
            storage=optuna_storage(self.store.url),
            study_name=f"autotuner-study-{self.study_id}",
            direction="maximize",
            sampler=sampler,
            load_if_exists=True,
        )

    def _env_of(self, params: dict[str, Any]) -> dict[str, str]:
        env = to_env_strings({k: v for k, v in params.items() if k not in INPROC_PARAMS})
        return {**self.space.fixed_env, **env}

    def _point_of(self, params: dict[str, Any]) -> InProcPoint:
        fwd, bwd = params[PRECISION].split("/")
        pipeline = params.get("pipeline", self.baseline_point.pipeline)
        return InProcPoint(
            fwd, bwd, params["batch_size"], params["sharding"], params["num_threads"], pipeline
        )

    # ------------------------------------------------------------------ lease and heartbeat

    def _beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_beat < HEARTBEAT_EVERY_S:
            return
        self._last_beat = now
        if not self.store.acquire_study(self.study_id, self.owner, LEASE_S):
            raise StudyBusy(f"lost the lease on study {self.study_id} to another process")
        study = self.store.study(self.study_id)
        if study is not None and study.state == "cancelled":
            raise StudyCancelled(f"study {self.study_id} was cancelled")

    # ------------------------------------------------------------------ the study

    def _acquire(self) -> None:
        if self.store.acquire_study(self.study_id, self.owner, LEASE_S):
            return
        holder = self.store.study(self.study_id).owner  # type: ignore[union-attr]
        if owner_is_dead(holder) and self.store.take_over_study(self.study_id, holder, self.owner, LEASE_S):  # type: ignore[arg-type]
            log.info("study %s: took over from %s, which is no longer running", self.study_id, holder)
            return
        raise StudyBusy(f"study {self.study_id} is being run by {holder}")

    def run(self) -> Study:
        self._acquire()
        try:
            study = self.store.study(self.study_id)
            assert study is not None
            if study.state in ("done", "failed", "cancelled"):
                return study
            if study.state == "queued":
                self.store.update_study(self.study_id, state="running", started_at=utcnow())
            ostudy = self._optuna()
            self._recover(ostudy)
            if self._baseline() is None:
                self.progress.on_phase("baseline")
                self._run_launch(
                    ostudy, PlannedLaunch({**self.space.fixed_env}, [self.baseline_point], [None], "baseline")
                )
                if self._baseline() is None:
                    return self._fail("the baseline (no overrides, fp32) did not run: see its launch log")
            self.progress.on_phase("search")
            while self._budget_left():
                plan = self._plan(ostudy)
                if plan is None:
                    break
                self._run_launch(ostudy, plan)
                self.store.update_study(self.study_id, launches_done=self._search_launches_done())
            self.progress.on_phase("confirm")
            self.store.update_study(self.study_id, state="confirming")
            return self._confirm_and_publish()
        except StudyCancelled:
            return self.store.update_study(self.study_id, finished_at=utcnow())
        except StudyBusy:
            raise
        except Exception as exc:
            log.exception("study %s failed", self.study_id)
            return self._fail(f"{type(exc).__name__}: {exc}")
        finally:
            self.store.release_study(self.study_id, self.owner)

    def _fail(self, error: str) -> Study:
        return self.store.update_study(self.study_id, state="failed", error=error, finished_at=utcnow())

    def _baseline(self) -> Candidate | None:
        rows = self.store.candidates(self.study_id, kinds=["baseline"], states=["ok"])
        return rows[0] if rows else None

    def _search_launches_done(self) -> int:
        return sum(
            1
            for launch in self.store.launches(self.study_id)
            if launch.kind == "search" and launch.attempt == 1
        )

    def _budget_left(self) -> bool:
        if self.settings.trials is not None and self._search_launches_done() >= self.settings.trials:
            return False
        if self.settings.time_budget_s is not None:
            study = self.store.study(self.study_id)
            assert study is not None and study.started_at is not None
            if (utcnow() - study.started_at).total_seconds() >= self.settings.time_budget_s:
                return False
        return True

    # ------------------------------------------------------------------ planning

    def _plan(self, ostudy: optuna.Study) -> PlannedLaunch | None:
        """Ask Optuna for the next launch: one env point, and up to k in-process points at it."""
        dists = self._distributions()
        quarantined = self.store.quarantined(self.cluster_id)
        all_points = self.points
        k = min(self.settings.candidates_per_launch or len(all_points), len(all_points))
        for _ in range(50):
            first = ostudy.ask(dists)
            env = self._env_of(first.params)
            problems = [p.message for p in self.space.check_env(env) if p.severity == "error"]
            reason = "; ".join(problems) or quarantined.get(env_hash(env))
            if reason:  # breaks a constraint, or crashed before on this cluster: never launched
                first.set_user_attr("skipped", reason)
                ostudy.tell(first, state=TrialState.FAIL)
                continue
            measured = self._measured_at(env)
            plan = PlannedLaunch(env, [], [])
            self._add_to_plan(plan, first, measured)
            env_params = {n: v for n, v in first.params.items() if n not in INPROC_PARAMS}
            for _ in range(4 * k):  # more in-process points at the same env, from the same sampler
                if len(plan.points) >= k:
                    break
                ostudy.enqueue_trial(env_params, skip_if_exists=False)
                self._add_to_plan(plan, ostudy.ask(dists), measured)
            # When the sampler keeps proposing what this env already has, fill up with unmeasured
            # points (recorded in the store; Optuna learns them as trials of this launch too).
            unmeasured = [p for p in all_points if p.key() not in measured and p not in plan.points]
            self._rng.shuffle(unmeasured)
            for point in unmeasured[: k - len(plan.points)]:
                plan.points.append(point)
                plan.trials.append(None)
            if plan.points:
                return plan
            self._answer_echoes(ostudy, plan, [])  # this env is exhausted: answer, ask again
        log.warning("study %s: 50 proposals in a row were invalid, quarantined or exhausted", self.study_id)
        return None

    def _add_to_plan(
        self, plan: PlannedLaunch, trial: optuna.trial.Trial, measured: dict[str, Candidate]
    ) -> None:
        point = self._point_of(trial.params)
        if point.key() in measured:
            plan.echoes.append(Echo(trial.number, row=measured[point.key()]))
        elif point in plan.points:
            plan.echoes.append(Echo(trial.number, slot=plan.points.index(point)))
        else:
            plan.points.append(point)
            plan.trials.append(trial.number)

    def _measured_at(self, env: dict[str, str]) -> dict[str, Candidate]:
        key = env_hash(env)
        return {
            point_of(row).key(): row
            for row in self.store.candidates(self.study_id, kinds=["search"])
            if env_hash(row.env) == key
        }

    def _answer_echoes(self, ostudy: optuna.Study, plan: PlannedLaunch, saved: list[Candidate]) -> None:
        for echo in plan.echoes:
            row = (
                echo.row
                if echo.row is not None
                else (saved[echo.slot] if echo.slot is not None and saved else None)
            )
            self._tell(ostudy, echo.number, _value(row), _quant(row))

    def _tell(self, ostudy: optuna.Study, number: int, value: float | None, quant: float | None) -> None:
        trial_id = ostudy._storage.get_trial_id_from_study_id_trial_number(ostudy._study_id, number)
        if ostudy._storage.get_trial(trial_id).state.is_finished():
            return  # already answered (a resumed launch)
        trial = optuna.trial.Trial(ostudy, trial_id)
        if value is None:
            ostudy.tell(trial, state=TrialState.FAIL)
            return
        # Accuracy guardrail: a codec whose error exceeds the tolerance is infeasible for the sampler.
        trial.set_constraint("quant_error", (quant or 0.0) - self.space.max_quant_error)
        ostudy.tell(trial, value)

    # ------------------------------------------------------------------ launching

    def _spec(self, points: list[InProcPoint]) -> dict[str, Any]:
        spec = {
            "workload": self.workload_obj,
            "candidates": [p.to_candidate() for p in points],
            "warmup": self.settings.warmup,
            "iterations": self.settings.iterations,
            "seed": self.settings.seed,
        }
        parse_spec(spec)  # the engine never launches a spec the trial would reject
        return spec

    def _request(self, launch: Launch) -> LaunchRequest:
        return LaunchRequest(
            name=f"s{self.study_id}-l{launch.seq}",
            spec=launch.spec,
            env=launch.env,
            workdir=self.workdir / f"launch-{launch.seq:04d}",
            nproc_per_node=self.settings.nproc_per_node,
            nnodes=launch.nnodes or self.settings.nnodes,
            timeout_s=self.settings.launch_timeout_s,
            options=self.settings.executor_options,
        )

    def _run_launch(
        self, ostudy: optuna.Study | None, plan: PlannedLaunch, attempt: int = 1
    ) -> list[Candidate]:
        self._beat(force=True)
        launch = self.store.add_launch(
            study_id=self.study_id,
            kind=plan.kind,
            env=plan.env,
            spec=self._spec(plan.points),
            executor=self.executor.name,
            optuna_trials=plan.trials,
            attempt=attempt,
            nnodes=plan.nnodes,
        )
        return self._execute(ostudy, launch, plan)

    def _execute(
        self, ostudy: optuna.Study | None, launch: Launch, plan: PlannedLaunch | None
    ) -> list[Candidate]:
        request = self._request(launch)
        dryrun = self.executor.dryrun(request)
        self.store.update_launch(
            launch.id, state="running", started_at=utcnow(), heartbeat_at=utcnow(), request=dryrun.rendered,
            workdir=str(request.workdir), log_path=str(request.log_path), result_path=str(request.result_path),
        )  # fmt: skip
        self.progress.on_launch_start(launch)
        self.executor.prepare(request)
        started = time.monotonic()
        backend_id = self.executor.schedule(dryrun)
        self.store.update_launch(launch.id, backend_id=backend_id)
        outcome = self._wait(backend_id, request, launch, started)
        outcome.request = dryrun.rendered
        return self._ingest(ostudy, launch, outcome, plan)

    def _wait(self, backend_id: str, request: LaunchRequest, launch: Launch, started: float) -> Outcome:
        def on_poll() -> None:
            if time.monotonic() - self._last_beat >= HEARTBEAT_EVERY_S:
                self.store.update_launch(launch.id, heartbeat_at=utcnow())
            try:
                self._beat()
            except StudyCancelled:
                self.executor.cancel(backend_id, request)
                self.store.update_launch(launch.id, state="cancelled", finished_at=utcnow())
                raise

        return self.executor.wait(backend_id, request, started=started, poll_s=self.poll_s, on_poll=on_poll)

    def _ingest(
        self, ostudy: optuna.Study | None, launch: Launch, outcome: Outcome, plan: PlannedLaunch | None
    ) -> list[Candidate]:
        """Record a finished launch: every candidate in our store, every Optuna trial answered."""
        result = outcome.result if outcome.state == LaunchState.SUCCEEDED else None
        spec_candidates = launch.spec["candidates"]
        rows = []
        for index, cand in enumerate(spec_candidates):
            measured = result["candidates"][index] if result else None
            rows.append(self._candidate_row(launch, index, cand, measured, outcome))
        saved = self.store.add_candidates(rows)
        summary = {k: v for k, v in (outcome.result or {}).items() if k != "candidates"} or None
        self.store.update_launch(
            launch.id,
            state=outcome.state.value,
            finished_at=utcnow(),
            summary=summary,
            error=outcome.reason or None,
            log_tail=outcome.log_tail or None,
        )
        if result is not None:
            self.store.update_fingerprint(self.cluster_id, fingerprint(result))
        elif launch.kind == "search" and outcome.state != LaunchState.CANCELLED:
            # Crashed, hung or failed to init: never launch this env config on this cluster again.
            self.store.quarantine(
                self.cluster_id, launch.env, f"{outcome.state.value}: {outcome.reason}", launch.id
            )
        if ostudy is not None:
            for number, row in zip(launch.optuna_trials, saved, strict=True):
                if number is not None:
                    self._tell(ostudy, number, _value(row), _quant(row))
            if plan is not None:
                self._answer_echoes(ostudy, plan, saved)
        self.progress.on_launch_end(launch, saved)
        return saved

    def _candidate_row(
        self,
        launch: Launch,
        index: int,
        cand: dict[str, Any],
        measured: dict[str, Any] | None,
        outcome: Outcome,
    ) -> dict[str, Any]:
        sharding = cand.get("sharding") or self.workload.sharding
        row: dict[str, Any] = {
            "study_id": self.study_id,
            "launch_id": launch.id,
            "index": index,
            "kind": launch.kind,
            "optuna_number": launch.optuna_trials[index] if index < len(launch.optuna_trials) else None,
            "env": launch.env,
            "fwd_precision": cand["fwd_precision"],
            "bwd_precision": cand["bwd_precision"],
            "batch_size": cand["batch_size"],
            "sharding": sharding,
            "num_threads": cand.get("num_threads"),
            "pipeline": cand.get("pipeline") or self.workload.default_pipeline,
        }
        if measured is None or measured.get("status") != "ok":
            error = (measured or {}).get("error") or f"launch {outcome.state.value}: {outcome.reason}"
            return {**row, "state": "failed", "error": error, "metrics": measured or {}}
        quant = measured.get("quant_error") or {}
        worst = max(v for v in (quant.get("fwd_rel_l2"), quant.get("bwd_rel_l2"), 0.0) if v is not None)
        feasible = worst <= self.space.max_quant_error
        return {
            **row,
            "state": "ok" if feasible else "infeasible",
            "error": None
            if feasible
            else f"quantization error {worst:.3g} > tolerance {self.space.max_quant_error}",
            "effective_fwd_precision": measured.get("effective_fwd_precision"),
            "effective_bwd_precision": measured.get("effective_bwd_precision"),
            "samples_per_s": measured["samples_per_s"],
            "iter_ms": measured["iter_ms"]["median"],
            "iter_cv": measured["iter_ms"]["cv"],
            "a2a_ms": measured["a2a_ms"]["median"],
            "a2a_bytes": measured["a2a_bytes_per_iter"],
            "busbw_gbps": measured["busbw_gbps"],
            "quant_error_fwd": quant.get("fwd_rel_l2"),
            "quant_error_bwd": quant.get("bwd_rel_l2"),
            "metrics": {k: v for k, v in measured.items() if k != "a2a_calls_by_rank"},
        }

    # ------------------------------------------------------------------ resuming

    def _recover(self, ostudy: optuna.Study) -> None:
        """Launches a previous driver left running: re-attach, collect, or fail and retry."""
        for launch in self.store.launches(self.study_id, states=["pending", "running"]):
            request = self._request(launch)
            if launch.backend_id:
                desc = self.executor.describe(launch.backend_id, request)
                # Queued (PENDING) and unreadable-right-now (UNKNOWN) launches are followed too:
                # retrying them would leave the original job to run later, unobserved.
                if (
                    desc.state in (LaunchState.RUNNING, LaunchState.PENDING, LaunchState.UNKNOWN)
                    or desc.state.is_terminal()
                ):
                    log.info(
                        "study %s: re-attaching launch %s (%s)", self.study_id, launch.seq, desc.state.value
                    )
                    started = time.monotonic() - (utcnow() - (launch.started_at or utcnow())).total_seconds()
                    outcome = self._wait(launch.backend_id, request, launch, started)
                    self._ingest(ostudy, launch, outcome, None)
                    continue
            reason = "interrupted: the process running the study stopped before this launch finished"
            self._ingest(ostudy if launch.attempt >= self.settings.max_attempts else None, launch,
                         Outcome(LaunchState.FAILED, launch.backend_id, None, reason), None)  # fmt: skip
            if launch.attempt < self.settings.max_attempts and launch.kind != "confirm":
                points = [point_of(c) for c in launch.spec["candidates"]]
                retry = self.store.add_launch(
                    study_id=self.study_id, kind=launch.kind, env=launch.env, spec=launch.spec,
                    executor=self.executor.name, optuna_trials=launch.optuna_trials, attempt=launch.attempt + 1,
                )  # fmt: skip
                self._execute(
                    ostudy, retry, PlannedLaunch(launch.env, points, launch.optuna_trials, launch.kind)
                )

    # ------------------------------------------------------------------ confirmation

    def _finalist(self) -> Candidate | None:
        rows = self.store.candidates(self.study_id, kinds=["search", "baseline"], states=["ok"],
                                     order_by="samples_per_s", descending=True, limit=1)  # fmt: skip
        return rows[0] if rows else None

    def _confirm_and_publish(self) -> Study:
        baseline = self._baseline()
        best = self._finalist()
        assert baseline is not None
        if best is None:
            best = baseline
        study = self.store.update_study(
            self.study_id, best_candidate_id=best.id, baseline_candidate_id=baseline.id
        )
        outcome: dict[str, Any] = dict(study.outcome or {})
        if "decision" not in outcome:  # a resumed study does not confirm or publish twice
            outcome.update(self._decide(best, baseline))
            chosen = self.store.candidate(outcome["chosen_candidate"])
            assert chosen is not None
            if self.settings.publish:
                config = self._publish(chosen, outcome)
                outcome["published_version"] = config.version
            self.store.update_study(self.study_id, outcome=outcome)
        if self.settings.scaling_nodes:
            chosen = self.store.candidate(outcome["chosen_candidate"])
            assert chosen is not None
            outcome["scaling"] = self._scaling(chosen, baseline)
        return self.store.update_study(self.study_id, state="done", outcome=outcome, finished_at=utcnow())

    def _decide(self, best: Candidate, baseline: Candidate) -> dict[str, Any]:
        """Confirm the finalist against the baseline; adopt it only if faster with 95% confidence."""
        rounds = self.settings.confirm_rounds
        tuned_runs, base_runs = (
            self._confirm(best, baseline, rounds) if rounds and best.id != baseline.id else ([], [])
        )
        outcome: dict[str, Any] = {"best_candidate": best.id, "baseline_candidate": baseline.id}
        if tuned_runs and base_runs:
            speedup = paired_speedup(tuned_runs, base_runs)
            outcome.update(speedup.as_dict())
            adopt = speedup.significant
            outcome["decision"] = (
                "tuned config is faster with 95% confidence: published"
                if adopt else "no significant gain over the baseline: published the baseline (no changes)"
            )  # fmt: skip
        else:
            adopt = best.id != baseline.id and rounds == 0
            outcome["speedup"] = (best.samples_per_s or 0) / (baseline.samples_per_s or 1)
            outcome["decision"] = "not confirmed (confirm_rounds=0 or the baseline was best)"
        outcome["chosen_candidate"] = best.id if adopt else baseline.id
        return outcome

    def _scaling(self, chosen: Candidate, baseline: Candidate) -> list[dict[str, Any]]:
        """Throughput of the published config and of the baseline at each node count, and the
        scaling factor (throughput at N / at the smallest N), as the published case reports it."""
        measured: dict[tuple[str, int], float] = {}
        for launch in self.store.launches(self.study_id):
            if launch.kind != "scaling" or launch.state != "succeeded":
                continue
            for row in self.store.candidates(self.study_id, launch_id=launch.id, states=["ok", "infeasible"]):
                same_as_baseline = (env_hash(row.env), point_of(row)) == (
                    env_hash(baseline.env),
                    point_of(baseline),
                )
                role = "baseline" if same_as_baseline else "tuned"
                measured[(role, launch.nnodes or self.settings.nnodes)] = row.samples_per_s or 0.0
        for nodes in self.settings.scaling_nodes:
            for role, row in (("baseline", baseline), ("tuned", chosen)):
                if (role, nodes) in measured or (role == "tuned" and chosen.id == baseline.id):
                    continue
                self._beat(force=True)
                plan = PlannedLaunch(row.env, [point_of(row)], [None], "scaling", nnodes=nodes)
                rows = self._run_launch(None, plan)
                if rows and rows[0].state != "failed":
                    measured[(role, nodes)] = rows[0].samples_per_s or 0.0
        if chosen.id == baseline.id:
            measured.update({("tuned", n): v for (r, n), v in list(measured.items()) if r == "baseline"})
        first = min(self.settings.scaling_nodes)
        curve = []
        for nodes in self.settings.scaling_nodes:
            point: dict[str, Any] = {"nodes": nodes}
            for role in ("baseline", "tuned"):
                value = measured.get((role, nodes))
                base = measured.get((role, first))
                point[f"{role}_samples_per_s"] = value
                point[f"{role}_scaling"] = value / base if value and base else None
            curve.append(point)
        return curve

    def _confirm(self, best: Candidate, baseline: Candidate, rounds: int) -> tuple[list[float], list[float]]:
        """Interleave best and baseline (best, baseline, best, ...) so slow drift of a shared machine
        hits both alike; each round's pair gives one ratio. A resumed study keeps finished rounds."""
        best_key = (env_hash(best.env), point_of(best).key())

        def measured() -> tuple[list[float], list[float]]:
            tuned, base = [], []
            for row in self.store.candidates(self.study_id, kinds=["confirm"], states=["ok", "infeasible"]):
                is_best = (env_hash(row.env), point_of(row).key()) == best_key
                (tuned if is_best else base).append(row.samples_per_s or 0.0)
            return tuned, base

        same_env = env_hash(best.env) == env_hash(baseline.env)
        for _ in range(3 * rounds):  # failed confirmation launches are retried, within reason
            tuned, base = measured()
            if min(len(tuned), len(base)) >= rounds:
                break
            if same_env:  # one process can measure both, alternating, in a single launch
                pairs = rounds - min(len(tuned), len(base))
                plan = PlannedLaunch(
                    best.env, [point_of(best), point_of(baseline)] * pairs, [None] * 2 * pairs, "confirm"
                )
            else:
                row = best if len(tuned) <= len(base) else baseline
                plan = PlannedLaunch(row.env, [point_of(row)], [None], "confirm")
            self._run_launch(None, plan)
        tuned, base = measured()
        n = min(len(tuned), len(base), rounds)
        return tuned[:n], base[:n]

    def _publish(self, chosen: Candidate, outcome: dict[str, Any]):  # noqa: ANN202
        evidence = {
            **{k: outcome[k] for k in ("speedup", "ci_low", "ci_high", "confidence", "rounds",
                                       "tuned_samples_per_s", "baseline_samples_per_s", "significant") if k in outcome},
            "study_id": self.study_id,
            "candidate_id": chosen.id,
            "decision": outcome["decision"],
            "quant_error": {"fwd": chosen.quant_error_fwd, "bwd": chosen.quant_error_bwd},
            "effective_precision": [chosen.effective_fwd_precision, chosen.effective_bwd_precision],
            "measured_on": self.executor.name,
        }  # fmt: skip
        if self.settings.fabric:
            evidence["emulation"] = (
                f"emulated fabric at {self.settings.fabric}: not a real cluster measurement"
            )
        return self.store.publish_config(
            cluster=self.cluster_name,
            workload=self.workload_name,
            nodes=self.settings.nnodes,
            env=chosen.env,
            fwd_precision=chosen.fwd_precision,
            bwd_precision=chosen.bwd_precision,
            batch_size=chosen.batch_size,
            sharding=chosen.sharding,
            num_threads=chosen.num_threads,
            pipeline=chosen.pipeline,
            evidence=evidence,
            study_id=self.study_id,
        )


def _value(row: Candidate | None) -> float | None:
    """The objective of a measured candidate (None: failed, told to Optuna as FAIL)."""
    return row.samples_per_s if row is not None and row.state != "failed" else None


def _quant(row: Candidate | None) -> float | None:
    if row is None:
        return None
    values = [v for v in (row.quant_error_fwd, row.quant_error_bwd) if v is not None]
    return max(values) if values else None


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def fingerprint(result: dict[str, Any]) -> dict[str, Any]:
    """What identifies a cluster's comm stack: a config tuned on one may not hold on another."""
    effective = result.get("nccl_effective") or {}
    env = result.get("env") or {}
    return {
        "device": result.get("device"),
        "device_name": result.get("device_name"),
        "backend": result.get("backend"),
        "nnodes": result.get("nnodes"),
        "world_size": result.get("world_size"),
        "versions": result.get("versions"),
        "network": effective.get("network"),
        "ofi_plugin": effective.get("ofi_plugin_version"),
        "efa": effective.get("ofi_provider") == "efa" or env.get("FI_PROVIDER") == "efa",
    }
