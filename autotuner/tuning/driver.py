"""The study driver: a short loop over phases, every step persisted so a killed driver resumes.

A study, phase by phase (each a module of its own, with its tests):

 1. recover   what a previous runner left running: followed to its end, or retried (recover.py)
 2. baseline  the job's own settings: its batch, comm precision and pipeline, no env overrides
 3. inert     the knobs that cannot act where the baseline ran, left out of the search (inert.py)
 4. search    launches until the budget: plan.py proposes, launch.py runs, ingest.py records (search.py)
 5. confirm   the finalist against the baseline in interleaved launches (confirm.py, pairs.py)
 6. ladder    baseline to finalist one knob group at a time, steps without a measurable gain dropped
              (ladder.py)
 7. quality   the convergence check: paired model seeds, a verdict on each training knob (quality.py)
 8. claim     what survived 6 and 7, confirmed again when something was dropped, and the decision
              (claim.py; else the baseline is published: confirm.baseline_published)
 9. publish   the versioned config with its evidence (publish.py)
10. scaling   optionally, the published config and the baseline at each node count (scaling.py)

Phases 5 to 9 each run once (a resumed study does none twice): what they decide is an `Outcome`
(outcome.py), stored in the study's row.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from autotuner.executors import Executor
from autotuner.executors.results import clip
from autotuner.names import BadName, check_name
from autotuner.store import (
    TERMINAL,
    Candidate,
    CandidateState,
    LaunchKind,
    Store,
    Study,
    StudyState,
    unreadable_columns,
)
from autotuner.tuning.claim import honest_claim
from autotuner.tuning.confirm import baseline_published, decide, publishes, unpublished
from autotuner.tuning.context import Progress, StudyContext
from autotuner.tuning.inert import Where, inert_variables, searched
from autotuner.tuning.launch import BASELINE, run_launch, unmeasured, unspent
from autotuner.tuning.lease import (
    Lease,
    StoreUnavailable,
    StudyBusy,
    StudyCancelled,
    WorkdirFull,
    store_unavailable,
)
from autotuner.tuning.outcome import Outcome
from autotuner.tuning.pairs import Setting
from autotuner.tuning.plan import PlannedLaunch, plan_launch
from autotuner.tuning.publish import publish
from autotuner.tuning.recover import recover, stop_leftovers
from autotuner.tuning.scaling import scaling_curve
from autotuner.tuning.search import Search
from autotuner.tuning.settings import StudySettings

log = logging.getLogger("autotuner.tuning")


# What a study's stored rows raise when they no longer describe a study that can run (settings or space
# that fail validation, an executor that cannot be built from them): that study fails, the others run.
UNRUNNABLE = (ValueError, TypeError, KeyError, AttributeError, OSError)


def driver_for(store: Store, study: Study, make_executor: Callable[[StudySettings], Executor],
               **kwargs: Any) -> StudyDriver:  # fmt: skip
    """The driver of a stored study; UNRUNNABLE if its rows cannot give one (see cannot_run)."""
    if bad := unreadable_columns(study):
        raise ValueError(f"its stored {bad} cannot be read")
    return StudyDriver(store, study.id, make_executor(StudySettings.model_validate(study.settings)), **kwargs)


def cannot_run(store: Store, study_id: int, exc: BaseException) -> str:
    """Fail a study whose stored rows cannot give a driver, with the reason, so no runner picks it again."""
    why = clip(f"this study cannot run: {type(exc).__name__}: {exc}")
    try:  # not over a cancel that came first
        store.move_study(study_id, StudyState.FAILED, error=why, finished_at=store.now())
    except Exception:  # the store itself is in trouble: the next tick tries again
        log.exception("study %s: could not record that it cannot run", study_id)
    return why


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
        self.lease = Lease(store, study_id, owner)
        self.ctx = StudyContext.load(store, study_id, executor, self.lease, progress=progress or Progress(),
                                     poll_s=poll_s)  # fmt: skip
        self.store = store
        self.study_id = self.ctx.study_id
        self._rng = random.Random(self.ctx.settings.seed)

    def run(self) -> Study:
        self.lease.acquire()
        try:
            study = self.store.study(self.study_id)
            assert study is not None
            if study.state in TERMINAL:
                return study
            bad = _bad_name(study)
            if bad:  # stored by an older version, which let a trailing newline through
                return self._fail(f"{bad}: this study cannot run (its config could not be served)")
            if study.state == StudyState.QUEUED:
                self._move(StudyState.RUNNING, started_at=self.store.now())  # the budget's clock
            log.info("study %s (%s): %s by %s", self.study_id, study.name,
                     "started" if study.state == StudyState.QUEUED else f"resumed ({study.state})", self.lease.owner)  # fmt: skip
            recover(self.ctx)  # what a previous runner left running: followed, or retried
            if not self._baseline():
                return self._fail(unmeasured(self.store, self.study_id, LaunchKind.BASELINE, BASELINE))
            self._settle_inert()
            self._search(Search(self.ctx))
            return self._conclude()
        except StudyCancelled:
            log.info("study %s: cancelled; it publishes nothing", self.study_id)
            return self.store.update_study(self.study_id, finished_at=self.store.now())  # its state says so
        except (StudyBusy, StoreUnavailable, WorkdirFull):  # left running, resumed: none says it failed
            raise
        except Exception as exc:
            if store_unavailable(exc):  # a store away for a while must not end a study for good
                raise StoreUnavailable(f"study {self.study_id}: the store did not answer "
                                       f"({type(exc).__name__}: {exc}); it stays {StudyState.RUNNING}, resumed "
                                       "when the store answers") from exc  # fmt: skip
            log.exception("study %s failed", self.study_id)
            return self._fail(f"{type(exc).__name__}: {exc}")
        finally:
            try:
                self.lease.release()
            except Exception as exc:  # the store still away: the lease lapses on its own
                if not store_unavailable(exc):
                    raise

    def stop_leftovers(self) -> int:
        """An ended study's launches still pending or running, cancelled under its lease; how many."""
        self.lease.acquire()
        try:
            return stop_leftovers(self.ctx)
        finally:
            self.lease.release()

    def _baseline(self) -> bool:
        """The job's own settings, measured first."""
        if self.ctx.baseline() is None:
            self.ctx.progress.on_phase("baseline")
            plan = PlannedLaunch.of(self.ctx.space.fixed_env, [self.ctx.baseline_point], LaunchKind.BASELINE)
            run_launch(self.ctx, plan, None)
        return self.ctx.baseline() is not None

    def _settle_inert(self) -> None:
        """What the baseline's report says of where launches run: the knobs that cannot act there
        are left out of the search (and of what is published)."""
        baseline = self.ctx.baseline()
        study = self.store.study(self.study_id)
        assert baseline is not None and study is not None
        launch = self.store.launch(baseline.launch_id)
        names = [*self.ctx.space.env, *self.ctx.space.fixed_env]
        where = Where.of_result(launch.summary or {} if launch is not None else {})
        inert = {**(study.inert or {}), **inert_variables(names, where)}
        if inert != (study.inert or {}):
            self.store.update_study(self.study_id, inert=inert)
        self.ctx.inert = inert
        self.ctx.space = searched(self.ctx.space, inert)

    def _search(self, search: Search) -> None:
        self.ctx.progress.on_phase("search")
        # A search launch recover() followed to its end counts too: the budget spent, the last one's
        # count was never written (`autotuner studies` read 1/2 for a done study).
        self.store.update_study(self.study_id, launches_done=self._search_launches_done())
        while self._budget_left():
            plan = plan_launch(self.ctx, search, self._rng)
            if plan is None:
                break
            run_launch(self.ctx, plan, search)
            self.store.update_study(self.study_id, launches_done=self._search_launches_done())

    def _conclude(self) -> Study:
        """Confirm, climb the ladder, check quality, publish (each once: a resumed study does none
        twice), then the scaling curve."""
        self.ctx.progress.on_phase("confirm")
        self._move(StudyState.CONFIRMING)
        baseline = self.ctx.baseline()
        assert baseline is not None
        best = self.ctx.finalist() or baseline
        if Setting.of(best) == Setting.of(baseline):  # the search found the job's own setting
            best = baseline
        study = self.store.update_study(
            self.study_id, best_candidate_id=best.id, baseline_candidate_id=baseline.id
        )
        outcome = Outcome.load(study.outcome) or Outcome()
        if outcome.decision is None:
            outcome = self._claim(best, baseline)
            self.store.update_study(self.study_id, outcome=outcome.dump())
        if self.ctx.settings.scaling_nodes:
            outcome.scaling = scaling_curve(self.ctx, self._chosen(outcome), baseline)
        done = self._move(StudyState.DONE, outcome=outcome.dump(), finished_at=self.store.now())
        log.info("study %s done: %s", self.study_id, outcome.decision or "nothing decided")
        return done

    def _claim(self, best: Candidate, baseline: Candidate) -> Outcome:
        """Confirm, then (a finalist adopted) climb the ladder and check quality, then publish."""
        searched = (
            None
            if self.ctx.settings.trials == 0
            else bool(
                self.store.candidates(
                    self.study_id, kinds=[LaunchKind.SEARCH], states=[CandidateState.OK], limit=1
                )
            )
        )
        outcome = decide(self.ctx, best, baseline, searched=searched)
        if outcome.chosen_candidate == best.id != baseline.id:
            self.ctx.progress.on_phase("ladder")
            outcome = honest_claim(self.ctx, baseline, best, outcome)
        if outcome.chosen_candidate == baseline.id != best.id:
            outcome = baseline_published(outcome)
        outcome.inert = dict(self.ctx.inert)
        if self.ctx.settings.publish and publishes(outcome):
            self.ctx.lease.beat(force=True)  # a study cancelled by now publishes nothing
            # A runner stopped between publishing and storing the outcome: resumed, it publishes once.
            earlier = self.store.configs_of_study(self.study_id)
            chosen = earlier[0] if earlier else publish(self.ctx, self._chosen(outcome), outcome)
            outcome.published_version = chosen.version
        elif not self.ctx.settings.publish:
            outcome.decision = unpublished(outcome.decision or "")
        return outcome

    def _chosen(self, outcome: Outcome) -> Candidate:
        chosen = (
            self.store.candidate(outcome.chosen_candidate) if outcome.chosen_candidate is not None else None
        )
        assert chosen is not None
        return chosen

    def _fail(self, error: str) -> Study:
        log.warning("study %s failed: %s", self.study_id, error)
        failed = self.store.move_study(
            self.study_id, StudyState.FAILED, error=error, finished_at=self.store.now()
        )
        return failed or self.store.update_study(
            self.study_id, finished_at=self.store.now()
        )  # cancelled first

    def _move(self, state: StudyState, **fields: Any) -> Study:
        """The study's next state, unless a cancel came first: then StudyCancelled, as at a heartbeat."""
        moved = self.store.move_study(self.study_id, state, **fields)
        if moved is None:
            raise StudyCancelled(f"study {self.study_id} was cancelled")
        return moved

    def _search_launches_done(self) -> int:
        # Not one Ctrl-C or SIGTERM cancelled, nor one a full disk kept from being submitted: it measured
        # nothing and is never retried (one a SIGKILL left is, as attempt 2); counted, each stop of
        # `autotuner tune` cost the study a search launch. A launch counts at its first attempt; an
        # unspent end of any attempt (its last: none follows) takes it back (else a retry stopped so left
        # its first attempt counted, and the search one launch short).
        search = [launch for launch in self.store.launches(self.study_id) if launch.kind == LaunchKind.SEARCH]
        first, stopped = sum(x.attempt == 1 for x in search), sum(unspent(x) for x in search)
        return first - stopped

    def _budget_left(self) -> bool:
        settings = self.ctx.settings
        if settings.trials is not None and self._search_launches_done() >= settings.trials:
            return False
        if settings.time_budget_s is not None:
            study = self.store.study(self.study_id)
            assert study is not None and study.started_at is not None
            if (self.store.now() - study.started_at).total_seconds() >= settings.time_budget_s:
                return False
        return True


def _bad_name(study: Study) -> str | None:
    """Why a study's names cannot be served, or None."""
    try:
        check_name("cluster", study.cluster.name)
        check_name("workload", study.workload.name)
        check_name("study", study.name)
    except BadName as exc:
        return str(exc)
    return None
