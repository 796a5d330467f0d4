"""`autotuner configs`, `configs history` and `configs validations` print a version or a re-validation
whose stored figures are not a JSON object of numbers (evidence or a result written by hand: a list,
text, not JSON), whose stack is no object, or whose version is no number with "?" where that value
goes, and every other row as it is: one such row raised, and no row was printed."""

from __future__ import annotations

import pytest

from autotuner.cli.commands import app
from autotuner.store import Store, ValidationState
from autotuner.tuning.revalidate import request
from tests.autotuner.test_bad_study_rows import write_raw
from tests.autotuner.test_cli import runner
from tests.autotuner.test_driver import RECORDED, study_with

FIGURES = {"speedup": 3.0, "ci_low": 2.0, "ci_high": 4.0}
# What a hand wrote for stored figures: the speedup cell it shows
UNFIT_FIGURES = {"[1]": "?", '"x"': "?", '{"speedup": "y"}': "?", "{not json": "?",
                 '{"speedup": 2.5, "ci_low": "a", "ci_high": 3}': "2.50x [?]"}  # fmt: skip


@pytest.fixture
def planted(tmp_path):
    """cpu-box/small v1 and v2 (two held re-validations of v2), cpu-box/other v1."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study = study_with(store, tmp_path)
    store.update_study(study.id, state="done")
    store.upsert_workload("other", {**RECORDED["workload"], "name": "other"})
    small = RECORDED["workload"]["name"]
    rows = {}
    for key in ((small, 1), (small, 2), ("other", 1)):
        rows[key] = store.publish_config(cluster="cpu-box", workload=key[0], nodes=1, env={}, fwd_precision="fp32",
                                         bwd_precision="fp32", batch_size=256, sharding="table_wise",
                                         evidence=FIGURES, study_id=study.id)  # fmt: skip
    validations = []
    for _ in range(2):
        row, _ = request(store, rows[(small, 2)])
        store.finish_validation(
            row.id, ValidationState.HELD, result=FIGURES, fingerprint={"driver": "550.54.15"}
        )
        validations.append(row.id)
    yield store, db, small, rows, validations
    store.dispose()


def table(db: str, *args: str) -> list[list[str]]:
    """The rows of a table the command prints (wide enough for one line a row), as their words, less
    the date and time they end with."""
    result = runner.invoke(app, ["configs", *args, "--db", db], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    ruled = next(i for i, line in enumerate(lines) if line.startswith("─"))
    return [line.split()[:-3] for line in lines[ruled + 1 :] if line.strip().endswith("UTC")]


def version_row(workload: str, version: str, speedup: str) -> list[str]:
    return ["cpu-box", workload, "1", version, "-", "fp32/fp32", "256", *speedup.split()]


GOOD = "3.00x [2.00-4.00]"


@pytest.mark.parametrize("stored", list(UNFIT_FIGURES))
def test_a_version_whose_evidence_is_unfit_shows_a_question_mark_beside_the_others(planted, stored):
    store, db, small, rows, _ = planted
    for key in (("other", 1), (small, 1)):
        write_raw(store, "at_configs", rows[key].id, "evidence", stored)
    shown = UNFIT_FIGURES[stored]
    assert table(db) == [version_row(small, "v2", GOOD), version_row("other", "v1", shown)]
    assert table(db, "history", "cpu-box", small) == [
        version_row(small, "v2", GOOD),
        version_row(small, "v1", shown),
    ]


def validation_row(validation: int, version: str, speedup: str, on: str) -> list[str]:
    return [
        str(validation),
        version,
        "manual",
        "held",
        *speedup.split(),
        *on.split(),
        "requested",
        "(manual)",
    ]


@pytest.mark.parametrize("stored", list(UNFIT_FIGURES))
def test_a_revalidation_whose_result_is_unfit_shows_a_question_mark_beside_the_others(planted, stored):
    store, db, small, _, (older, newer) = planted
    write_raw(store, "at_config_validations", newer, "result", stored)
    assert table(db, "validations", "cpu-box", small) == [
        validation_row(newer, "v2", UNFIT_FIGURES[stored], "driver 550.54.15"),
        validation_row(older, "v2", GOOD, "driver 550.54.15"),
    ]


@pytest.mark.parametrize("stored", ["[1]", '"x"', "{not json"])
def test_a_revalidation_whose_stack_is_unfit_says_so_beside_the_others(planted, stored):
    store, db, small, _, (older, newer) = planted
    write_raw(store, "at_config_validations", newer, "fingerprint", stored)
    assert table(db, "validations", "cpu-box", small) == [
        validation_row(newer, "v2", GOOD, "an unreadable stack"),
        validation_row(older, "v2", GOOD, "driver 550.54.15"),
    ]


def test_a_version_whose_number_is_text_is_v_question_mark_beside_the_others(planted):
    store, db, small, rows, (older, newer) = planted
    write_raw(store, "at_configs", rows[(small, 2)].id, "version", "x")
    # SQLite orders text after numbers: the version stored as "x" sorts, and is served, as the newest
    assert table(db, "history", "cpu-box", small) == [
        version_row(small, "v?", GOOD),
        version_row(small, "v1", GOOD),
    ]
    assert table(db, "validations", "cpu-box", small) == [
        validation_row(newer, "v?", GOOD, "driver 550.54.15"),
        validation_row(older, "v?", GOOD, "driver 550.54.15"),
    ]
