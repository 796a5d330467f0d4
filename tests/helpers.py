"""What the test modules share that is not a fixture: paths, the landscape the replay tests answer
from, the smallest real trial spec, skips that fail in CI, a fresh PostgreSQL database. Fixtures live
in the conftest.py files (no module imports a conftest: ruff's TID251 says so)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
# Real trial results of a whole grid (tests/data), answered by the replay executor: the one landscape
# every replay test uses.
LANDSCAPE = DATA / "landscape-small.json"

# The smallest trial spec that runs for real on 2 CPU ranks in a few seconds.
TINY_SPEC = {
    "workload": {"name": "w", "tables": [{"name": f"t{i}", "num_embeddings": 500, "embedding_dim": 32,
                                          "pooling_factor": 2} for i in range(2)]},
    "candidates": [{"fwd_precision": "fp16", "bwd_precision": "fp16", "batch_size": 32}],
    "warmup": 1,
    "iterations": 3,
}  # fmt: skip


def at_rate(measured: dict, samples_per_s: float, world_size: int) -> dict:
    """A recorded candidate result as if it had run at `samples_per_s`: its median step changed to
    match, as the trial computes one from the other (a result where they disagree is refused)."""
    step_ms = measured["batch_size"] * world_size * 1000 / samples_per_s
    return {**measured, "samples_per_s": samples_per_s, "iter_ms": {**measured["iter_ms"], "median": step_ms}}


def launches_when(store, study_name: str, ready, proc, timeout_s: float, what: str) -> list:
    """Poll a study's launches until `ready(launches)` (the tuner `proc` must stay alive meanwhile);
    fail naming `what` never happened within the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = store.study(study_name)
        launches = store.launches(study.id) if study else []
        if ready(launches):
            return launches
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    pytest.fail(f"{what} within {timeout_s:.0f} s")


def required(kind: str) -> bool:
    wanted = {w.strip() for w in os.environ.get("AUTOTUNER_REQUIRE", "").split(",") if w.strip()}
    return "all" in wanted or kind in wanted


def skip_or_fail(kind: str, reason: str) -> None:
    """Skip with a reason locally; fail in CI where `kind` is required."""
    if required(kind):
        pytest.fail(f"{kind} is required here (AUTOTUNER_REQUIRE) but unavailable: {reason}")
    pytest.skip(reason)


def fresh_postgres_database(base_url: str) -> str:
    """A new empty database on the test server, so tests never see each other's rows."""
    import uuid

    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.engine.make_url(base_url).set(database=name).render_as_string(hide_password=False)


def at_once(target: Any, args: tuple, processes: int, timeout_s: float = 300) -> list[str]:
    """`target(*args, barrier, errors)` in `processes` forked processes released together: each waits on
    `barrier` before its racing step and puts every failure on `errors`. The failures, and one for each
    process that did not end with 0."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, errors = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, errors)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=timeout_s)
    found = []
    while not errors.empty():
        found.append(errors.get())
    return found + [f"process {proc.pid} ended with {proc.exitcode}" for proc in procs if proc.exitcode != 0]


def run_ranks(cmd: list[str], deadline_s: float, what: str, **extra: str) -> tuple[str, str]:
    """Run a torchrun command line (its ranks' AUTOTUNER_* environment cleared, then `extra`) to its end: (stdout,
    stderr). Past `deadline_s` its whole session is killed (torchrun and every rank) and the test fails
    naming `what`; a non-zero exit fails it too."""
    import signal
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    env.update(extra, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{what} still running after {deadline_s} s:\n{out[-2000:]}\n{err[-4000:]}")
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    return out, err


class WaitClock:
    """`time` for Executor.wait: sleeping moves it on, and nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def kill_carrying(name: str, value: str, deadline_s: float = 5.0) -> None:
    """SIGKILL every process whose environment holds `name=value` (what a test's run left), until none
    is left or the deadline passes."""
    import signal

    from autotuner.executors.local.executor import carrying, signal_all

    deadline = time.monotonic() + deadline_s
    while (left := carrying(name, value)) and time.monotonic() < deadline:
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)


def by_hand(store: Any, *statements: str) -> None:
    """`statements` run on the store's database in one transaction, as a hand at its console would."""
    from sqlalchemy import text

    with store.engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
