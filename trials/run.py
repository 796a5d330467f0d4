"""Trial entry point: `torchrun ... -m trials.run --spec SPEC.json --out RESULT.json`.

Validates the spec (against the launch's WORLD_SIZE too) and probes --out before importing torch or
joining a process group, measures every candidate in this one process environment, and has rank 0
write the result: what it measured even when the launch stops mid-way (a stall, a dead peer, the
launcher's SIGTERM). Exit codes: 0 all candidates ok, 1 some candidate failed (rank 0 only: the others
exit 0), 2 bad spec or arguments (an --out that cannot be written among them), 3 the launch itself
failed (also: its result could not be written).
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # before the heavy imports: they are part of start-up cost

import argparse  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from trials.result import (  # noqa: E402
    EXIT_BAD_INPUT,
    EXIT_CANDIDATE_FAILED,
    EXIT_LAUNCH_FAILED,
    EXIT_OK,
    RESULT_MARKER,
    SCHEMA_VERSION,
    UNWRITTEN,
    collect_env,
    strict_json,
    write_json_atomic,
)
from trials.spec import SpecError, load_spec, world_problem  # noqa: E402
from trials.table import format_table  # noqa: E402
from trials.watchdog import Watchdog, deadline_s  # noqa: E402

if TYPE_CHECKING:
    from trials.runner import TrialRunner  # imported in main: torch, torchrec, fbgemm


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)

    launch_env = collect_env(os.environ)  # what the launcher gave us, before we add anything
    rank = int(os.environ.get("RANK", "0"))
    try:
        spec = load_spec(args.spec)
        world_problem(spec, int(os.environ.get("WORLD_SIZE", "1")))
    except SpecError as exc:
        if rank == 0:
            print(f"trials.run: bad spec: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if problem := unwritable(args.out):  # found now, not after every candidate was measured
        print(f"trials.run: bad --out on rank {rank}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT

    report = Reporter(args, rank, launch_env)
    runners = _import_runner(report)  # torch, torchrec, fbgemm: seconds of imports
    if runners is None:
        return EXIT_LAUNCH_FAILED
    limit = deadline_s(runners.PG_TIMEOUT.total_seconds(), rank)
    watchdog = Watchdog(limit, report.stalled, exit_code=EXIT_LAUNCH_FAILED).start()
    runner = report.runner = runners.TrialRunner(spec, _STARTED, launch_env, watchdog)
    if rank == 0:
        report.watch_sigterm()
    try:
        result = runner.run()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        # Rank 0 writes (what it measured before, when it measured some: a peer that died mid-launch
        # breaks rank 0's next collective); also every rank that failed before the process group
        # formed (the launcher may stop rank 0 before it gets there; the error is the same everywhere).
        if rank == 0 or not runner.joined:
            report.write(report.failed(error, "failed"))
        print(f"trials.run: launch failed on rank {rank}: {error}", file=sys.stderr)
        return EXIT_LAUNCH_FAILED
    finally:
        watchdog.beat("shutting down")
        runner.close()
        watchdog.stop()

    failed = [c for c in result["candidates"] if c["status"] != "ok"]
    result["status"] = (
        "ok" if not failed else ("failed" if len(failed) == len(result["candidates"]) else "partial")
    )
    if rank == 0:
        if not report.write(result, table=not args.quiet):
            return EXIT_LAUNCH_FAILED
    # Rank 0's code alone says "some candidate failed": the other ranks ran the launch and are done. A
    # non-zero exit of theirs made torchrun (or srun --kill-on-bad-exit, or a Kubernetes Job) stop rank 0
    # before it had written the result, and every candidate measured was lost.
    return EXIT_CANDIDATE_FAILED if failed and rank == 0 else EXIT_OK


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trials.run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="trial spec (JSON)")
    parser.add_argument("--out", required=True, help="where rank 0 writes the result (JSON)")
    parser.add_argument("--quiet", action="store_true", help="no table on stdout")
    parser.add_argument(
        "--print-result",
        action="store_true",
        help=f"also print the result as one line '{RESULT_MARKER} {{json}}' (where no shared disk exists, e.g. k8s)",
    )
    return parser.parse_args(argv)


def unwritable(out: str) -> str | None:
    """Why the result cannot be written to `out` (None: it can): its folder made if missing, a file
    created and removed there, as write_json_atomic will."""
    target = Path(out)
    if target.is_dir():
        return f"{out} is a directory, not a file to write the result to"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # a random part too: every rank of every node probes one shared folder, and pids repeat across
        # nodes (and in containers with their own pid namespace)
        probe = target.with_name(f".{target.name}.probe{os.getpid()}-{os.urandom(6).hex()}")
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return f"cannot write the result to {out}: {exc.strerror or exc}"
    return None


def _import_runner(report: Reporter) -> Any:
    """trials.runner, or None when it cannot be imported on this node (a broken torch, torchrec or
    fbgemm): then every rank writes an error result saying so and the launch exits 3, where an uncaught
    error exited 1, which reads as "the launch ran, some candidate failed"."""
    try:
        import trials.runner
    except Exception as exc:
        error = f"cannot start the trial: {type(exc).__name__}: {exc}"
        report.write(error_result(error, report.launch_env))  # no process group: each rank alike
        print(f"trials.run: launch failed on rank {report.rank}: {error}", file=sys.stderr)
        return None
    return trials.runner


class Reporter:
    """What a rank leaves of the launch, written once whoever gets there first: the main thread (the
    launch ran, or failed), the watchdog's thread (a stall) or, on rank 0, the thread that sees the
    launcher's SIGTERM (torchrun stops the survivors when a peer dies, Slurm and Kubernetes at a time
    limit). The last two may write while the main thread waits inside a collective: they only read what
    the runner holds (no collective, nothing that takes a lock the main thread may hold)."""

    def __init__(self, args: argparse.Namespace, rank: int, launch_env: dict[str, str]) -> None:
        self.args = args
        self.rank = rank
        self.launch_env = launch_env
        self.runner: TrialRunner | None = None
        self._lock = threading.Lock()
        self._written = False

    def failed(self, error: str, how: str) -> dict[str, Any]:
        """The candidates measured before the launch stalled or failed with the rest failed, naming
        `error` (TrialRunner.stalled_result); an error result when none was measured."""
        partial = self.runner.stalled_result(error, how) if self.runner is not None else None
        prefix = "TrialStalled: " if how == "stalled" else ""
        return partial or error_result(prefix + error, self.launch_env)

    def write(self, result: dict[str, Any], table: bool = False) -> bool:
        """Write `result` (and print its marker line with --print-result, error results too: the
        Kubernetes executor reads nothing else); False when it cannot be written. Only the first call
        writes: a later one (a stall or a SIGTERM racing the end of the launch) leaves it."""
        with self._lock:
            if self._written:
                return True
            self._written = True
            if self.args.print_result:
                print(f"{RESULT_MARKER} {strict_json(result, separators=(',', ':'))}", flush=True)
            try:
                write_json_atomic(self.args.out, result)
            except (OSError, ValueError) as exc:
                print(
                    f"{UNWRITTEN} {self.args.out}: {exc}",
                    file=sys.stderr,
                    flush=True,
                )
                return False
            if table:
                print(format_table(result))
            return True

    def stalled(self, message: str) -> None:
        """The watchdog's on_stall: rank 0 writes the candidates measured before a rank hung (out of
        memory at a big batch, say) with the rest failed, else an error result."""
        if self.rank == 0:
            self.write(self.failed(message, "stalled"))
        if self.runner is not None:  # after the result, which reads the log
            self.runner.hand_over_nccl_log()

    def watch_sigterm(self) -> None:
        """On SIGTERM write what was measured, then leave with exit 3. Python runs a signal's handler in
        the main thread between bytecodes, never while it waits inside a collective (which is where a
        survivor is when its peer died): the C-level handler's byte on the wakeup fd reaches this thread."""
        if threading.current_thread() is not threading.main_thread():
            return  # signals are set from the main thread only (main() called from a test's thread)
        readable, writable = os.pipe()
        os.set_blocking(writable, False)
        signal.signal(signal.SIGTERM, lambda *_: None)  # the thread below acts on it
        signal.set_wakeup_fd(writable, warn_on_full_buffer=False)
        threading.Thread(target=self._on_sigterm, args=(readable,), name="trial-sigterm", daemon=True).start()

    def _on_sigterm(self, readable: int) -> None:
        while signal.SIGTERM not in os.read(readable, 64):
            pass
        message = "the launcher stopped the launch (SIGTERM): a peer rank failed, or a time limit"
        try:
            self.write(self.failed(message, "failed"))
        finally:
            print(f"trials.run: {message}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_LAUNCH_FAILED)


def error_result(error: str, launch_env: dict[str, str]) -> dict[str, object]:
    return {"schema_version": SCHEMA_VERSION, "status": "error", "error": error, "env": launch_env}


if __name__ == "__main__":
    code = main()
    # Leave without interpreter finalisation: once the result is written, destructors of torch's
    # C++ threads can abort a rank at exit ("terminate called without an active exception", seen
    # on gloo), and the launcher, Slurm's accounting included, then records a finished trial as FAILED.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
