"""Several processes opening one fresh store at once (issue 21): our schema and Optuna's are created once,
whoever comes first, and nobody fails for it. The first study after `autotuner serve` met this race
(the dashboard's insights and the scheduler both creating Optuna's tables: `UNIQUE constraint failed:
alembic_version.version_num`), and so did six `autotuner tune` started together (3 of 6 exited 1)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import LANDSCAPE, REPO, at_once

OPENERS = 6

# Each child imports everything, says so, waits for the word, then opens the store the way the
# service's processes do: our Store (migrations), then Optuna's storage, then an Optuna study.
CHILD = r"""
import sys
import optuna
from autotuner.store import Store
from autotuner.tuning import optuna_storage
print("ready", flush=True)
sys.stdin.readline()
url, name = sys.argv[1], sys.argv[2]
store = Store(url)
storage = optuna_storage(url)
optuna.create_study(storage=storage, study_name=name).optimize(lambda t: t.suggest_int("x", 0, 3), n_trials=2)
store.dispose()
print("done", flush=True)
"""


def start_together(argvs: list[list[str]], timeout_s: float = 120) -> list[subprocess.CompletedProcess]:
    """Start every process, wait until each says it is ready, then release them all at once."""
    procs = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO) for argv in argvs]  # fmt: skip
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def test_processes_opening_one_fresh_store_at_once_all_succeed(store_url):
    results = start_together([[sys.executable, "-c", CHILD, store_url, f"study-{i}"] for i in range(OPENERS)])
    failures = [r.stderr[-1500:] for r in results if r.returncode != 0 or "done" not in r.stdout]
    assert failures == []


def test_autotuner_tune_started_together_on_one_fresh_store(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    space = tmp_path / "space.json"  # points the recorded landscape has
    space.write_text(json.dumps({"env": {"NCCL_NSOCKS_PERTHREAD": [None, 4]}, "precisions": [["fp32", "fp32"]],
                                 "batch_sizes": [64], "force_inert": ["NCCL_NSOCKS_PERTHREAD"]}))  # fmt: skip
    # everything imported before the gate, so that all of them reach the fresh store at the same moment
    gate = ("import sys, optuna, autotuner.cli.commands, autotuner.executors, autotuner.store, autotuner.tuning; "
            "from autotuner.__main__ import main; print('ready', flush=True); sys.stdin.readline(); ")  # fmt: skip
    argvs = [[sys.executable, "-c", gate + "sys.argv = ['autotuner', *sys.argv[1:]]; main()",
              "tune", "--cluster", "cpu-box", "--workload", str(workload), "--space", str(space), "--study", f"s{i}",
              "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "1", "--confirm-rounds", "0", "--no-publish",
              "--ladder-rounds", "0", "--quality-samples", "0", "--workdir", str(tmp_path / f"runs{i}"), "--db", db]
             for i in range(OPENERS)]  # fmt: skip
    results = start_together(argvs, timeout_s=300)
    assert [(r.returncode, r.stderr[-800:]) for r in results if r.returncode != 0] == []


def _open_each(paths: list[str], barrier, errors) -> None:
    from sqlalchemy import text

    from autotuner.store.db import make_engine

    for path in paths:
        barrier.wait(timeout=60)
        engine = make_engine(f"sqlite:///{path}")
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # every failure is the finding
            errors.put(f"{path}: {exc}")
        finally:
            engine.dispose()


def test_connections_opening_fresh_sqlite_files_at_once_wait_for_the_wal_switch(tmp_path):
    """SQLite answers `database is locked` at once, without its busy timeout, to processes switching a
    fresh file to WAL together (CI failed the test above so, once in many runs; 8 openers of 40 fresh
    files failed 20 times here). Many fresh files, so that the race is met in every run."""
    files = 30
    paths = [str(tmp_path / f"fresh-{i}.db") for i in range(files)]
    assert at_once(_open_each, (paths,), processes=8) == []
