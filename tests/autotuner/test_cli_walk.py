"""The `autotuner` commands as an operator meets them: bad input named with exit 2 (never a traceback),
the store a read command is pointed at, tables and help that fit 80 columns."""

from __future__ import annotations

import json
import re

import pytest

from autotuner.cli.commands import app
from tests.autotuner.test_cli import db, runner, tuned  # noqa: F401 - fixtures

WIDE = {"COLUMNS": "80"}


def test_show_rejects_an_unknown_format_before_printing_anything(tuned, db):  # noqa: F811
    result = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", "yaml", "--db", db])
    assert result.exit_code == 2, result.output
    assert "--format 'yaml': use one of json, sh, env, slurm" in result.output
    assert "speedup ladder" not in result.output  # nothing printed before the refusal


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("bogus://x", "no database driver 'bogus'"),
        ("/srv/autotuner.db", "is not a SQLAlchemy URL: use e.g. sqlite:////"),
        ("sqlite:///{tmp}/notes.txt", "file is not a database"),
    ],
)
def test_a_db_that_cannot_be_used_is_named_with_exit_2(tmp_path, url, said):
    (tmp_path / "notes.txt").write_text("not a database, only some text that is long enough\n" * 10)
    result = runner.invoke(app, ["studies", "--db", url.format(tmp=tmp_path)])
    assert result.exit_code == 2, result.output
    assert said in result.output.replace("\n", "")
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", [["studies"], ["configs"], ["configs", "history", "a", "b"]])
def test_a_read_of_a_missing_store_says_so_and_creates_nothing(tmp_path, monkeypatch, command):
    monkeypatch.delenv("AUTOTUNER_DATABASE_URL", raising=False)
    missing = tmp_path / "typo" / "autotuner.db"
    result = runner.invoke(app, [*command, "--db", f"sqlite:///{missing}"])
    assert result.exit_code == 2, result.output
    assert f"no store at {missing}" in result.output.replace("\n", "")
    assert not missing.parent.exists()


