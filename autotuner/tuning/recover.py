"""Resuming: launches a previous runner left pending or running are re-attached and collected,
or recorded as interrupted and retried (up to `max_attempts`)."""

from __future__ import annotations

import logging
import time

from autotuner.executors import Outcome
from autotuner.executors.base import LaunchState, also_left
from autotuner.store import Launch, LaunchKind
from autotuner.tuning.context import StudyContext, point_of
from autotuner.tuning.ingest import ingest
from autotuner.tuning.launch import (
    abandon_quietly,
    cancel_if_ours,
    cancel_interrupted,
    request_of,
    run_again,
    wait,
)
from autotuner.tuning.plan import PlannedLaunch

log = logging.getLogger("autotuner.tuning")
INTERRUPTED = "interrupted: the process running the study stopped before this launch finished"
# Queued (PENDING) and unreadable-right-now (UNKNOWN) launches are followed too: retrying them would
# leave the original job to run later, unobserved.
FOLLOWED = (LaunchState.RUNNING, LaunchState.PENDING, LaunchState.UNKNOWN)


def recover(ctx: StudyContext) -> None:
    """Before the search starts: what it learns of these launches it reads from the store."""
    for launch in ctx.store.launches(
        ctx.study_id, states=[LaunchState.PENDING.value, LaunchState.RUNNING.value]
    ):
        # An older version's (or a hand's) row: this launch ends, the study goes on.
        if not _readable(launch.spec):
            ctx.store.update_launch(launch.id, state=LaunchState.FAILED, finished_at=ctx.store.now(),
                                    error="its stored spec has no list of candidates: not resumed")  # fmt: skip
            continue
        if launch.backend_id and (ended := _reattach(ctx, launch)) is not None:
            # Found cancelled (its process killed with the runner's: a reboot, a unit's cgroup): it measured
            # nothing and nothing blames its config. Retried as an interrupted one is: else its points
            # read tried and failed, and the search spent a launch on them. Not one given up on (its
            # queue_timeout_s passed): that would queue it again, as no launch this runner started is.
            if ended.state == LaunchState.CANCELLED and not ended.given_up and _retried(ctx, launch):
                _retry(ctx, launch)
            continue
        if not launch.backend_id:  # it may have been waiting its turn: what a refused submit left goes
            abandon_quietly(ctx, request_of(ctx, launch))
        # Cancelled, not failed: nothing says the env config broke it, and a failed search launch would
        # quarantine that config on the cluster for good (a service restart banned a setting).
        ingest(ctx, launch, Outcome(LaunchState.CANCELLED, launch.backend_id, None, INTERRUPTED), None, None)
        if _retried(ctx, launch):
            _retry(ctx, launch)


def _retried(ctx: StudyContext, launch: Launch) -> bool:
    """Whether an interrupted launch is run again here (a confirmation's missing rounds are measured again
    by its comparison)."""
    return launch.attempt < ctx.settings.max_attempts and launch.kind != LaunchKind.CONFIRM


def _readable(spec: object) -> bool:
    candidates = spec.get("candidates") if isinstance(spec, dict) else None
    return isinstance(candidates, list) and all(isinstance(c, dict) for c in candidates)


def _reattach(ctx: StudyContext, launch: Launch) -> Outcome | None:
    """Follow a launch to its end and record it: how it ended (None: it cannot be followed)."""
    request = request_of(ctx, launch)
    desc = ctx.executor.describe(launch.backend_id, request)  # type: ignore[arg-type]
    if desc.state not in FOLLOWED and not desc.state.is_terminal():
        return None
    # Its id may name another job by now (a controller that lost its state gives a lost job's id to the
    # next): followed, that job would be timed, collected and cancelled at this launch's timeout.
    if not desc.state.is_terminal() and ctx.executor.owns(launch.backend_id, request) is False:  # type: ignore[arg-type]
        log.info("study %s: launch %s: %s names another job now: not followed", ctx.study_id, launch.seq,
                 launch.backend_id)  # fmt: skip
        return None
    log.info("study %s: re-attaching launch %s (%s)", ctx.study_id, launch.seq, desc.state.value)
    now = ctx.store.now()  # the clock its start was written by, whichever replica wrote it
    started = time.monotonic() - (now - (launch.started_at or now)).total_seconds()
    # Its run clock starts again at the first running answer: a row that said running may have been
    # queued all along (written before the first poll), and queue time is not run time.
    try:
        outcome = wait(ctx, launch.backend_id, request, launch, started, queued=True)  # type: ignore[arg-type]
    except KeyboardInterrupt:  # as for a launch this runner submitted: not left running, unfollowed
        cancel_interrupted(ctx, launch, launch.backend_id, request)
        raise
    ingest(ctx, launch, outcome, None, None)
    return outcome


def _retry(ctx: StudyContext, launch: Launch) -> None:
    points = [point_of(c) for c in launch.spec["candidates"]]
    run_again(ctx, launch, PlannedLaunch.of(launch.env, points, LaunchKind(launch.kind)), None)


def stop_leftovers(ctx: StudyContext) -> int:
    """Cancel the launches an ended study left pending or running (it was cancelled while no runner
    followed it); how many."""
    states = [LaunchState.PENDING.value, LaunchState.RUNNING.value]
    left = [x for x in ctx.store.launches(ctx.study_id, states=states) if x.kind != LaunchKind.REVALIDATE]
    for launch in left:
        error, running = "its study ended while no runner followed it: cancelled", None
        if launch.backend_id:  # perhaps days later: its id may name another job by now
            running, how = cancel_if_ours(ctx.executor, launch.backend_id, request_of(ctx, launch))
            error = also_left(error if how in ("", "cancelled") else f"{error} ({how})", running)
        else:
            abandon_quietly(ctx, request_of(ctx, launch))
        ctx.store.update_launch(launch.id, state=LaunchState.CANCELLED, finished_at=ctx.store.now(),
                                error=error, left_running=running)  # fmt: skip
    return len(left)
