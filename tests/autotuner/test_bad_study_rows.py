"""One study whose stored rows no longer describe a study that can run (an older version's, a crash's, a
hand's) fails with the reason; every other study and re-validation in the queue runs. Before, such a
row raised out of every queue tick (or was picked again at once, spinning the scheduler) and no other
study ever ran."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from autotuner.executors import make_executor
from autotuner.store import Store
from autotuner.tuning import StudyDriver, StudyQueue, StudySettings, create_study
from autotuner.tuning.revalidate import config_to_revalidate, request
from tests.autotuner.test_driver import RECORDED, SPACE, replay, study_with
from tests.helpers import LANDSCAPE

DEADLINE_S = 120

# Each: what a stored study row holds instead of what it held when it was created.
BAD_ROWS = {
    "settings fail validation": lambda study: {"settings": {**study.settings, "trials": -1}},
    "settings are a list": lambda study: {"settings": [1, 2]},
    "its landscape is gone": lambda study: {"settings": {**study.settings, "executor_options": {
        "landscape": "/nonexistent.json"}}},
    "its space fails validation": lambda study: {"space": {**study.space, "batch_sizes": "x"}},
}  # fmt: skip


def tamper(store: Store, bad: str, study) -> None:
    store.update_study(study.id, **BAD_ROWS[bad](study))


def ticks_until(queue: StudyQueue, done, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        queue.run_once()


@pytest.mark.parametrize("bad", list(BAD_ROWS))
def test_a_study_that_cannot_run_fails_with_why_and_the_next_one_runs(store: Store, tmp_path, bad):
    broken = study_with(store, tmp_path, name="broken")
    good = study_with(store, tmp_path, name="good")
    tamper(store, bad, broken)
    queue = StudyQueue(store, make_executor, poll_s=0.01)
    ticks_until(queue, lambda: store.study(good.id).state == "done", "the good study")
    failed = store.study(broken.id)
    assert failed.state == "failed"
    assert failed.error.startswith("this study cannot run: ")
    assert store.launches(broken.id) == []


def test_the_cli_fails_such_a_study_with_why_instead_of_a_traceback(store: Store, tmp_path):
    from typer.testing import CliRunner

    from autotuner.cli.commands import app

    broken = study_with(store, tmp_path, name="broken")
    tamper(store, "settings fail validation", broken)
    result = CliRunner().invoke(app, ["tune", "--db", store.url, "--study", "broken"])
    assert result.exit_code == 1, result.output
    assert "this study cannot run: ValidationError" in result.output
    assert store.study(broken.id).state == "failed"


def test_a_revalidation_whose_study_cannot_run_ends_with_why_and_the_next_one_runs(store: Store, tmp_path):
    studies = []
    for cluster in ("box-a", "box-b"):
        settings = StudySettings(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=2, seed=7,
                                 workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
        study = create_study(store, cluster=cluster, workload=RECORDED["workload"], space=SPACE, name=cluster,
                             settings=settings)  # fmt: skip
        assert StudyDriver(store, study.id, replay(), poll_s=0.01).run().state == "done"
        studies.append(study)
    asked = [
        request(store, config_to_revalidate(store, s.name, RECORDED["workload"]["name"]))[0].id
        for s in studies
    ]
    tamper(store, "its landscape is gone", studies[0])
    queue = StudyQueue(store, make_executor, poll_s=0.01)
    ticks_until(queue, lambda: store.validation(asked[1]).state not in ("queued", "running"), "the good one")
    broken, good = (store.validation(v) for v in asked)
    assert good.state == "held"
    assert broken.state == "error"
    assert broken.error.startswith("it cannot run: FileNotFoundError")


def test_a_launch_whose_stored_spec_cannot_be_read_ends_and_the_study_resumes(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    store.update_study(
        study.id, state="running"
    )  # a runner died with a launch running, its spec since damaged
    launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": []}, executor="replay",
                              attempt=1, nnodes=None)  # fmt: skip
    store.update_launch(launch.id, state="running", spec=[1, 2])
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    first = store.launches(study.id)[0]
    assert first.state == "failed"
    assert first.error == "its stored spec has no list of candidates: not resumed"


# Text no version writes where the store keeps JSON or a date. Only SQLite can hold it (PostgreSQL checks
# both types on write), so these tests make their own SQLite store.
RAW_TEXT = {"settings": "{not json", "space": "[1,", "created_at": "yesterday"}


def write_raw(store: Store, table: str, row_id: int, column: str, value: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE {table} SET {column} = :v WHERE id = :i"), {"v": value, "i": row_id})


def read_raw(store: Store, table: str, row_id: int, column: str) -> str:
    with store.engine.connect() as conn:
        return conn.execute(text(f"SELECT {column} FROM {table} WHERE id = :i"), {"i": row_id}).scalar_one()


@pytest.mark.parametrize("column", list(RAW_TEXT))
def test_text_that_is_no_json_or_no_date_fails_its_study_alone_with_why_and_is_kept(tmp_path, column):
    store = Store(f"sqlite:///{tmp_path / 'raw.db'}")
    broken = study_with(store, tmp_path, name="broken")
    good = study_with(store, tmp_path, name="good")
    write_raw(store, "at_studies", broken.id, column, RAW_TEXT[column])
    assert [s.name for s in store.studies()] == ["good", "broken"]  # the listing loads it: before, it raised
    queue = StudyQueue(store, make_executor, poll_s=0.01)
    ticks_until(queue, lambda: store.study(good.id).state == "done", "the good study")
    failed = store.study(broken.id)
    assert failed.state == "failed"
    why = "not a date" if column == "created_at" else "not JSON: "
    assert failed.error.startswith(f"this study cannot run: ValueError: its stored {column} ({why}")
    assert read_raw(store, "at_studies", broken.id, column) == RAW_TEXT[column]  # nothing written over it
    store.dispose()


@pytest.mark.parametrize(("column", "value"), [("settings", "{not json"), ("outcome", '{"speedup": "fast"}')])
def test_autotuner_studies_lists_a_study_it_cannot_read_beside_the_rest(tmp_path, column, value):
    # before: StudySettings.model_validate of the unreadable settings raised, and no study was listed
    from autotuner.cli.commands import app
    from tests.autotuner.test_cli import runner

    db = f"sqlite:///{tmp_path / 'raw.db'}"
    store = Store(db)
    study_with(store, tmp_path, name="good")
    broken = study_with(store, tmp_path, name="broken")
    write_raw(store, "at_studies", broken.id, column, value)
    store.dispose()
    result = runner.invoke(app, ["studies", "--db", db], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {"good", "broken"}
    assert rows["broken"].split()[-1] == ("-" if column == "settings" else "?")


def studies_rows(db: str) -> dict[str, list[str]]:
    """`autotuner studies`: each row's cells by study name (wide enough for one line a row)."""
    from autotuner.cli.commands import app
    from tests.autotuner.test_cli import runner

    result = runner.invoke(app, ["studies", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return {
        line.split()[1]: line.split() for line in result.output.splitlines() if line.strip()[:1].isdigit()
    }


@pytest.mark.parametrize("parent", ["cluster", "workload"])
def test_autotuner_studies_lists_a_study_whose_parent_row_is_gone_with_a_question_mark(tmp_path, parent):
    # before: AttributeError ('NoneType' has no attribute 'name') and no study was listed
    import sqlite3

    db = f"sqlite:///{tmp_path / 'raw.db'}"
    store = Store(db)
    good = study_with(store, tmp_path, name="good")
    orphan = study_with(store, tmp_path, name="orphan")
    store.dispose()
    with sqlite3.connect(tmp_path / "raw.db") as conn:  # the sqlite3 shell: foreign keys off
        conn.execute(f"UPDATE at_studies SET {parent}_id = 999 WHERE id = {orphan.id}")
    conn.close()
    workload = RECORDED["workload"]["name"]
    assert studies_rows(db) == {
        "good": [str(good.id), "good", "cpu-box", workload, "queued", "0/3", "-", "-"],
        "orphan": [str(orphan.id), "orphan", "?" if parent == "cluster" else "cpu-box",
                   "?" if parent == "workload" else workload, "queued", "0/3", "-", "-"],
    }  # fmt: skip


def test_autotuner_studies_shows_a_best_throughput_stored_as_text_as_a_question_mark(tmp_path):
    # before: ValueError (Unknown format code 'f' for object of type 'str') and no study was listed
    db = f"sqlite:///{tmp_path / 'raw.db'}"
    store = Store(db)
    best, ids = {}, {}
    for name in ("good", "broken"):
        study = study_with(store, tmp_path, name=name)
        launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": []},
                                  executor="replay")  # fmt: skip
        (row,) = store.add_candidates([{"study_id": study.id, "launch_id": launch.id, "index": 0, "kind": "baseline",
                                        "env": {}, "state": "ok", "fwd_precision": "fp32", "bwd_precision": "fp32",
                                        "batch_size": 64, "sharding": "table_wise", "samples_per_s": 1234.4}])  # fmt: skip
        store.update_study(study.id, best_candidate_id=row.id)
        best[name], ids[name] = row.id, study.id
    write_raw(store, "at_candidates", best["broken"], "samples_per_s", "fast")
    store.dispose()
    workload = RECORDED["workload"]["name"]
    assert studies_rows(db) == {
        name: [str(ids[name]), name, "cpu-box", workload, "queued", "0/3", shown, "-"]
        for name, shown in (("good", "1,234"), ("broken", "?"))
    }
