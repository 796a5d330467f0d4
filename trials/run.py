"""Trial entry point: `torchrun ... -m trials.run --spec SPEC.json --out RESULT.json`.

Validates the spec before importing torch or joining a process group, measures every candidate in
this one process environment, and has rank 0 write the result. Exit codes: 0 all candidates ok,
1 some candidate failed (rank 0 only: the others exit 0), 2 bad spec or arguments, 3 the launch
itself failed.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # before the heavy imports: they are part of start-up cost

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from trials.result import (  # noqa: E402
    EXIT_BAD_INPUT,
    EXIT_CANDIDATE_FAILED,
    EXIT_LAUNCH_FAILED,
    EXIT_OK,
    RESULT_MARKER,
    SCHEMA_VERSION,
    collect_env,
    write_json_atomic,
)
from trials.spec import SpecError, load_spec  # noqa: E402
from trials.table import format_table  # noqa: E402
from trials.watchdog import Watchdog, deadline_s  # noqa: E402

if TYPE_CHECKING:
    from trials.runner import TrialRunner  # imported in main: torch, torchrec, fbgemm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trials.run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="trial spec (JSON)")
    parser.add_argument("--out", required=True, help="where rank 0 writes the result (JSON)")
    parser.add_argument("--quiet", action="store_true", help="no table on stdout")
    parser.add_argument(
        "--print-result",
        action="store_true",
        help=f"also print the result as one line '{RESULT_MARKER} {{json}}' (where no shared disk exists, e.g. k8s)",
    )
    args = parser.parse_args(argv)

    launch_env = collect_env(os.environ)  # what the launcher gave us, before we add anything
    rank = int(os.environ.get("RANK", "0"))
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        if rank == 0:
            print(f"trials.run: bad spec: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    runners = _import_runner(args.out, launch_env, rank)  # torch, torchrec, fbgemm: seconds of imports
    if runners is None:
        return EXIT_LAUNCH_FAILED
    limit = deadline_s(runners.PG_TIMEOUT.total_seconds(), rank)
    started: list[TrialRunner] = []
    watchdog = Watchdog(
        limit, _on_stall(args, rank, launch_env, started), exit_code=EXIT_LAUNCH_FAILED
    ).start()
    runner = runners.TrialRunner(spec, _STARTED, launch_env, watchdog)
    started.append(runner)
    try:
        result = runner.run()
    except Exception as exc:
        # Rank 0 writes; also every rank that failed before the process group formed (the launcher
        # may stop rank 0 before it gets there; the error is the same on every rank).
        if rank == 0 or not runner.joined:
            write_json_atomic(args.out, error_result(f"{type(exc).__name__}: {exc}", launch_env))
        print(f"trials.run: launch failed on rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
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
        write_json_atomic(args.out, result)
        if not args.quiet:
            print(format_table(result))
        if args.print_result:
            print(f"{RESULT_MARKER} {json.dumps(result, separators=(',', ':'))}", flush=True)
    # Rank 0's code alone says "some candidate failed": the other ranks ran the launch and are done. A
    # non-zero exit of theirs made torchrun (or srun --kill-on-bad-exit, or a Kubernetes Job) stop rank 0
    # before it had written the result, and every candidate measured was lost.
    return EXIT_CANDIDATE_FAILED if failed and rank == 0 else EXIT_OK


def _import_runner(out: str, launch_env: dict[str, str], rank: int) -> Any:
    """trials.runner, or None when it cannot be imported on this node (a broken torch, torchrec or
    fbgemm): then every rank writes an error result saying so and the launch exits 3, where an uncaught
    error exited 1, which reads as "the launch ran, some candidate failed"."""
    try:
        import trials.runner
    except Exception as exc:
        error = f"cannot start the trial: {type(exc).__name__}: {exc}"
        write_json_atomic(out, error_result(error, launch_env))  # no process group: each rank alike
        print(f"trials.run: launch failed on rank {rank}: {error}", file=sys.stderr)
        return None
    return trials.runner


def _on_stall(
    args: argparse.Namespace, rank: int, launch_env: dict[str, str], runner: list[TrialRunner]
) -> Callable[[str], None]:
    """What rank 0 writes when the watchdog fires: the candidates measured before a rank hung (out of
    memory at a big batch, say) with the rest failed, else an error result."""

    def stalled(message: str) -> None:
        if rank != 0:
            if runner:
                runner[0].hand_over_nccl_log()
            return
        partial = runner[0].stalled_result(message) if runner else None
        result = partial or error_result(f"TrialStalled: {message}", launch_env)
        write_json_atomic(args.out, result)
        if args.print_result:
            print(f"{RESULT_MARKER} {json.dumps(result, separators=(',', ':'))}", flush=True)
        if runner:  # after the result, which reads the log
            runner[0].hand_over_nccl_log()

    return stalled


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
