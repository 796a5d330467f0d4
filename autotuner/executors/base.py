"""The executor contract, in the shape of torchx schedulers.

A backend turns a `LaunchRequest` into its own request object first (`dryrun`: the command line,
the sbatch script, the Kubernetes Job — inspectable and golden-tested with no cluster), and only
then sends it (`schedule`). `submit` = dryrun + schedule, written once here. Backends implement
dryrun, schedule, describe, cancel and logs; `run` (submit, wait with a timeout, collect) is shared.
"""

from __future__ import annotations

import json
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from autotuner.executors.files import launch_dir, log_tail, read_bounded, remove, write_new
from autotuner.executors.results import ResultError, parse_result
from autotuner.limits import limits
from trials.result import UNWRITTEN

# A trial that could not write its result (a full disk): measured nothing, and run again at once would
# meet the same disk.
RESULT_UNWRITTEN = "its result could not be written"

T = TypeVar("T")


class LaunchState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    def is_terminal(self) -> bool:
        return self in (LaunchState.SUCCEEDED, LaunchState.FAILED, LaunchState.TIMEOUT, LaunchState.CANCELLED)


@dataclass
class LaunchRequest:
    """One trial launch, independent of where it runs."""

    name: str  # unique and filesystem/DNS friendly, e.g. "s3-l7"
    spec: dict[str, Any]  # the trial spec (trials.spec), already validated
    env: dict[str, str]  # exported identically to every rank
    workdir: Path  # spec.json, result.json and the log live here
    nproc_per_node: int = 2
    nnodes: int = 1
    timeout_s: float = 600.0
    python: str = sys.executable
    options: dict[str, Any] = field(default_factory=dict)  # backend specific (partition, image, fabric ...)

    @property
    def spec_path(self) -> Path:
        return self.workdir / "spec.json"

    @property
    def result_path(self) -> Path:
        return self.workdir / "result.json"

    @property
    def log_path(self) -> Path:
        return self.workdir / "trial.log"

    def trial_argv(
        self, spec: str | None = None, out: str | None = None, *, print_result: bool = False
    ) -> list[str]:
        """The per-node trial command after torchrun's own arguments. `spec` / `out`: where the nodes
        see the spec and write the result when that is not the launch directory (a pod's ConfigMap
        mount); `print_result`: also print it to the log (nodes that share no disk with the tuner)."""
        argv = ["-m", "trials.run", "--spec", spec or str(self.spec_path), "--out", out or str(self.result_path),
                "--quiet"]  # fmt: skip
        return [*argv, "--print-result"] if print_result else argv


@dataclass
class AppDryrun(Generic[T]):
    """What would be sent: the backend's request object and a human-readable rendering of it."""

    request: T
    rendered: str
    launch: LaunchRequest

    def __str__(self) -> str:
        return self.rendered


@dataclass
class Description:
    state: LaunchState
    exit_code: int | None = None
    reason: str = ""
    # Ended, but what it left in the launch directory is not visible here yet (a network file system's
    # cache can hide a file a node just wrote): polled again, up to the executor's `settle_s`.
    settling: bool = False
    # Ended by the executor's own rule for a launch that never ran (a Kubernetes Job whose deadline
    # passed in the queue), as queue_timeout_s gives one up: not to be queued again.
    given_up: bool = False


@dataclass
class Outcome:
    """How a launch ended, as the study driver records it."""

    state: LaunchState
    backend_id: str | None
    result: dict[str, Any] | None
    reason: str = ""
    log_tail: str = ""
    request: str = ""
    given_up: bool = False  # cancelled by its queue_timeout_s or an unreadable state: not to run again
    left_running: str | None = None  # its cancel not confirmed: what may still run (`Executor.cancel`)


