"""CLI defects a reviewer reproduced (each test below failed on the code before its fix): `configs show`
printing what the service and the hook refuse to export, a pin of a version REST refuses, a failed
re-validation never shown, stored text read as Rich markup, `revalidate` saying "regressed" when the
store did not answer, `tune --study` dropping the options given, in-memory and empty store URLs, and
a closed stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from autotuner.cli.commands import app
from autotuner.store import Store, ValidationState
from tests.autotuner.test_cli import db, tuned  # noqa: F401 (fixtures)
from tests.helpers import LANDSCAPE, REPO


def separate_streams() -> CliRunner:
    """A runner whose result has stdout and stderr apart: click before 8.2 mixes them unless told (the
    floor of the dependencies, `make test-min`); 8.2 keeps them apart and has no such argument."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


runner = separate_streams()
HOSTILE_ENV = {"NCCL_SOCKET_IFNAME": "eth0\nLD_PRELOAD=/tmp/evil.so", "LD_LIBRARY_PATH": "/tmp/x"}


def set_env(db: str, version: int, env: dict) -> None:  # noqa: F811
    """What a hand (or an older version) wrote in a stored config's env."""
    store = Store(db)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE at_configs SET env = ? WHERE version = ?", (json.dumps(env), version))
    store.dispose()


def publish_v2(db: str) -> None:  # noqa: F811
    """A second, clean version of cpu-box/small, served (v1 is no longer the latest)."""
    store = Store(db)
    v1 = store.served_config("cpu-box", "small")
    store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, fwd_precision="fp32",
                         bwd_precision="fp32", batch_size=64, sharding=v1.sharding, pipeline=v1.pipeline,
                         evidence={"speedup": 1.1}, study_id=v1.study_id)  # fmt: skip
    store.dispose()


