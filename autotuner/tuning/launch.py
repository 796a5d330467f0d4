"""Running a planned launch: recorded before it starts, submitted (when the cluster takes it: a launch
refused for now waits its turn), followed to its end with the lease renewed meanwhile, then ingested. A
cancel seen while waiting stops the launch on the cluster."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from autotuner.executors import AppDryrun, Description, Executor, LaunchRequest, Outcome
from autotuner.executors.base import RESULT_UNWRITTEN, LaunchState, SubmitLater, also_left
from autotuner.executors.results import clip
from autotuner.store import Candidate, Launch, LaunchKind, Store
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ingest import ingest
from autotuner.tuning.lease import (
    FULL_DISK,
    StoreUnavailable,
    StudyBusy,
    StudyCancelled,
    WorkdirFull,
    disk_full,
    store_unavailable,
)
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.search import Search
from autotuner.tuning.settings import StudySettings
from trials.spec import parse_spec

log = logging.getLogger("autotuner.tuning")


def spec_of(ctx: StudyContext, plan: PlannedLaunch) -> dict[str, Any]:
    spec = {
        "workload": ctx.workload_obj,
        "candidates": [
            {**p.to_candidate(), **(plan.extras[i] if plan.extras else {})} for i, p in enumerate(plan.points)
        ],
        "warmup": ctx.settings.warmup,
        "iterations": ctx.settings.iterations,
        "seed": ctx.settings.seed,
    }
    if plan.tag:
        spec["extra"] = {"tag": plan.tag}
    if plan.quality is not None:
        spec["quality"] = plan.quality
    parse_spec(spec)  # the engine never launches a spec the trial would reject
    return spec


def request_of(ctx: StudyContext, launch: Launch) -> LaunchRequest:
    return launch_request(ctx.study_id, ctx.settings, launch)


def launch_request(study_id: int, settings: StudySettings, launch: Launch) -> LaunchRequest:
    """What a stored launch was submitted as: the request its executor follows, collects and cancels."""
    return LaunchRequest(
        name=f"s{study_id}-l{launch.seq}",
        spec=launch.spec,
        env=launch.env,
        workdir=settings.study_dir(study_id) / f"launch-{launch.seq:04d}",
        nproc_per_node=settings.nproc_per_node,
        nnodes=launch.nnodes or settings.nnodes,
        timeout_s=settings.launch_timeout_s,
        options=settings.executor_options,
    )


def run_launch(
    ctx: StudyContext, plan: PlannedLaunch, search: Search | None, attempt: int = 1
) -> list[Candidate]:
    """Record, run and ingest one launch; returns its candidates as stored."""
    ctx.lease.beat(force=True)
    launch = ctx.store.add_launch(study_id=ctx.study_id, kind=plan.kind, env=plan.env, spec=spec_of(ctx, plan),
                                  executor=ctx.executor.name, attempt=attempt, nnodes=plan.nnodes)  # fmt: skip
    return execute(ctx, launch, plan, search)


def execute(ctx: StudyContext, launch: Launch, plan: PlannedLaunch, search: Search | None) -> list[Candidate]:
    request = request_of(ctx, launch)
    now = ctx.store.now()  # the database's clock: every replica's starts, heartbeats and ends alike
    ctx.store.update_launch(launch.id, state=LaunchState.RUNNING, started_at=now, heartbeat_at=now,
                            workdir=str(request.workdir), log_path=str(request.log_path),
                            result_path=str(request.result_path))  # fmt: skip
    ctx.progress.on_launch_start(launch)
    started = time.monotonic()
    stage = SUBMITTING
    backend_id: str | None = None
    try:
        submitted = submit_in_turn(ctx, request, launch, started)
        if isinstance(submitted, Outcome):  # its turn did not come within queue_timeout_s
            stage = RECORDING
            return ingest(ctx, launch, submitted, plan, search)
        backend_id, dryrun, waited = submitted
        record_backend_id(ctx, launch, request, backend_id, dryrun.rendered)
        stage = FOLLOWING
        if waited:  # its row says what it waited on: the first poll says what it waits on now, or nothing
            launch = ctx.store.launch(launch.id) or launch
        outcome = wait(ctx, backend_id, request, launch, started, queued=waited)
        outcome.request = dryrun.rendered
        stage = RECORDING
        rows = ingest(ctx, launch, outcome, plan, search)
        if not tried_again(ctx, launch, outcome):
            return rows
    except (StudyCancelled, StudyBusy):  # cancelled: recorded so; lost: the lease's new holder follows it
        raise
    except KeyboardInterrupt:  # Ctrl-C of `autotuner tune`: its trial ran on, unfollowed, beside the next
        if stage != RECORDING:  # else it ended, and its row says how (interrupted while it was submitted,
            # submit_in_turn gave it up: what sbatch queued meanwhile is cancelled there)
            cancel_interrupted(ctx, launch, backend_id, request)
        raise
    except Exception as exc:  # the study fails with it (but a store away, a full disk); its launch must
        # not read "running" for ever
        if store_unavailable(exc):  # nothing can be written; the launch runs on, followed again on resume
            raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}: {exc}") from exc
        if stage == SUBMITTING and (full := disk_full(exc)) is not None:
            raise not_submitted(ctx, launch, full, exc) from exc
        # nobody will follow it now: it must not run on beside the next launch
        left = _cancel_quietly(ctx, backend_id, request) if stage == FOLLOWING else None
        ctx.store.update_launch(launch.id, state=LaunchState.FAILED, finished_at=ctx.store.now(),
                                error=clip(also_left(f"{stage}: {type(exc).__name__}: {exc}", left)),
                                left_running=left)  # fmt: skip
        raise
    said = (f"launch {launch.seq} {launch.kind} was cancelled ({outcome.reason or 'by its cluster'}): trying "
            f"it again (attempt {launch.attempt + 1} of {ctx.settings.max_attempts})")  # fmt: skip
    log.info("study %s: %s", ctx.study_id, said)
    ctx.progress.on_note(said)
    return run_again(ctx, launch, plan, search)


def run_again(
    ctx: StudyContext, launch: Launch, plan: PlannedLaunch, search: Search | None
) -> list[Candidate]:
    """`launch` run again, as its next attempt: its stored spec and node count (a plan rebuilt on resume
    knows only its env and points), `plan` saying what the search asked of it."""
    ctx.lease.beat(force=True)
    retry = ctx.store.add_launch(study_id=ctx.study_id, kind=launch.kind, env=launch.env, spec=launch.spec,
                                 executor=ctx.executor.name, attempt=launch.attempt + 1, nnodes=launch.nnodes)  # fmt: skip
    return execute(ctx, retry, plan, search)


# A launch cancelled through no fault of its config (preempted, a node lost, srun unable to reach the
# controller, scancel by hand) measured nothing: retried at once, as a resumed study retries one left
# behind. A baseline so cancelled failed its study for good; a search launch spent its budget on nothing.
# Comparisons (confirm, ladder, re-validation) launch their missing rounds again themselves.
RETRIED_AT_ONCE = (LaunchKind.BASELINE, LaunchKind.SEARCH, LaunchKind.QUALITY, LaunchKind.SCALING)


def tried_again(ctx: StudyContext, launch: Launch, outcome: Outcome) -> bool:
    """Whether a launch that ended so is run again now: cancelled, not given up (its queue_timeout_s,
    an unreadable state: the cluster's answer to that is not to queue it again), not for a full disk,
    attempts left."""
    return (
        outcome.state == LaunchState.CANCELLED
        and not outcome.given_up
        and not outcome.reason.startswith(RESULT_UNWRITTEN)
        and launch.kind in RETRIED_AT_ONCE
        and launch.attempt < ctx.settings.max_attempts
    )


SUBMITTING = "it could not be submitted"
FOLLOWING = "it could not be followed"
RECORDING = "its result could not be recorded"
NOT_SUBMITTED = "not submitted yet"
CTRL_C = "interrupted (Ctrl-C): cancelled with its launcher"  # measured nothing: spends no search launch
# A submit that a full disk (or quota) under the workdir refused: the same.
WORKDIR_FULL = tuple(f"not submitted: {words} under " for words in FULL_DISK.values())


def unspent(launch: Launch) -> bool:
    """Whether a launch ended before it measured anything for a reason no env config is to blame for,
    and none retries it (Ctrl-C, a full disk at its submit): it spends no search launch."""
    return (launch.error or "").startswith((CTRL_C, *WORKDIR_FULL))  # CTRL_C; what its cancel left


def not_submitted(ctx: StudyContext, launch: Launch, full: str, exc: Exception) -> WorkdirFull:
    """A launch whose submit a full disk refused, recorded cancelled (a failed one failed its study for
    good), and what says so to its runner, which leaves its study running, to resume once there is space."""
    why = f"not submitted: {full} under {ctx.workdir}"
    ctx.store.update_launch(launch.id, state=LaunchState.CANCELLED, finished_at=ctx.store.now(),
                            error=clip(f"{why} ({type(exc).__name__}: {exc})"))  # fmt: skip
    return WorkdirFull(f"study {ctx.study_id}: launch {launch.seq} {why}")


def submit_in_turn(
    ctx: StudyContext, request: LaunchRequest, launch: Launch, started: float
) -> tuple[str, AppDryrun[Any], bool] | Outcome:
    """Submit the launch: (backend id, request, whether it waited its turn). A backend that refuses it
    for now (SubmitLater: a submit limit that clears as other jobs end) is asked again after the wait it
    names, the lease renewed and the row saying why meanwhile, until queue_timeout_s from `started` (the
    bound of a queued launch too); then the launch ends cancelled, saying why and how long it waited:
    no env config is to blame, none is quarantined. Before, the executor waited inside, where nothing
    renewed the lease: a submit limit that took over 45 s to clear failed the study."""
    limit = ctx.executor.queue_timeout_s
    shown: list[str | None] = [None]
    waited = False
    try:
        while True:
            try:
                backend_id, dryrun = ctx.executor.submit(request)
                return backend_id, dryrun, waited
            except SubmitLater as exc:
                refused = exc
            waited = True
            elapsed = time.monotonic() - started
            if limit is not None and elapsed >= limit:
                abandon_quietly(ctx, request)
                reason = f"not submitted after {elapsed:.0f} s (queue_timeout_s {limit:g} s): {refused}"
                return Outcome(LaunchState.CANCELLED, None, None, reason)
            pause = max(refused.retry_after_s, 0.0)
            if limit is not None:
                pause = min(pause, limit - elapsed)  # the last try at the deadline itself
            # Said once as a warning with how long it may go on: without queue_timeout_s, a controller
            # that never comes back is waited for until a person stops the study.
            log.log(logging.INFO if shown[0] else logging.WARNING,
                    "study %s: launch %s: %s; asking again in %.0f s, %s", ctx.study_id, launch.seq, refused,
                    pause, _waits_until(limit))  # fmt: skip
            why = Description(LaunchState.PENDING, None, f"{NOT_SUBMITTED}: {refused}")
            _wait_turn(ctx, launch, why, shown, pause)
    except BaseException:  # cancelled, interrupted or lost while it waited, or while sbatch was out (it
        # may have queued the job all the same): never submitted again, and what it queued is cancelled
        abandon_quietly(ctx, request)
        raise


def _waits_until(limit: float | None) -> str:
    if limit is None:
        return ("for as long as it takes (the executor's queue_timeout_s is not set; a cancel, or Ctrl-C "
                "for `autotuner tune`, stops the study)")  # fmt: skip
    return f"for at most {limit:g} s from its first try (the executor's queue_timeout_s)"


def _wait_turn(
    ctx: StudyContext, launch: Launch, why: Description, shown: list[str | None], pause: float
) -> None:
    """`pause` seconds, the lease renewed and the row saying `why` meanwhile; a cancel raises, also one
    seen at the end (a study cancelled meanwhile submits nothing more)."""
    until, say = time.monotonic() + pause, partial(say_waiting, ctx, launch, why, shown)
    while (left := until - time.monotonic()) > 0:
        heartbeat(ctx, launch, say)
        time.sleep(min(ctx.poll_s, left))
    heartbeat(ctx, launch, say, force=True)


def heartbeat(
    ctx: StudyContext,
    launch: Launch,
    then: Callable[[], None],
    on_cancel: Callable[[], str | None] = lambda: None,
    *,
    force: bool = False,
) -> None:
    """Renew the lease (and the launch's heartbeat) when due (or `force`), then `then`. A cancel seen:
    `on_cancel`, the launch recorded cancelled (its error: what on_cancel says may still run),
    StudyCancelled raised. A store that does not answer delays the beat, not the launch: tried again at
    the next call."""
    try:
        if force or ctx.lease.due():
            ctx.store.update_launch(launch.id, heartbeat_at=ctx.store.now())
        # first: a runner whose lease was taken writes nothing more
        ctx.lease.beat(force=force)
        then()
    except StudyCancelled:
        left = on_cancel()
        ctx.store.update_launch(launch.id, state=LaunchState.CANCELLED, finished_at=ctx.store.now(),
                                left_running=left, **({"error": left} if left else {}))  # fmt: skip
        raise
    except Exception as exc:
        if not store_unavailable(exc):
            raise
        # A store busy or away for a while (SQLite locked past its busy timeout, a database restart)
        # delays the heartbeat, not the launch: followed on, the beat tried again at the next poll.
        log.warning("study %s: the store did not answer a heartbeat (%s); still following launch %s",
                    ctx.study_id, type(exc).__name__, launch.seq)  # fmt: skip


def abandon_quietly(ctx: StudyContext, request: LaunchRequest) -> None:
    """`executor.abandon`, a failure logged (the launch ends as it was going to)."""
    try:
        ctx.executor.abandon(request)
    except Exception:
        log.warning("study %s: could not abandon launch %s", ctx.study_id, request.name, exc_info=True)


def cancel_interrupted(
    ctx: StudyContext, launch: Launch, backend_id: str | None, request: LaunchRequest
) -> None:
    """A launch whose follower was interrupted (Ctrl-C, SIGTERM as Ctrl-C) is cancelled and recorded so:
    else its job runs on, unfollowed, beside the next. A cancel not confirmed says so in the row's error."""
    left = _cancel_quietly(ctx, backend_id, request)
    ctx.store.update_launch(launch.id, state=LaunchState.CANCELLED, finished_at=ctx.store.now(),
                            error=also_left(CTRL_C, left), left_running=left)  # fmt: skip


def cancel_if_ours(executor: Executor, backend_id: str, request: LaunchRequest) -> tuple[str | None, str]:
    """A cancel sent long after the launch ended (a study cancelled while no runner followed it, a cancel
    not confirmed then): its id may name another job by now (Slurm gives a lost job's id to the next),
    which must not be stopped, so the executor is asked first (`Executor.owns`). What may still run
    (None: nothing of it), and how that was seen."""
    owned = executor.owns(backend_id, request)
    if owned is None:
        return (f"{backend_id} may still run: its backend could not say whether it is still this launch's job, so "
                f"it was not stopped (by hand: `{executor.how_cancelled(backend_id)}`)"), ""  # fmt: skip
    if not owned:
        return None, f"{backend_id} no longer names a live job of this launch"
    return executor.cancel(backend_id, request), "cancelled"


def _cancel_quietly(ctx: StudyContext, backend_id: str | None, request: LaunchRequest) -> str | None:
    """Cancel a launch on the way out of an error: a cancel that fails too is logged, and the error
    that brought us here is the one raised. What the cancel may have left running (`Executor.cancel`)
    is logged and returned."""
    if backend_id is None:
        return None
    try:
        left = ctx.executor.cancel(backend_id, request)
    except Exception as exc:  # nothing confirmed: it may run on, as after a cancel that said so
        log.warning("study %s: could not cancel %s after an error", ctx.study_id, backend_id, exc_info=True)
        return clip(f"{backend_id} may still run: its cancel failed ({type(exc).__name__}: {exc})")
    if left is not None:
        log.warning("study %s: launch %s: %s", ctx.study_id, request.name, left)
    return left


def record_backend_id(
    ctx: StudyContext, launch: Launch, request: LaunchRequest, backend_id: str, rendered: str
) -> None:
    """The backend's id of a submitted launch, stored; if the store does not take it, the launch is
    cancelled first: a resumed study could not follow it, and would run its retry beside it (on the
    same GPUs, skewing what the retry measures)."""
    try:
        ctx.store.update_launch(launch.id, backend_id=backend_id, request=rendered)
    except Exception:
        _cancel_quietly(ctx, backend_id, request)
        raise


def wait(
    ctx: StudyContext,
    backend_id: str,
    request: LaunchRequest,
    launch: Launch,
    started: float,
    *,
    queued: bool = False,
) -> Outcome:
    """Follow a launch to its end. `queued`: it was seen queued before (a row that said pending, followed
    again after a restart): its run time counts from when it is seen running, not from `started`."""
    # What the launch's row says it waits on: as stored (a launch followed again after a restart may
    # have started meanwhile; its row said "pending" for its whole run).
    shown: list[str | None] = [launch.waiting_on if launch.state == LaunchState.PENDING else None]

    def on_poll(desc: Description) -> None:
        heartbeat(
            ctx,
            launch,
            lambda: say_waiting(ctx, launch, desc, shown),
            lambda: ctx.executor.cancel(backend_id, request),
        )

    return ctx.executor.wait(
        backend_id, request, started=started, queued=queued, poll_s=ctx.poll_s, on_poll=on_poll
    )


def say_waiting(ctx: StudyContext, launch: Launch, desc: Description, shown: list[str | None]) -> None:
    """A queued launch says on its row what it waits on, in the scheduler's words, once per change
    (a job pending on `PartitionNodeLimit` read "running", in silence, until queue_timeout_s);
    running again, it says nothing."""
    if desc.state == LaunchState.UNKNOWN:  # a poll that could not read it: nothing changed that we know
        return
    waiting = clip(desc.reason or "queued", 500) if desc.state == LaunchState.PENDING else None
    if waiting == shown[0]:
        return
    shown[0] = waiting
    if ctx.store.mark_waiting(launch.id, waiting):  # not when it ended meanwhile
        ctx.progress.on_launch_waiting(launch, waiting or "")  # "": it runs now


BASELINE = "the baseline (the job's own settings)"


def unmeasured(store: Store, study_id: int, kind: str, what: str) -> str:
    """Why `what` was not measured, from the study's last launch of `kind`: the launch's own error, else
    its candidate's (a launch that ran but could not measure it: an OOM, a refused pipeline; "see its
    launch log" pointed at a log that said nothing of it), and where its log is."""
    launches = [x for x in store.launches(study_id) if x.kind == kind]
    if not launches:
        return f"{what} was not measured"
    last = launches[-1]
    why = last.error or next((c.error for c in store.candidates(study_id, launch_id=last.id) if c.error), "")
    where = f" (its log: {last.log_path})" if last.log_path else ""
    how = "ran but measured nothing" if last.state == LaunchState.SUCCEEDED else last.state
    return clip(f"{what} was not measured: launch {last.seq} {how}{f': {why}' if why else ''}{where}")
