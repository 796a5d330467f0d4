"""What a user may type that used to be taken and fail later, or do harm (found by an adversarial
tester): a workdir where no launch directory can be made, a study that searches nothing (it published
the baseline over a better version), another program's SQLite file (a read command added our tables to
it), a dialect without its driver, more studies than one listing shows, a cancelled study resumed."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from autotuner.cli.commands import app
from autotuner.store import Store
from autotuner.tuning import create_study
from autotuner.tuning.settings import RequestSettings, StudySettings
from tests.autotuner.test_driver import RECORDED, SPACE
from tests.helpers import LANDSCAPE

runner = CliRunner()


def tune(tmp_path, *args: str):
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(RECORDED["workload"]))
    return runner.invoke(app, ["tune", "--cluster", "c", "--workload", str(workload), "--space", "socket",
                               "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "1",
                               "--db", f"sqlite:///{tmp_path / 'at.db'}", *args])  # fmt: skip


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_a_workdir_where_no_launch_directory_can_be_made_is_refused_before_a_row(tmp_path, where):
    (tmp_path / "a-file").write_text("not a directory")
    result = tune(tmp_path, "--workdir", str(tmp_path / where))
    assert result.exit_code == 2, result.output
    assert "no launch directory can be made" in result.output
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    assert store.studies() == []
    store.dispose()


def test_a_study_that_searches_nothing_is_refused_as_a_request_and_loads_as_stored():
    with pytest.raises(ValueError, match="trials"):
        RequestSettings(trials=0)
    assert StudySettings(trials=0).trials == 0  # a study stored before the bound still loads


def test_another_programs_sqlite_file_is_left_as_it_is(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE foo (x)")
    before = path.read_bytes()
    for command in (["studies"], ["configs"]):
        result = runner.invoke(app, [*command, "--db", f"sqlite:///{path}"])
        assert result.exit_code == 2, result.output
        assert "is not an nccl-autotuner store (it holds foo)" in result.output
    assert path.read_bytes() == before


def test_a_dialect_without_its_driver_is_said_not_a_traceback():
    result = runner.invoke(app, ["studies", "--db", "mysql://x/y"])
    assert result.exit_code == 2
    assert "no database driver 'mysql'" in result.output


def test_the_studies_listing_says_when_there_are_more_and_pages(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    for i in range(5):
        create_study(store, cluster="c", workload=RECORDED["workload"], space=SPACE, name=f"s{i}",
                     settings=StudySettings(executor="replay", workdir=str(tmp_path / "runs"),
                                            executor_options={"landscape": str(LANDSCAPE)}))  # fmt: skip
    store.dispose()
    first = runner.invoke(app, ["studies", "--limit", "2", "--db", db])
    assert first.exit_code == 0
    assert "s4" in first.output
    assert "s0" not in first.output
    assert "1-2 of 5: more with --offset 2" in first.output
    last = runner.invoke(app, ["studies", "--limit", "2", "--offset", "4", "--db", db])
    assert "s0" in last.output
    assert "more with" not in last.output
    done = runner.invoke(app, ["studies", "--state", "done", "--db", db])
    assert "no study yet" in done.output  # none done: the filter holds


def test_a_cancelled_study_resumed_says_so(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study = create_study(store, cluster="c", workload=RECORDED["workload"], space=SPACE, name="q1",
                         settings=StudySettings(executor="replay", workdir=str(tmp_path / "runs"),
                                                executor_options={"landscape": str(LANDSCAPE)}))  # fmt: skip
    store.move_study(study.id, "cancelled")
    store.dispose()
    result = runner.invoke(app, ["tune", "--study", "q1", "--db", db])
    assert result.exit_code == 1
    assert "study q1 was cancelled before it concluded: nothing was published" in result.output
