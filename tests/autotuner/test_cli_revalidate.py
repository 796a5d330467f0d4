"""`autotuner revalidate` and `autotuner configs validations`, on a replay study whose recorded
landscape changes after it published (tests/tuning/test_revalidate.py makes both)."""

from __future__ import annotations

import errno
import os

import pytest
from typer.testing import CliRunner

from autotuner.cli.commands import app
from tests.tuning.test_revalidate import NEW_STACK, landscape, published  # noqa: F401 - a fixture

runner = CliRunner()


@pytest.fixture
def db(store, published):  # noqa: F811 - the fixture imported above
    return store.url


def test_held_exits_0_and_says_on_what(store, published, db):  # noqa: F811
    recorded, _ = published
    landscape(recorded, NEW_STACK, gain=True)
    result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--nodes", "1", "--reason", "after the upgrade",
                                 "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "held: still faster with 95% confidence" in result.output
    assert "measured on driver 570.86.15, NCCL 2.23.4, 1 node in" in result.output
    assert "kept v1" in result.output
    assert "launch" in result.output
    (entry,) = store.validations("cpu-box", "small")
    assert (entry.trigger, entry.reason, entry.state) == ("manual", "after the upgrade", "held")
    table = runner.invoke(app, ["configs", "validations", "cpu-box", "small", "--db", db])
    assert table.exit_code == 0
    assert "manual" in table.output
    assert "held" in table.output


def test_failed_exits_1_and_publishes_the_baseline(store, published, db):  # noqa: F811
    recorded, _ = published
    landscape(recorded, NEW_STACK, gain=False)
    result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert result.exit_code == 1, result.output
    assert "failed: its gain is gone: " in result.output
    assert "replaced: published v2, the baseline (no changes)" in result.output
    assert store.served_config("cpu-box", "small").version == 2
    shown = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--db", db])
    assert '"validated_on": {' in shown.output
    assert '"driver": "570.86.15"' in shown.output


def test_unresolved_exits_4_and_keeps_the_version_served(store, published, db, monkeypatch):  # noqa: F811
    recorded, _ = published
    landscape(recorded, NEW_STACK, gain=False)  # the rounds straddle 1 ...
    monkeypatch.setattr("autotuner.tuning.revalidate.claimed_low", lambda evidence: None)  # ... no figure
    result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert result.exit_code == 4, result.output
    assert "unresolved: not shown faster with 95% confidence" in result.output
    # the study's 3 rounds could not tell, so 3 more were measured and all 6 judged: a second look
    assert "kept v1: nothing concluded at 6 rounds (still as validated before)" in result.output
    (entry,) = store.validations("cpu-box", "small")
    assert (entry.result["rounds"], entry.result["rounds_asked"], entry.result["confidence"]) == (6, 6, 0.975)
    assert "(a 97.5% interval) over 6 rounds" in entry.result["why"]
    launches = [la for la in store.launches(store.studies()[0].id) if la.kind == "revalidate"]
    assert sum(len(la.spec["candidates"]) for la in launches) == 12  # 6 rounds of the two, each launched once
    assert store.served_config("cpu-box", "small").version == 1  # kept: "not shown faster" replaced it


def test_nothing_to_revalidate_exits_2(db):
    result = runner.invoke(app, ["revalidate", "cpu-box", "nope", "--db", db])
    assert result.exit_code == 2
    assert "no config published for cpu-box/nope" in result.output
    result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--version", "5", "--db", db])
    assert result.exit_code == 2
    assert "has no version 5" in result.output


@pytest.mark.parametrize("args", [["cpu-box", "nope"], ["cpu-box", "small", "--nodes", "2"]])
def test_nothing_to_revalidate_names_what_is_published(db, args):
    # as `autotuner configs history/show/validations` do (docs/operations.md says so of every CLI command)
    result = runner.invoke(app, ["revalidate", *args, "--db", db])
    assert result.exit_code == 2, result.output
    assert "published: cpu-box/small;" in result.output.replace(
        "\n", ""
    )  # closest published, or at another count


def test_a_study_whose_settings_no_longer_validate_ends_the_revalidation_with_why(store, published, db):  # noqa: F811
    # before: a ValidationError traceback, and the re-validation stayed queued for the scheduler
    study = store.studies()[0]
    store.update_study(study.id, settings={**study.settings, "trials": -1})
    result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert result.exit_code == 3, result.output
    assert "it cannot run: ValidationError" in result.output
    assert "Traceback" not in result.output
    (entry,) = store.validations("cpu-box", "small")
    assert entry.state == "error"
    assert entry.error.startswith("it cannot run: ValidationError")


def test_a_full_disk_says_so_in_a_line_and_a_run_after_space_is_freed_concludes(
    store,
    published,  # noqa: F811
    db,
    monkeypatch,
):
    """Before, the re-validation ended in error for good (the version unvalidated until the schedule's
    next turn), the OSError its only word."""
    from autotuner.executors import ReplayExecutor

    recorded, _ = published
    landscape(recorded, NEW_STACK, gain=True)

    def full(self, launch):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(launch.workdir / "spec.json"))

    with monkeypatch.context() as patched:
        patched.setattr(ReplayExecutor, "submit", full)
        result = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert result.exit_code == 3, result.output
    assert "not submitted: no space left on device under " in result.output
    assert "not measured, run it again once there is space there" in result.output
    assert "Traceback" not in result.output
    (entry,) = store.validations("cpu-box", "small")
    assert entry.state == "running"  # not "error": the same run concludes it once there is space
    again = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert again.exit_code == 0, again.output
    assert "held: still faster with 95% confidence" in again.output
    assert [v.state for v in store.validations("cpu-box", "small")] == ["held"]