def test_the_db_given_to_configs_reaches_its_subcommand(tuned, db, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.delenv("AUTOTUNER_DATABASE_URL", raising=False)
    monkeypatch.setenv("AUTOTUNER_DATA_DIR", str(tmp_path / "elsewhere"))
    history = runner.invoke(app, ["configs", "--db", db, "history", "cpu-box", "small"])
    assert history.exit_code == 0, history.output
    assert "v1" in history.output
    ignored = runner.invoke(
        app, ["configs", "--cluster", "cpu-box", "--db", db, "history", "cpu-box", "small"]
    )
    assert ignored.exit_code == 2
    assert "takes CLUSTER WORKLOAD after it" in ignored.output


@pytest.mark.parametrize("sub", ["history", "validations", "show"])
def test_an_unknown_config_exits_2_and_names_what_is_published(tuned, db, sub):  # noqa: F811
    result = runner.invoke(app, ["configs", sub, "cpu-box", "nope", "--db", db])
    assert result.exit_code == 2, result.output
    said = result.output.replace("\n", "")
    hint = (
        "cluster cpu-box is known, workload nope is not published for it; closest published: cpu-box/small;"
    )
    assert f"no config published for cpu-box/nope ({hint}" in said


def test_config_tables_fit_80_columns_and_keep_numbers_and_dates_whole(tuned, db, monkeypatch):  # noqa: F811
    from rich.console import Console

    from autotuner.cli import commands

    monkeypatch.setattr(commands, "out", Console(width=80))  # made at import, a pipe's 1000 columns wide
    assert runner.invoke(app, ["configs", "pin", "cpu-box", "small", "v1", "--db", db]).exit_code == 0
    for command in (["configs"], ["configs", "history", "cpu-box", "small"]):
        result = runner.invoke(app, [*command, "--db", db], env=WIDE)
        assert result.exit_code == 0, result.output
        lines = [line.rstrip() for line in result.stdout.splitlines()]
        assert max(map(len, lines)) <= 80, result.stdout
        header = next(line for line in lines if line.startswith("cluster"))
        assert header.split() == ["cluster", "workload", "nodes", "version", "env", "fwd/bwd", "batch", "speedup",
                                  "published"]  # fmt: skip
        assert re.search(r"\bv1 .* \d{4}-\d\d-\d\d$", lines[3]), result.stdout
        assert re.search(r"\bpinned .* \d\d:\d\d UTC$", lines[4]), result.stdout


def test_pin_takes_a_version_as_the_tables_print_it(tuned, db):  # noqa: F811
    pinned = runner.invoke(app, ["configs", "pin", "cpu-box", "small", "v1", "--db", db])
    assert pinned.exit_code == 0, pinned.output
    assert "serving cpu-box/small (1 node) version 1 (pinned)" in pinned.output
    bad = runner.invoke(app, ["configs", "pin", "cpu-box", "small", "vx", "--db", db])
    assert bad.exit_code == 2
    assert "'vx' is not a version: v3 or 3" in bad.output


def test_validations_without_any_say_how_to_run_one(tuned, db):  # noqa: F811
    result = runner.invoke(app, ["configs", "validations", "cpu-box", "small", "--db", db], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "cpu-box/small has no re-validation yet (`autotuner revalidate cpu-box small`" in result.output


def test_help_fits_80_columns_without_cutting_and_names_the_default_store():
    tune = runner.invoke(app, ["tune", "--help"], env=WIDE)
    assert tune.exit_code == 0
    assert "…" not in tune.output
    assert "--candidates-per-launch" in tune.output
    assert "AUTOTUNER_DATA_DIR" in tune.output
    top = runner.invoke(app, ["--help"], env=WIDE).output.splitlines()
    start = next(i for i, line in enumerate(top) if line.startswith("│ revalidate"))
    end = next(i for i, line in enumerate(top) if line.startswith("│ lint"))
    summary = " ".join(line.strip("│ ") for line in top[start:end])
    # the whole summary, not a cut paragraph
    assert summary.endswith(
        "exit 0 held, 1 failed, 2 no such config or version, 3 not measured, 4 unresolved."
    )


def test_listings_of_an_empty_store_say_it_is_empty(db):  # noqa: F811
    from autotuner.store import Store

    Store(db)  # an empty store, as `autotuner serve` creates it
    studies = runner.invoke(app, ["studies", "--db", db])
    assert studies.exit_code == 0
    assert "no study yet (`autotuner tune` starts one)" in studies.output
    configs = runner.invoke(app, ["configs", "--db", db])
    assert configs.exit_code == 0
    assert "no config published" in configs.output


def test_a_rollback_past_the_oldest_version_says_so_in_words(tuned, db):  # noqa: F811
    result = runner.invoke(app, ["configs", "rollback", "cpu-box", "small", "--db", db])
    assert result.exit_code == 2, result.output
    assert "cpu-box/small at 1 node: version 1 is the oldest" in result.output  # before: "at 1 nodes"


def test_stored_words_that_cannot_be_read_are_said_and_the_rest_is_shown(tuned, db):  # noqa: F811
    # before: a pydantic traceback in place of the config's export lines, and of the study's outcome
    from autotuner.store import Store

    store = Store(db)
    config = store.served_configs()[0]
    study = store.studies()[0]
    store.update_study(study.id, outcome={"speedup": "fast"})
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE at_configs SET evidence = ? WHERE id = ?",
                             (json.dumps({**config.evidence, "ladder": [{"step": 5}]}), config.id))  # fmt: skip
    store.dispose()
    shown = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", "sh", "--db", db])
    assert shown.exit_code == 0, shown.output
    assert "its claim cannot be read:" in shown.output
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in shown.output
    told = runner.invoke(app, ["tune", "--study", study.name, "--db", db])
    assert told.exit_code == 1
    assert f"study {study.name}: its stored outcome cannot be read:" in told.output
    assert not isinstance(told.exception, ValueError)
