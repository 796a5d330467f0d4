"""The CLI's tables say a served config is stale where REST's validations endpoint and the dashboard
do (one function, autotuner.tuning.revalidate.staleness): jobs report another stack (driver, NCCL,
aws-ofi-nccl, GPU) than it was validated on, or it is older than AUTOTUNER_REVALIDATE_EVERY. Before,
`autotuner configs`, `configs history` and `configs show` marked a flagged version only: a config
measured on another stack than the fleet runs now looked as good as a fresh one."""

from __future__ import annotations

import json
from datetime import timedelta

from autotuner.cli.commands import app
from autotuner.store import Store, utcnow
from tests.autotuner.test_cli import db, tuned  # noqa: F401 (fixtures)
from tests.autotuner.test_cli_review import publish_v2, separate_streams

runner = separate_streams()
VALIDATED_ON = {"driver": "550.54.15", "versions": {"nccl": "2.21.5"}}  # as a trial records it
UPGRADED = {"driver": "570.86.15 [/]", "nccl": "2.23.4", "nodes": "1"}  # what jobs report now


def measured_on_a_stack(db: str) -> None:  # noqa: F811
    """The served v1 was measured on driver 550.54.15, NCCL 2.21.5 (the replay landscape records none)."""
    store = Store(db)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE at_configs SET fingerprint = ? WHERE version = 1", (json.dumps(VALIDATED_ON),)
        )
    store.dispose()


def jobs_report(db: str, stack: dict, jobs: int = 3, version: int = 1) -> None:  # noqa: F811
    """What the service records when jobs fetch the config from `stack` (api/fingerprints.py)."""
    store = Store(db)
    row = store.config_row("cpu-box", "small", 1, version)
    store.record_reports([{"config_id": row.id, "fingerprint": stack, "diff": {}, "jobs": jobs}])
    store.dispose()


def test_a_config_jobs_run_on_another_stack_is_marked_stale(tuned, db):  # noqa: F811
    measured_on_a_stack(db)
    jobs_report(db, UPGRADED)
    why = "driver 550.54.15 -> 570.86.15 [/], NCCL 2.21.5 -> 2.23.4 since validation (3 jobs)"
    for args in (["configs"], ["configs", "history", "cpu-box", "small"]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, result.output
        assert "stale" in result.stdout  # before: "v1 ... 4.40x", no mark
        assert f"cpu-box/small (1n) v1 stale: {why}" in result.stderr  # as stored: "[/]" is no markup
    shown = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", "sh", "--db", db])
    assert shown.exit_code == 0, shown.output
    assert f"stale: v1 {why}" in shown.stderr
    assert "stale" not in shown.stdout  # the export lines stay clean
    listed = runner.invoke(app, ["configs", "validations", "cpu-box", "small", "--db", db])
    assert listed.exit_code == 0, listed.output
    assert f"stale: v1 {why}" in listed.stderr  # as REST's validations say `stale_reasons`


def test_only_the_served_version_is_said_stale_and_another_node_count_is_not(tuned, db):  # noqa: F811
    measured_on_a_stack(db)
    jobs_report(db, {"driver": "550.54.15", "nccl": "2.21.5", "nodes": "4"})  # the same stack, 4 nodes
    calm = runner.invoke(app, ["configs", "--db", db])
    assert calm.exit_code == 0, calm.output
    assert "stale" not in calm.stdout + calm.stderr  # REST: stale false (a node count is no stack)
    jobs_report(db, UPGRADED)
    publish_v2(db)  # v1 is stale, then v2 is served: validated now, no job reported against it
    history = runner.invoke(app, ["configs", "history", "cpu-box", "small", "--db", db])
    assert history.exit_code == 0, history.output
    assert "stale" not in history.stdout + history.stderr
    store = Store(db)
    store.pin_config("cpu-box", "small", 1, 1)  # v1 served again: stale again
    store.dispose()
    history = runner.invoke(app, ["configs", "history", "cpu-box", "small", "--db", db])
    assert history.stdout.count("stale") == 1, history.stdout  # before: no mark
    assert "cpu-box/small (1n) v1 stale: driver 550.54.15 -> 570.86.15" in history.stderr


def test_a_config_older_than_the_schedule_is_marked_stale(tuned, db):  # noqa: F811
    store = Store(db)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE at_configs SET created_at = ?", (utcnow() - timedelta(days=9),))
    store.dispose()
    result = runner.invoke(app, ["configs", "--db", db], env={"AUTOTUNER_REVALIDATE_EVERY": "7d"})
    assert result.exit_code == 0, result.output
    assert "stale" in result.stdout  # before: no mark
    assert "cpu-box/small (1n) v1 stale: validated 9 d ago, every 7 d asked" in result.stderr
    unset = runner.invoke(app, ["configs", "--db", db], env={"AUTOTUNER_REVALIDATE_EVERY": ""})
    assert "stale" not in unset.stdout + unset.stderr  # no schedule: never overdue (as REST)
    bad = runner.invoke(app, ["configs", "--db", db], env={"AUTOTUNER_REVALIDATE_EVERY": "weekly"})
    assert bad.exit_code == 0, bad.output  # the listing is still printed
    assert "AUTOTUNER_REVALIDATE_EVERY: 'weekly' is not a duration" in bad.stderr
