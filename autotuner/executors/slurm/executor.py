"""Slurm executor: one batch job per launch, torchrun on every node through srun.

The dryrun is the whole sbatch script (`slurm/script.py`, golden-tested); its options are
`options.SlurmOptions`. Everything `describe` needs is the job id (kept in the database) and the launch
directory, where the script leaves the trial's exit code: a tuner killed with SIGKILL re-attaches with
a fresh executor.

Slurm is only ever called with argument lists (`sbatch --parsable`, `squeue --json`, `scontrol show
job`, `sacct`, `scancel`), never through a shell.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from autotuner.executors.base import AppDryrun, Description, Executor, LaunchRequest, LaunchState, SubmitLater
from autotuner.executors.files import write_new
from autotuner.executors.script import ScriptRequest, describe_exit, read_exit_code, without_comm_env
from autotuner.executors.slurm.options import SlurmOptions
from autotuner.executors.slurm.script import check_launch, job_name, sbatch_script

log = logging.getLogger(__name__)

# Slurm job states (22.05 and later; flags such as COMPLETING travel in the same field) -> ours.
# Ends that are the cluster's doing (node failure, preemption) map to CANCELLED, not FAILED: the study
# driver quarantines the env config of a failed search launch, and a flaky node says nothing about it.
SLURM_STATES: dict[str, LaunchState] = {
    "PENDING": LaunchState.PENDING,
    "CONFIGURING": LaunchState.PENDING,  # nodes being booted / set up: the trial has not started
    "REQUEUED": LaunchState.PENDING,
    "REQUEUE_HOLD": LaunchState.PENDING,
    "REQUEUE_FED": LaunchState.PENDING,
    "RESV_DEL_HOLD": LaunchState.PENDING,
    "SUSPENDED": LaunchState.PENDING,
    "RUNNING": LaunchState.RUNNING,
    "COMPLETING": LaunchState.RUNNING,
    "SIGNALING": LaunchState.RUNNING,
    "STAGE_OUT": LaunchState.RUNNING,
    "RESIZING": LaunchState.RUNNING,
    "STOPPED": LaunchState.RUNNING,
    "COMPLETED": LaunchState.SUCCEEDED,
    "FAILED": LaunchState.FAILED,
    "OUT_OF_MEMORY": LaunchState.FAILED,
    "SPECIAL_EXIT": LaunchState.FAILED,
    "TIMEOUT": LaunchState.TIMEOUT,
    "DEADLINE": LaunchState.TIMEOUT,
    "CANCELLED": LaunchState.CANCELLED,
    "REVOKED": LaunchState.CANCELLED,
    "PREEMPTED": LaunchState.CANCELLED,
    "NODE_FAIL": LaunchState.CANCELLED,
    "BOOT_FAIL": LaunchState.CANCELLED,
}
_WHY = {
    "TIMEOUT": "Slurm killed the job at its time limit",
    "DEADLINE": "Slurm killed the job at its deadline",
    "OUT_OF_MEMORY": "a node ran out of memory",
    "PREEMPTED": "preempted by Slurm (not the config's fault; not retried: --no-requeue)",
    "NODE_FAIL": "a node of the job failed (not the config's fault)",
    "BOOT_FAIL": "a node of the job failed to boot (not the config's fault)",
    "REVOKED": "revoked by the federation",
    "CANCELLED": "cancelled in Slurm (scancel)",
}


class SlurmError(RuntimeError):
    """Slurm refused a request (sbatch rejected the job) or could not be reached."""


class _Unreachable(SlurmError):
    """The command did not answer (controller down, timed out, not installed): try again later."""


class _NotInstalled(_Unreachable):
    """The command is not on PATH: no later try will find it."""


class _Transient(_Unreachable):
    """sbatch refused the job for now, in Slurm's words for what passes (a controller busy, down or slow
    to answer): worth another try."""


# sbatch's messages for failures that pass. A lost reply ("Socket timed out", "slurm_receive_msg", "Zero
# Bytes") may come after the controller queued the job: squeue is asked before another try.
_TRANSIENT_SBATCH = re.compile(
    r"socket timed out|unable to contact slurm controller|slurm_receive_msg|zero bytes were transmitted"
    r"|resource temporarily unavailable",
    re.IGNORECASE,
)
# A submit limit (QOSMaxSubmitJobPerUserLimit, QOSMaxSubmitJobPerAccountLimit, QOSGrpSubmitJobsLimit,
# AssocMaxSubmitJobLimit, AssocGrpSubmitJobsLimit): this user's (account's) jobs fill it, and it clears
# as they end, which may take hours. The controller refused the job, so nothing was queued: schedule()
# raises SubmitLater and the launch waits its turn like a queued job (queue_timeout_s), its lease renewed
# by the engine. Named by the reason line sbatch prints above "Job violates accounting/QOS policy (job
# submit limit, user's size and/or time limits)": that line alone also says a job too big or too long for
# the QOS (DenyOnLimit), which never clears, and is raised at once.
# Left in the launch's directory when sbatch went unanswered (SubmitLater): the job may have been queued.
UNANSWERED = "sbatch-unanswered"
JOB_ID = "job_id"  # the id sbatch answered, written before the store records it
# srun's failures before any task started: allocation not confirmed, step not created.
_SRUN_UNREACHED = re.compile(r"^srun: error: Unable to (confirm allocation|create step) for job ")
_SUBMIT_LIMIT = re.compile(r"(qos|assoc)(max|grp)\w*submit\w*limit", re.IGNORECASE)


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about a job, from whichever source still knows it."""

    state: str  # base Slurm state, e.g. "RUNNING"
    reason: str = ""
    exit_code: int | None = None  # of the batch script
    signal: int | None = None
    source: str = "squeue"
    name: str | None = None  # the job's name and directory, where the controller says them (not accounting)
    workdir: str | None = None