class SubmitLater(RuntimeError):
    """Raised by `schedule` when the backend refused the request for now, for a reason that passes (a
    submit limit, such as Slurm's QOSMaxSubmitJobPerUserLimit, that clears as other jobs end; a
    controller that does not answer: what it may have queued is the executor's to find, or `abandon`).
    The launch waits its turn, like a queued one: the caller submits it again after `retry_after_s`,
    renewing what it holds meanwhile, within `queue_timeout_s` from the launch's start. Its env config is
    not to blame."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Executor(ABC):
    name: ClassVar[str]
    # How long a cancelled launch gets between SIGTERM (or scancel) and giving up on it.
    cancel_grace_s: ClassVar[float] = 10.0
    # Backends whose describe() costs a scheduler round trip poll no faster than this.
    min_poll_s: ClassVar[float] = 0.0
    # How long a launch may wait in a queue before it is given up (None: as long as it takes).
    queue_timeout_s: float | None = None
    # How long an ended launch whose files are not visible yet (`Description.settling`) is polled again
    # before it is collected as it stands.
    settle_s: float = 0.0

    # ---- what each backend implements

    @abstractmethod
    def dryrun(self, launch: LaunchRequest) -> AppDryrun[Any]: ...

    @abstractmethod
    def schedule(self, dryrun: AppDryrun[Any]) -> str:
        """Send the request; returns the backend's id for it (pid, Slurm job id, Job name). SubmitLater:
        refused for now (a submit limit, a controller that does not answer): submitted again later."""

    @abstractmethod
    def describe(self, backend_id: str, launch: LaunchRequest) -> Description: ...

    def owns(self, backend_id: str, launch: LaunchRequest) -> bool | None:
        """Whether `backend_id` still names this launch's job, asked before a cancel sent long after the
        launch ended (None: the backend cannot say now). A backend that gives a forgotten job's id to a
        new one says, so that cancel never stops another job."""
        return True

    @abstractmethod
    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        """Stop the launch, waiting up to cancel_grace_s for its end. None: it ended (or nothing was
        left to stop); else, for the operator, what may still run and how to stop it by hand (the
        scheduler did not answer): the caller stores it with the launch's error."""

    def abandon(self, launch: LaunchRequest) -> None:
        """A launch refused for now (SubmitLater) will not be submitted again (its turn did not come, or
        its study was cancelled): undo what a refused submit may have left running. Nothing by default."""
        return None

    def blameless(self, log: str) -> str | None:
        """Why a launch that wrote no result measured nothing through no fault of its env config, as its
        log tail says (None: nothing says so, and the launch failed): the trial could not write its
        result (a full disk). An executor adds its backend's own words for a trial it kept from starting."""
        unwritten = _unwritten(log)
        return f"{RESULT_UNWRITTEN}: {unwritten}" if unwritten else None

    def logs(self, backend_id: str, launch: LaunchRequest, tail_lines: int = 60) -> str:
        return log_tail(launch.log_path, tail_lines)

    def fetch_result(self, backend_id: str, launch: LaunchRequest) -> dict[str, Any] | None:
        """The trial result, or None if the trial wrote none (crashed before, or never ran).
        ResultError if what it wrote cannot be used (autotuner.executors.results says why)."""
        try:
            data = read_bounded(launch.result_path, limits().max_result_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ResultError(str(exc)) from None
        return parse_result(data, launch.spec, self.world_size(launch))

    def world_size(self, launch: LaunchRequest) -> int | None:
        """The ranks a launch's result must say it ran (None: not checked, e.g. a replayed recording)."""
        return launch.nnodes * launch.nproc_per_node

    # ---- shared

    def pinned_env(self, launch: LaunchRequest) -> dict[str, str]:
        """Variables this executor sets itself for `launch`, over the launch's own (an emulation's
        transport): a space may not search them, nor fix them to another value."""
        return {}

    def check(self, launch: LaunchRequest) -> None:
        """ValueError for a launch this executor could never run (its directory, node or GPU counts),
        asked before a study exists. Renders the request and sends nothing."""
        self.dryrun(launch)

    def prepare(self, launch: LaunchRequest) -> None:
        """Write the spec where the trial reads it (the workdir is shared with the nodes)."""
        launch_dir(launch.workdir)
        write_new(launch.spec_path, json.dumps(launch.spec, indent=2))
        remove(launch.result_path)

    def submit(self, launch: LaunchRequest) -> tuple[str, AppDryrun[Any]]:
        dryrun = self.dryrun(launch)
        self.prepare(launch)
        return self.schedule(dryrun), dryrun

    def wait(
        self,
        backend_id: str,
        launch: LaunchRequest,
        *,
        started: float,
        queued: bool = False,
        poll_s: float = 0.5,
        on_poll: Callable[[Description], None] | None = None,
    ) -> Outcome:
        """Poll until the launch ends or its timeout passes (then cancel it: the whole tree).

        Time in a queue is not run time: the timeout counts from when the launch was first seen
        running after it was seen queued (`queued`: it may have been, before this wait: a launch
        followed again after a restart) or after a poll that could not read its state, else from
        `started`; `queue_timeout_s` bounds the wait before that. A poll that could not read the state
        (UNKNOWN) tells nothing either way: it starts no run clock, stops none, and times nothing out
        (a timeout is called only on a readable answer that the launch has not ended, the queue's only
        on one that it still waits: a job may start while the controller is down); answers unreadable
        for a whole `timeout_s` end the wait, cancelled. A busy or unreachable cluster must not turn
        every launch into a timeout and every env config into a quarantined one. An ended launch whose
        files are not visible yet (`settling`) is polled again for up to `settle_s`, then collected.
        """
        poll_s = max(poll_s, self.min_poll_s)
        clock = _RunClock(started, queued)
        ended_at: float | None = None
        while True:
            desc = self.describe(backend_id, launch)
            now = time.monotonic()
            if desc.state.is_terminal():
                ended_at = now if ended_at is None else ended_at
                if not desc.settling or now - ended_at >= self.settle_s:
                    return self._collect(backend_id, launch, desc)
            else:
                clock.see(desc.state, now)
                outcome = self._given_up(backend_id, launch, desc, clock, now)
                if outcome is not None:
                    return outcome
            if on_poll is not None:
                on_poll(desc)
            time.sleep(poll_s)

    def _given_up(
        self, backend_id: str, launch: LaunchRequest, desc: Description, clock: _RunClock, now: float
    ) -> Outcome | None:
        """The outcome of a launch still pending or running that is not waited on any longer, if so."""
        if (
            desc.state == LaunchState.PENDING  # said to wait still, not merely unread: it may have started
            and clock.running_since is None
            and self.queue_timeout_s is not None
            and now - clock.started > self.queue_timeout_s
        ):
            left = self.cancel(backend_id, launch)
            reason = also_left(
                f"still queued after {self.queue_timeout_s:.0f} s (queue_timeout_s): {desc.reason}", left
            )
            return Outcome(LaunchState.CANCELLED, backend_id, None, reason, self.logs(backend_id, launch),
                           given_up=True, left_running=left)  # fmt: skip
        if clock.blind_since is not None and now - clock.blind_since > launch.timeout_s:
            # Not one readable answer for a whole run's time: given up, not a timeout (nothing says it
            # ran on: its env config is not to blame; the controller or the API may be down).
            left = self.cancel(backend_id, launch)
            reason = also_left(
                f"its state could not be read for {launch.timeout_s:.0f} s: {desc.reason}", left
            )
            return Outcome(LaunchState.CANCELLED, backend_id, None, reason, self.logs(backend_id, launch),
                           given_up=True, left_running=left)  # fmt: skip
        if (
            desc.state != LaunchState.UNKNOWN  # said to run on (or queued again), not merely unread
            and clock.running_since is not None
            and now - clock.running_since > launch.timeout_s
        ):
            left = self.cancel(backend_id, launch)
            result, _ = self._result(backend_id, launch)
            return Outcome(
                LaunchState.TIMEOUT,
                backend_id,
                result,
                also_left(
                    f"killed after the {launch.timeout_s:.0f} s timeout ({self.how_cancelled(backend_id)})",
                    left,
                ),
                self.logs(backend_id, launch),
                left_running=left,
            )
        return None

    def how_cancelled(self, backend_id: str) -> str:
        """How `cancel` stops a launch, in the words an operator would search their logs for."""
        return f"cancelled {backend_id}"

    def run(self, launch: LaunchRequest, **kwargs: Any) -> Outcome:
        started = time.monotonic()
        backend_id, dryrun = self.submit(launch)
        outcome = self.wait(backend_id, launch, started=started, **kwargs)
        outcome.request = dryrun.rendered
        return outcome

    def _result(self, backend_id: str, launch: LaunchRequest) -> tuple[dict[str, Any] | None, str]:
        """The usable result, or None and why not ("" when the trial wrote none)."""
        try:
            return self.fetch_result(backend_id, launch), ""
        except ResultError as exc:
            return None, f"its result cannot be used: {exc}"

    def _collect(self, backend_id: str, launch: LaunchRequest, desc: Description) -> Outcome:
        result, unusable = self._result(backend_id, launch)
        state, reason = desc.state, desc.reason
        # Read once: a Kubernetes log is an API call (the line below and the tail would read it twice)
        log = self.logs(backend_id, launch) if result is None else None
        if state == LaunchState.CANCELLED:
            pass
        elif result is None and state != LaunchState.TIMEOUT and (why := self.blameless(log or "")):
            # Its result could not be written (a full disk), or the backend kept the trial from starting
            # (srun could not reach the Slurm controller): no env config is to blame. Failed, it was
            # quarantined on the cluster (the baseline's own env, on a full disk).
            state, reason = LaunchState.CANCELLED, why
        elif result is None:  # a launch its scheduler timed out stays a timeout (killed before it wrote)
            state = LaunchState.TIMEOUT if state == LaunchState.TIMEOUT else LaunchState.FAILED
            reason = (
                "; ".join(filter(None, (reason, unusable)))
                or f"no result written (exit code {desc.exit_code})"
            )
        elif result.get("status") == "error":
            # The trial's own words say what it saw (a SIGTERM), the backend's why (Slurm's time limit):
            # a launch its scheduler timed out stays a timeout, its reason first.
            said = result.get("error", "trial failed")
            if state == LaunchState.TIMEOUT:
                reason = "; ".join(filter(None, (reason, f"the trial: {said}")))
            else:
                state, reason = LaunchState.FAILED, said
        else:
            # Exit code 1 means "some candidate failed": the launch itself succeeded.
            state = LaunchState.SUCCEEDED
        if state == LaunchState.SUCCEEDED:
            log = ""
        elif log is None:
            log = self.logs(backend_id, launch)
        return Outcome(state, backend_id, result, reason, log, given_up=desc.given_up)


def also_left(reason: str, left: str | None) -> str:
    """Why a launch was cancelled, and what its cancel may have left running (`Executor.cancel`)."""
    return f"{reason}; {left}" if left else reason


def _unwritten(log: str) -> str | None:
    """The trial's line saying it could not write its result, from a launch's log tail (None: none)."""
    return next((line.strip() for line in reversed(log.splitlines()) if UNWRITTEN in line), None)


class _RunClock:
    """When a launch's run time started, from the states its polls saw (None: not yet).

    Run time counts only once an answer says the launch runs: from that answer if the launch was seen
    queued, or a poll before it could not read its state (it may have queued meanwhile), else from
    `started` (the submission, or a launch followed again that its row said ran). An unreadable answer
    (UNKNOWN) starts no clock and stops none: a controller down from the first poll on is no run time.
    """

    def __init__(self, started: float, queued: bool) -> None:
        self.started = started
        self.queued = queued  # seen queued, or maybe queued (unreadable), before it was seen running
        self.running_since: float | None = None
        self.blind_since: float | None = None  # answers UNKNOWN since then, without a break

    def see(self, state: LaunchState, now: float) -> None:
        unreadable = state == LaunchState.UNKNOWN
        self.blind_since = (now if self.blind_since is None else self.blind_since) if unreadable else None
        if self.running_since is not None:
            return
        if state == LaunchState.RUNNING:
            self.running_since = now if self.queued else self.started
        else:  # queued, or not known not to be
            self.queued = True