def cli(*args: str, closed_stdout: bool = False, **env: str) -> subprocess.CompletedProcess:
    """`autotuner ARGS` in its own process: stdout and stderr apart, stdout closed (`>&-`) if asked."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    shell = 'exec "$@" >&-' if closed_stdout else 'exec "$@"'
    return subprocess.run(["bash", "-c", shell, "bash", sys.executable, "-m", "autotuner", *args], cwd=REPO,
                          capture_output=not closed_stdout, stderr=subprocess.PIPE if closed_stdout else None,
                          text=True, timeout=120, env={**clean, **env})  # fmt: skip


# ---------------------------------------------------------------- 1: the export check


@pytest.mark.parametrize("fmt", ["sh", "slurm", "json"])
def test_configs_show_prints_only_what_the_check_passes_and_names_the_rest(tuned, db, fmt):  # noqa: F811
    set_env(db, 1, HOSTILE_ENV)
    result = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", fmt, "--db", db])
    assert result.exit_code == 2, result.output  # before: 0 with the lines below (slurm: a ValueError)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "LD_PRELOAD" not in result.stdout
    assert "LD_LIBRARY_PATH" not in result.stdout
    assert "NCCL_SOCKET_IFNAME" not in result.stdout
    if fmt != "json":
        assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in result.stdout  # the rest passes
    assert "not printed: LD_LIBRARY_PATH" in result.stderr
    assert "not printed: NCCL_SOCKET_IFNAME" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["pin", "cpu-box", "small", "v1"], ["rollback", "cpu-box", "small"]])
def test_a_version_the_service_refuses_to_serve_is_not_pinned(tuned, db, command):  # noqa: F811
    publish_v2(db)
    set_env(db, 1, HOSTILE_ENV)
    result = runner.invoke(app, ["configs", *command, "--db", db])
    assert result.exit_code == 2, result.output  # before: 0, v1 pinned, served by nothing (REST: 409)
    assert "version 1 cannot be served (" in result.stderr
    assert "LD_LIBRARY_PATH" in result.stderr
    assert "nothing changed" in result.stderr
    store = Store(db)
    served = store.served_config("cpu-box", "small")
    assert (served.version, served.pinned) == (2, False)
    store.dispose()
    clean = runner.invoke(app, ["configs", "pin", "cpu-box", "small", "v2", "--db", db])
    assert clean.exit_code == 0, clean.output
    assert "serving cpu-box/small (1 node) version 2 (pinned)" in clean.stderr


# ---------------------------------------------------------------- 2: a failed re-validation


def test_a_flagged_version_is_marked_in_the_tables_and_said_by_configs_show(tuned, db):  # noqa: F811
    store = Store(db)
    v1 = store.served_config("cpu-box", "small")
    store.pin_config("cpu-box", "small", 1, 1)
    row, _ = store.request_validation(v1.id, "manual", "test")
    store.finish_validation(row.id, ValidationState.FAILED, result={"why": "0.91x [/] of the baseline"},
                            action="kept: pinned")  # fmt: skip
    store.dispose()
    for args in (["configs"], ["configs", "history", "cpu-box", "small"]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, result.output
        assert "flagged" in result.stdout  # before: "v1 pinned ... 4.40x", no mark
        assert f"re-validation {row.id} failed: 0.91x [/] of the baseline" in result.stderr
    shown = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", "sh", "--db", db])
    assert shown.exit_code == 0, shown.output
    assert (
        f"flagged: v1 re-validation {row.id} failed: 0.91x [/] of the baseline; kept: pinned" in shown.stderr
    )
    assert "flagged" not in shown.stdout  # the export lines stay clean


# ---------------------------------------------------------------- 3: stored text is not markup


def test_stored_text_with_markup_is_shown_as_it_is(tuned, db):  # noqa: F811
    set_env(db, 1, {"NCCL_SOCKET_IFNAME": "[/]eth0"})
    store = Store(db)
    study = store.studies()[0]
    outcome = {**study.outcome, "decision": "published: exit 1 [/] [bold]all checks passed"}
    store.update_study(study.id, outcome=outcome)
    with (
        store.engine.begin() as conn
    ):  # the best candidate's env, as a trial's words (short: 4 columns fit 80)
        conn.exec_driver_sql("UPDATE at_candidates SET env = ? WHERE id = ?",
                             (json.dumps({"NCCL_ALGO": "[/]"}), study.best_candidate_id))  # fmt: skip
    store.dispose()
    for args in (["configs"], ["configs", "history", "cpu-box", "small"]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, result.output  # before: MarkupError
        assert "/]eth0" in result.stdout  # as stored (folded at 80 columns)
    resumed = runner.invoke(app, ["tune", "--study", study.name, "--db", db])
    assert resumed.exit_code == 0, resumed.output  # before: MarkupError
    said = resumed.stdout + resumed.stderr
    assert "NCCL_ALGO=[/]" in said
    assert "published: exit 1 [/] [bold]all checks passed" in said


def test_serve_shows_a_bad_setting_with_markup_on_one_line(tmp_path):
    result = cli(
        "serve", "--no-scheduler", AUTOTUNER_DATA_DIR=str(tmp_path), AUTOTUNER_REVALIDATE_EVERY="[/]"
    )
    assert result.returncode == 2, result.stderr  # before: a MarkupError traceback
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: AUTOTUNER_REVALIDATE_EVERY: '[/]' is not a duration: use e.g. 7d, 12h, 30m, 3600s (or off)"
    ]


# ---------------------------------------------------------------- 4: revalidate's exit codes


def test_revalidate_says_not_measured_when_the_store_does_not_answer(tuned, db, monkeypatch):  # noqa: F811
    from autotuner.tuning import StoreUnavailable
    from autotuner.tuning.revalidate import Revalidation

    down = runner.invoke(
        app, ["revalidate", "cpu-box", "small", "--db", "postgresql+psycopg://u:p@127.0.0.1:1/x"]
    )
    assert down.exit_code == 3, down.output  # before: 1, "the config regressed"
    assert "cannot open the store" in down.stderr

    def gone(self):
        raise StoreUnavailable("the store did not answer")

    monkeypatch.setattr(Revalidation, "run", gone)
    midway = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert midway.exit_code == 3, midway.output
    assert "not measured, run it again when the store answers" in midway.stderr
    helped = " ".join(runner.invoke(app, ["revalidate", "--help"]).output.split())
    assert "3 not measured: it could not run, or the store did not answer, or a full disk" in helped
    docs = " ".join((REPO / "docs" / "operations.md").read_text().split())
    assert "3 not measured (it could not run, or the store did not answer" in docs


# ---------------------------------------------------------------- 5: tune --study of an existing study


def test_tune_refuses_options_that_differ_from_the_stored_study(tuned, db):  # noqa: F811
    result = runner.invoke(app, ["tune", "--study", "cpu-box.small.1", "--executor", "local", "--space", "efa",
                                 "--trials", "99", "--cluster", "other", "--workload", "/dev/null", "--db", db])  # fmt: skip
    assert result.exit_code == 2, result.output  # before: "resuming study ... (id 1, done)", exit 0
    said = result.stderr
    assert "study cpu-box.small.1 exists" in said
    for flag in ("--executor", "--space", "--trials", "--cluster", "--workload"):
        assert flag in said
    assert "resuming" not in said


def test_tune_of_an_ended_study_says_it_is_done(tuned, db):  # noqa: F811
    result = runner.invoke(app, ["tune", "--study", "cpu-box.small.1", "--cluster", "cpu-box", "--trials", "3",
                                 "--executor", "replay", "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output  # what was given is what it holds
    assert "study cpu-box.small.1 (id 1) already done: see `autotuner studies`" in result.stderr
    assert "resuming" not in result.stderr


# ---------------------------------------------------------------- 6: store URLs that keep nothing


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", ""])
def test_an_in_memory_or_empty_store_url_is_refused(tmp_path, monkeypatch, url):
    monkeypatch.setenv("AUTOTUNER_DATA_DIR", str(tmp_path / "data"))  # where '' fell back to
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    result = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", str(workload), "--space", "socket",
                                 "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "1",
                                 "--workdir", str(tmp_path / "runs"), "--db", url])  # fmt: skip
    assert result.exit_code == 2, result.output  # before: a study tuned, then gone (''; the default store)
    assert ("in-memory SQLite store" if url else "--db is empty") in result.stderr
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------- 7: a closed stdout


def test_configs_show_with_stdout_closed_says_so(tuned, db):  # noqa: F811
    result = cli("configs", "show", "cpu-box", "small", "--db", db, closed_stdout=True)
    assert result.returncode == 2, result.stderr  # before: AttributeError traceback
    assert "Traceback" not in result.stderr
    assert "error: stdout is closed or gone: the config could not be printed" in result.stderr