class SlurmExecutor(Executor):
    name = "slurm"
    # Slurm is asked at most this often per launch: in 22.05 `squeue --json` returns every job of the
    # cluster whatever --jobs says.
    min_poll_s = 1.0
    command_timeout_s: float = 30.0
    # A job Slurm says ended whose exit_code file this host does not see yet is polled again this long:
    # on NFS the tuner's host may see a file a node just wrote up to a minute late (attribute and lookup
    # caches, acdirmax 60 s by default); collected at once, the launch failed with "no result written".
    settle_s = 90.0
    # Waits before each new try of a transient sbatch failure. Nothing renews the study's lease
    # (AUTOTUNER_LEASE_S, default 60 s) meanwhile: all tries stay within submit_retry_s.
    submit_retry_delays_s: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0)
    submit_retry_s: float = 45.0
    # How long a launch refused by a submit limit waits (outside the executor, its lease renewed) before
    # sbatch is tried again (SubmitLater.retry_after_s); it waits up to queue_timeout_s in all.
    submit_limit_retry_s: float = 30.0

    def __init__(self, parsed: SlurmOptions | None = None, /, **options: Any) -> None:
        """From the options model, or from operator JSON (`SlurmExecutor(partition="gpu")`)."""
        self.options = parsed if parsed is not None else SlurmOptions.parse(options)
        self.queue_timeout_s = self.options.queue_timeout_s
        self._gpu_partition: bool | None = None

    # ------------------------------------------------------------------ the request

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[ScriptRequest]:
        check_launch(launch)  # before Slurm is asked about GPUs
        script = sbatch_script(launch, self.options, self._gpus_per_node(launch))
        return AppDryrun(ScriptRequest(script, launch.workdir / "launch.sbatch"), script, launch)

    def check(self, launch: LaunchRequest) -> None:
        sbatch_script(launch, self.options, self.options.gpus_per_node)  # Slurm is not asked about GPUs

    def _gpus_per_node(self, launch: LaunchRequest) -> int | None:
        wanted = self.options.gpus_per_node
        if wanted is not None:
            return wanted or None
        device = launch.spec.get("device", "auto")
        if device == "cuda" or (device == "auto" and self._partition_has_gpus()):
            return launch.nproc_per_node
        return None

    def _partition_has_gpus(self) -> bool:
        """Whether the partition's nodes advertise GPU GRES (asked once). A cluster that cannot be
        asked is taken to have none: the trial then reports the device it really used."""
        if self._gpu_partition is None:
            argv = ["sinfo", "--noheader", "--format=%G"]
            if self.options.partition:
                argv.append(f"--partition={self.options.partition}")
            try:
                proc = self._run(argv)
            except SlurmError:
                proc = None
            self._gpu_partition = bool(
                proc is not None and proc.returncode == 0 and re.search(r"(^|,)gpu[:(]", proc.stdout, re.M)
            )
        return self._gpu_partition

    # ------------------------------------------------------------------ sending and following

    def schedule(self, dryrun: AppDryrun[ScriptRequest]) -> str:
        """The job id; SubmitLater when a submit limit refused the job (nothing was queued) or Slurm did
        not answer within submit_retry_s (the next schedule first asks squeue whether it queued one)."""
        req, launch = dryrun.request, dryrun.launch
        req.write(launch)
        job_id = self._queued_unanswered(launch) or self._submit(req, launch)
        write_new(launch.workdir / JOB_ID, job_id + "\n")
        # only now: a tuner stopped (SIGKILL, SIGTERM, Ctrl-C) before this line left the note or job_id
        # behind, and `abandon` finds the job by them
        (launch.workdir / UNANSWERED).unlink(missing_ok=True)
        return job_id

    def _queued_unanswered(self, launch: LaunchRequest) -> str | None:
        """The job an earlier schedule's unanswered sbatch queued all the same, if one did (else None,
        and sbatch may be tried); SubmitLater while squeue cannot say."""
        unanswered = launch.workdir / UNANSWERED
        if not unanswered.exists():
            return None
        try:
            found = _queued_job(self._run, launch)
        except _Unreachable as exc:
            raise SubmitLater(f"squeue cannot say whether an earlier sbatch of launch {launch.name} queued it: "
                              f"{exc}", self.submit_limit_retry_s) from exc  # fmt: skip
        unanswered.unlink()
        if found is not None:
            log.warning("launch %s: an earlier sbatch that went unanswered queued job %s: following it",
                        launch.name, found)  # fmt: skip
        return found

    def abandon(self, launch: LaunchRequest) -> None:
        """Cancel the job an unanswered sbatch may have queued all the same: else it runs later, with no
        one to follow, collect or cancel it."""
        unanswered = launch.workdir / UNANSWERED
        # sbatch answered but the tuner stopped before the store had the id; else squeue, for the note
        found, how = _read_job_id(launch.workdir), "submitted but never followed"
        if found is None and unanswered.exists():
            try:
                found, how = _queued_job(self._run, launch), "queued by an sbatch that went unanswered"
            except SlurmError as exc:
                log.warning("launch %s given up: squeue cannot say whether an unanswered sbatch queued it (%s): "
                            "find it with `squeue --user=%s --name=%s --states=all --format='%%i %%T %%Z'` and "
                            "`scancel` the one in %s, if Slurm shows one", launch.name, exc, os.getuid(),
                            job_name(launch.name), launch.workdir)  # fmt: skip
                return
        unanswered.unlink(missing_ok=True)
        if found is not None:
            log.warning("launch %s given up: cancelling job %s, %s", launch.name, found, how)
            self.cancel(found, launch)  # a job it cannot confirm ended, it names in the log

    def _submit(self, req: ScriptRequest, launch: LaunchRequest) -> str:
        """sbatch, tried again after a failure that passes (one socket timeout failed the whole study,
        for good), within submit_retry_s, then SubmitLater (a controller restarting or failing over can
        take minutes: the engine waits the launch's turn, its lease renewed); a submit limit raises
        SubmitLater, any other refusal SlurmError at once, in sbatch's words."""
        deadline = time.monotonic() + self.submit_retry_s
        delays = iter(self.submit_retry_delays_s)
        tries = 0
        while True:
            tries += 1
            # Left until schedule() wrote the job id: a tuner stopped while sbatch is out (SIGKILL, SIGTERM,
            # Ctrl-C) leaves it, and the launch given up (the interrupt, a resume) finds what it queued.
            write_new(launch.workdir / UNANSWERED, "sbatch sent; no answer yet\n")
            try:
                return self._sbatch(req, launch)
            except _NotInstalled:
                (launch.workdir / UNANSWERED).unlink(missing_ok=True)
                raise
            except _Unreachable as exc:  # it did not answer in time, or was refused for now
                trouble = exc
            except (SlurmError, SubmitLater):  # answered: it queued nothing (or cancelled it elsewhere)
                (launch.workdir / UNANSWERED).unlink(missing_ok=True)
                raise
            # Another try only once squeue says this one queued nothing (a reply lost after the job was
            # queued): a job it shows is followed instead.
            while True:
                delay = next(delays, None)
                if delay is None or time.monotonic() + delay > deadline:
                    # the last try may have queued the job: the next schedule asks squeue before sbatch
                    write_new(launch.workdir / UNANSWERED, f"{trouble}\n")
                    raise SubmitLater(f"{trouble} (sbatch tried {tries} time(s) in {self.submit_retry_s:g} s)",
                                      self.submit_limit_retry_s) from trouble  # fmt: skip
                log.warning("launch %s: %s; asking again in %.0f s", launch.name, trouble, delay)
                time.sleep(delay)
                try:
                    found = _queued_job(self._run, launch)
                except _Unreachable as exc:
                    log.warning("launch %s: squeue cannot say whether sbatch queued it: %s", launch.name, exc)
                    continue
                if found is not None:
                    log.warning(
                        "launch %s: %s, but it queued job %s: following it", launch.name, trouble, found
                    )
                    return found
                break

    def _sbatch(self, req: ScriptRequest, launch: LaunchRequest) -> str:
        """One try: the job id; _Unreachable (or _Transient) for a failure worth another try; SubmitLater
        for a submit limit."""
        proc = self._run(["sbatch", "--parsable", str(req.script_path)], env=_submit_env(os.environ))
        if proc.returncode != 0:
            text = _text(proc)
            if _SUBMIT_LIMIT.search(text):
                raise SubmitLater(f"sbatch refused launch {launch.name} for now, at a submit limit (exit "
                                  f"{proc.returncode}): {text}", self.submit_limit_retry_s)  # fmt: skip
            error = _Transient if _TRANSIENT_SBATCH.search(text) else SlurmError
            raise error(f"sbatch refused launch {launch.name} (exit {proc.returncode}): {text}")
        answer = proc.stdout.strip().splitlines()[-1].strip() if proc.stdout.strip() else ""
        try:
            job_id = _checked_id(answer)
        except OtherClusterError as exc:
            # queued there: cancel it there, or it runs with no one to follow, collect or cancel it
            _cancel_elsewhere(self._run, exc)
            raise SlurmError(f"sbatch queued launch {launch.name} as {exc}") from None
        except ValueError:
            raise SlurmError(f"sbatch answered {proc.stdout.strip()!r}, not a job id") from None
        return job_id

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        job_id = _checked_id(backend_id)
        exit_code = read_exit_code(launch.workdir)
        unreachable = ""
        try:
            info = self.job_info(job_id)
        except _Unreachable as exc:
            info, unreachable = None, str(exc)
        if info is not None:
            return _describe(info, exit_code)
        if exit_code is not None:
            return describe_exit(exit_code)
        if unreachable:
            return Description(LaunchState.UNKNOWN, None, f"Slurm did not answer: {unreachable}")
        # The script writes the trial's exit code whatever the trial did: none, Slurm killed the script
        # (scancel, a node lost). Failed, a resumed study quarantined a config that broke nothing.
        return Description(LaunchState.CANCELLED, None, _GONE.format(job_id))

    def job_info(self, job_id: str, until: float | None = None) -> JobInfo | None:
        """Ask squeue, then scontrol (both keep a job MinJobAge after its end), then sacct (accounting),
        each before `until` (see _run). None: Slurm answered and does not know the job. Accounting counts
        only when it says the job ended: it hears of starts and ends from the controller, so it said PENDING
        of a job that ran while the controller was down, and for good of one a controller killed before
        saving its state lost (test cluster). _Unreachable: nobody answered, or accounting not with an end."""
        errors, answered = [], False
        for source in (self._squeue, self._scontrol):
            try:
                info = source(job_id, until)
            except _Unreachable as exc:
                errors.append(str(exc))
                continue
            if info is not None:
                return info
            answered = True
        info = _sacct(partial(self._run, until=until), job_id)  # None where it did not answer either
        if info is not None and _job_ended(info):
            return info
        if answered:  # the controller does not know the job: it neither waits nor runs
            return None
        if info is not None:
            errors.append(f"accounting says {info.state}, maybe not yet told it started")
        raise _Unreachable("; ".join(errors))  # a controller that does not answer says nothing of the job

    def _query(self, argv: list[str], until: float | None) -> str | None:
        """What a job query printed; None: Slurm answered and does not know the job."""
        proc = self._run(argv, until=until)
        if proc.returncode == 0:
            return proc.stdout
        if _invalid_job(proc):
            return None
        raise _Unreachable(f"{argv[0]} exit {proc.returncode}: {_text(proc)}")

    def _squeue(self, job_id: str, until: float | None = None) -> JobInfo | None:
        out = self._query(["squeue", "--json", "--jobs", job_id], until)
        if out is None:
            return None
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise _Unreachable(f"squeue --json printed no JSON ({exc})") from exc
        info = parse_squeue_json(data, job_id)
        if info is None and data.get("errors"):
            # 22.05 with the controller down: exit 0, no jobs, and the trouble in "errors"
            raise _Unreachable(f"squeue: {_json_errors(data['errors'])}")
        return info

    def _scontrol(self, job_id: str, until: float | None = None) -> JobInfo | None:
        out = self._query(["scontrol", "show", "job", job_id], until)
        return None if out is None else parse_scontrol(out, job_id)

    def blameless(self, log: str) -> str | None:
        return srun_unreached(log) or super().blameless(log)

    def how_cancelled(self, backend_id: str) -> str:
        return f"scancel {backend_id}"

    def owns(self, backend_id: str, launch: LaunchRequest) -> bool | None:
        """Executor.owns: a controller that lost its state gives the ids of the jobs it forgot to new ones
        (the test cluster's job 309, twice). Ours: the controller knows it, running or queued, under the
        launch's job name and directory (the name alone is every store's s1-l1)."""
        try:
            info = self.job_info(_checked_id(backend_id))
        except _Unreachable:
            return None
        return info is not None and not _job_ended(info) and _of_launch(info, launch)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        """scancel, then wait (up to cancel_grace_s) until Slurm reports the job ended, so the nodes are
        free and nothing writes into the launch directory any more (`_Cancel`). None: the end is
        confirmed; else which job may still run and what to type, for the launch's stored error."""
        return _Cancel(self, _checked_id(backend_id)).run()

    def _run(
        self, argv: list[str], env: Mapping[str, str] | None = None, until: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`argv`'s answer within command_timeout_s, and before `until` (a time.monotonic()) if given."""
        timeout = self.command_timeout_s
        if until is not None:
            timeout = min(timeout, until - time.monotonic())
            if timeout <= 0:
                raise _Unreachable(f"{argv[0]} not run: no time left")
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError as exc:
            raise _NotInstalled(f"{argv[0]} is not installed here (not on PATH)") from exc
        except subprocess.TimeoutExpired as exc:
            raise _Unreachable(f"{argv[0]} did not answer within {timeout:.0f} s") from exc


class _Cancel:
    """One cancel of a job. A scancel that did not reach the controller is sent again, each half second
    of the grace window: given up at once, a controller blip of a few seconds left the job running (or
    starting later from the queue) on GPU nodes until its time limit, unfollowed, its launch said
    cancelled. Then Slurm is polled until it says the job ended. No command runs past the window's end
    plus one command_timeout_s: a cancel takes at most cancel_grace_s + command_timeout_s."""

    def __init__(self, ex: SlurmExecutor, job_id: str) -> None:
        self.ex, self.job_id = ex, job_id
        self.started = time.monotonic()
        self.grace_end = self.started + ex.cancel_grace_s
        self.limit = self.grace_end + ex.command_timeout_s

    def run(self) -> str | None:
        """None: Slurm says the job ended (or knows it no more); else why it may still run."""
        unreached, tries = self._scancel(), 1
        # one not installed is not found by a later try
        while unreached is not None and not isinstance(unreached, _NotInstalled) and self._open():
            self._pause()
            unreached, tries = self._scancel(), tries + 1
        if unreached is None:
            return self._ended()
        log.warning("scancel %s: %s (%d tries)", self.job_id, unreached, tries)
        return (f"Slurm job {self.job_id} may still run: scancel did not reach the controller ({unreached}; "
                f"tried {tries} time(s) in {time.monotonic() - self.started:.0f} s): run `scancel {self.job_id}` by "
                "hand")  # fmt: skip

    def _scancel(self) -> _Unreachable | None:
        """One scancel; why it did not reach the controller (None: it did, whatever it answered)."""
        try:
            proc = self.ex._run(["scancel", self.job_id], until=self.limit)
        except _Unreachable as exc:
            return exc
        said = _text(proc)
        if proc.returncode != 0 and _TRANSIENT_SBATCH.search(said):  # "Unable to contact slurm controller"
            return _Unreachable(f"scancel exit {proc.returncode}: {said}")
        if proc.returncode != 0:  # e.g. already finished: "Job/step already completing or completed"
            log.info("scancel %s: exit %s: %s", self.job_id, proc.returncode, said)
        return None

    def _ended(self) -> str | None:
        """Poll (at least once) until Slurm says the job ended (None), up to the window's end; else why
        it may still run. A poll nobody answered confirms nothing."""
        while True:
            try:
                info = self.ex.job_info(self.job_id, until=self.limit)
            except _Unreachable as exc:
                why = f"Slurm did not answer whether it ended ({exc})"
            else:
                if info is None or _job_ended(info):
                    return None
                why = f"Slurm still says {info.state}"
            if not self._open():
                break
            self._pause()
        grace = self.ex.cancel_grace_s
        log.warning("Slurm job %s not seen ended %.0f s after scancel: %s", self.job_id, grace, why)
        return (f"Slurm job {self.job_id} may still run: {why} {grace:.0f} s after scancel; check `squeue "
                f"--jobs {self.job_id}` and run `scancel {self.job_id}` if it is there")  # fmt: skip

    def _open(self) -> bool:
        return time.monotonic() < self.grace_end

    def _pause(self) -> None:
        """Half a second between tries (a controller is not hammered), never past the window's end."""
        time.sleep(max(0.0, min(0.5, self.grace_end - time.monotonic())))


# ---------------------------------------------------------------------- reading Slurm's answers


Run = Callable[[list[str]], subprocess.CompletedProcess[str]]  # SlurmExecutor._run


def _of_launch(info: JobInfo, launch: LaunchRequest) -> bool:
    """Whether the controller's job is this launch's: its name, and its directory (sbatch --chdir)."""
    return info.name == job_name(launch.name) and info.workdir in (None, str(launch.workdir))


def _job_ended(info: JobInfo) -> bool:
    return SLURM_STATES.get(info.state, LaunchState.UNKNOWN).is_terminal()


def srun_unreached(log: str) -> str | None:
    """srun's own line when the controller did not answer it before the step started (seen: slurmctld
    down as the job began, "Unable to confirm allocation for job 12: Unable to contact slurm controller"):
    the batch script wrote srun's exit 1, read before as a trial that failed (its env config quarantined)."""
    line = next(
        (x for x in log.splitlines() if _SRUN_UNREACHED.match(x) and _TRANSIENT_SBATCH.search(x)), None
    )
    if line is None:
        return None
    said = line.strip().removeprefix("srun: error: ")
    return f"srun could not start the trial, Slurm did not answer it (not the config's fault): {said}"


def _cancel_elsewhere(run: Run, job: OtherClusterError) -> None:
    """scancel a job sbatch queued on another cluster than the one asked for."""
    argv = ["scancel", f"--clusters={job.cluster}", job.job_id]
    try:
        proc = run(argv)
    except SlurmError as exc:
        log.warning("%s: %s", " ".join(argv), exc)
        return
    if proc.returncode != 0:
        log.warning("%s: exit %s: %s", " ".join(argv), proc.returncode, _text(proc))


def _read_job_id(workdir: Path) -> str | None:
    """The job id schedule() left in the launch's directory, if a readable one is there."""
    try:
        text = (workdir / JOB_ID).read_text(errors="replace").strip()
    except OSError:
        return None
    try:
        return _checked_id(text)
    except ValueError:
        return None


def _queued_job(run: Run, launch: LaunchRequest) -> str | None:
    """The job a failed sbatch may have queued for `launch` all the same: this user's job of the
    launch's name in the launch's directory (so another tuner's job of the same name is never
    taken); None: there is none. _Unreachable if squeue cannot say. Left unfollowed, such a job
    would run later with no one to collect or cancel it."""
    argv = [
        "squeue",
        "--noheader",
        f"--user={os.getuid()}",
        f"--name={job_name(launch.name)}",
        # Ended ones too (the controller keeps them MinJobAge): a short job can be done by the time
        # it is asked for, and a second sbatch would run the launch again.
        "--states=all",
        "--format=%i|%Z",
    ]
    proc = run(argv)
    if proc.returncode != 0:
        raise _Unreachable(f"squeue exit {proc.returncode}: {_text(proc)}")
    ids = []
    for line in proc.stdout.splitlines():
        job_id, _, workdir = line.strip().partition("|")
        if workdir == str(launch.workdir) and job_id.isdigit():
            ids.append(job_id)
    if len(ids) > 1:
        raise SlurmError(f"squeue shows {len(ids)} jobs named {job_name(launch.name)} in {launch.workdir}: "
                         "not one to follow")  # fmt: skip
    return ids[0] if ids else None


def parse_squeue_json(data: Mapping[str, Any], job_id: str) -> JobInfo | None:
    """The job in `squeue --json` output. 22.05 ignores --jobs (every job comes back) and gives
    `job_state` as a string and `exit_code` as a wait status; newer versions give lists and objects."""
    for job in data.get("jobs") or []:
        if str(job.get("job_id")) != job_id and _array_id(job) != job_id:
            continue
        raw = job.get("job_state")
        states = [raw] if isinstance(raw, str) else [s for s in (raw or []) if isinstance(s, str)]
        if not states:
            return JobInfo("UNKNOWN", "no job_state in squeue output")
        state = next((s for s in states if s in SLURM_STATES and s != "COMPLETING"), states[0])
        exit_code, signal = _exit_status(job.get("exit_code"))
        reason = job.get("state_reason") or ""
        name, workdir = job.get("name"), job.get("current_working_directory")
        return JobInfo(state, "" if reason == "None" else str(reason), exit_code, signal, "squeue",
                       name if isinstance(name, str) else None, workdir if isinstance(workdir, str) else None)  # fmt: skip
    return None


def _array_id(job: Mapping[str, Any]) -> str | None:
    task = job.get("array_task_id")
    if isinstance(task, dict):
        task = task.get("number") if task.get("set") else None
    return f"{job.get('array_job_id')}_{task}" if task is not None else None


def _exit_status(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal). 22.05: an int wait status (256 = exit 1, 9 = SIGKILL). Newer:
    {"status": [...], "return_code": N or {"set", "number"}, "signal": {"id": ...}}."""
    if isinstance(value, bool) or value is None:
        return None, None
    if isinstance(value, int):
        return (value >> 8) & 0xFF, (value & 0x7F) or None
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        sig = value.get("signal")
        signal = _number(sig.get("id") if isinstance(sig, dict) else sig)
        return code, signal or None
    return None, None


def _number(value: Any) -> int | None:
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set", True) and "number" in value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_scontrol(text: str, job_id: str) -> JobInfo | None:
    fields_ = dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", text))
    if fields_.get("JobId") != job_id.split("_")[0] and fields_.get("ArrayJobId") is None:
        return None
    state = fields_.get("JobState", "UNKNOWN")
    reason = fields_.get("Reason", "")
    code, signal = _split_exit(fields_.get("ExitCode", ""))
    return JobInfo(state, "" if reason == "None" else reason, code, signal, "scontrol", fields_.get("JobName"),
                   fields_.get("WorkDir"))  # fmt: skip


def _sacct(run: Run, job_id: str) -> JobInfo | None:
    """Accounting, for jobs older than MinJobAge. Most test clusters have none: that is 'unknown'."""
    try:
        proc = run(["sacct", "--jobs", job_id, "--allocations", "--noheader", "--parsable2",
                    "--format=JobID,State,ExitCode"])  # fmt: skip
    except SlurmError:
        return None
    if proc.returncode != 0:
        return None
    return parse_sacct(proc.stdout, job_id)


def parse_sacct(text: str, job_id: str) -> JobInfo | None:
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 3 and parts[0] == job_id:
            state = parts[1].split()[0] if parts[1].strip() else "UNKNOWN"  # "CANCELLED by 0"
            code, signal = _split_exit(parts[2])
            return JobInfo(state, "", code, signal, "sacct")
    return None


def _split_exit(text: str) -> tuple[int | None, int | None]:
    """Slurm's "EXIT:SIGNAL" (e.g. "1:0", "0:9")."""
    match = re.match(r"^(\d+):(\d+)$", text.strip())
    if not match:
        return None, None
    return int(match.group(1)), int(match.group(2)) or None


def _describe(info: JobInfo, exit_code: int | None) -> Description:
    state = SLURM_STATES.get(info.state, LaunchState.UNKNOWN)
    if state == LaunchState.UNKNOWN:
        return Description(state, None, f"Slurm state {info.state!r} is not one we know")
    if not state.is_terminal():
        if exit_code is not None:  # the trial is over; Slurm is finishing the job around it
            return describe_exit(exit_code)
        if state == LaunchState.PENDING:  # what the launch waits on, in Slurm's words ("PENDING: Priority")
            return Description(
                state, None, f"Slurm {info.state}" + (f": {info.reason}" if info.reason else "")
            )
        return Description(state, None, info.reason)
    if info.state in ("COMPLETED", "FAILED"):
        # The batch script exits with the trial's code. 1 means "some candidate failed": the launch ran
        # (whether it wrote a result is checked on collection).
        code = exit_code if exit_code is not None else info.exit_code
        if info.signal and exit_code is None:
            return Description(
                LaunchState.FAILED, code, f"the batch script was killed by signal {info.signal}"
            )
        desc = describe_exit(code) if code is not None else Description(state, None, info.reason)
        if exit_code is None:  # the script ran to its end, so it wrote one: this host may not see it yet
            desc.settling = True
            desc.reason = "; ".join(filter(None, (desc.reason, _NOT_SEEN.format(info.state))))
        return desc
    why = _WHY.get(info.state, info.state)
    return Description(
        state, exit_code, f"{why} (Slurm {info.state}{', ' + info.reason if info.reason else ''})"
    )


_GONE = ("Slurm job {} is gone (ended more than MinJobAge ago, no accounting) and left no exit code: Slurm "
         "ended it before the trial did (nothing says its config did)")  # fmt: skip
_NOT_SEEN = ("Slurm says {} but the launch's exit_code file is not visible on this host (on NFS, mount the "
             "launch directory with lookupcache=positive or a short actimeo)")  # fmt: skip


def _json_errors(errors: Any) -> str:
    if not isinstance(errors, list):
        return str(errors)[:300]
    return "; ".join(
        f"{e.get('source', '')}: {e.get('description') or e.get('error', '')}".strip(": ")
        if isinstance(e, dict)
        else str(e)
        for e in errors
    )[:500]


def _invalid_job(proc: subprocess.CompletedProcess[str]) -> bool:
    return "invalid job id" in (proc.stderr + proc.stdout).lower()


def _text(proc: subprocess.CompletedProcess[str]) -> str:
    return " ".join((proc.stderr.strip() or proc.stdout.strip() or "(no output)").split())[:500]


# ---------------------------------------------------------------------- small helpers


def _submit_env(environ: Mapping[str, str]) -> dict[str, str]:
    """sbatch hands its environment to the job. Like the local executor, drop the comm variables we
    happen to have (the baseline must mean "no overrides"), the context of any job the tuner itself
    runs in (SLURM_*, except where the client finds its config), and the SBATCH_/SALLOC_/SRUN_ input
    variables, which beat the script's own lines (SBATCH_ARRAY_INX=0-2 ran a launch three times in one
    directory; SBATCH_PARTITION overrode the partition option), and the tuner's host's own device
    pinning (CUDA_VISIBLE_DEVICES and the like: `_HOST_DEVICES`). AUTOTUNER_DISABLE=1 from the start:
    a site's TaskProlog runs for the batch step before the script could export it, and put the served
    config into every trial, the baseline too."""
    kept = {k: v for k, v in without_comm_env(environ).items()
            if (not k.startswith(_SLURM_INPUT) or k == "SLURM_CONF") and k not in _HOST_DEVICES}  # fmt: skip
    return {**kept, "AUTOTUNER_DISABLE": "1"}


_SLURM_INPUT = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")
# The devices of the tuner's own host it may use: the job's nodes are other hosts. Slurm sets
# CUDA_VISIBLE_DEVICES only for a job given GPU GRES; on a partition without, the head node's indices ran
# the trial on those GPUs of each node (enroot/pyxis read NVIDIA_VISIBLE_DEVICES the same way).
_HOST_DEVICES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                           "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK"})  # fmt: skip


class OtherClusterError(ValueError):
    """sbatch answered "ID;cluster": the job went to another cluster (--clusters / -M, or a site's
    cli_filter), where squeue, scontrol, sacct and scancel of the default cluster cannot see it."""

    def __init__(self, job_id: str, cluster: str) -> None:
        super().__init__(
            f"job {job_id} on cluster {cluster!r}: multi-cluster submission is not supported (the job would be "
            "followed and cancelled on the default cluster); run the tuner or the service on that cluster"
        )
        self.job_id, self.cluster = job_id, cluster


def _checked_id(backend_id: str) -> str:
    """The job id, checked before it reaches a command line. "ID;cluster" is refused, not cut to ID:
    that ID names no job (or another one) on the default cluster that every command asks."""
    match = re.match(r"^([0-9]+(?:_[0-9]+)?)(?:;([A-Za-z0-9_.-]+))?$", str(backend_id))
    if not match:
        raise ValueError(f"{backend_id!r} is not a Slurm job id")
    if match.group(2):
        raise OtherClusterError(match.group(1), match.group(2))
    return match.group(1)
