"""`autotuner studies` says what the dashboard's listing says of a study that published nothing (a phase
that could not be measured: the config served before stays): "nothing published", not "baseline kept"."""

from __future__ import annotations

import json

from rich.console import Console

from autotuner.cli import commands
from autotuner.cli.commands import app
from autotuner.store import Store
from autotuner.tuning.confirm import ROUNDS_FAILED
from tests.autotuner.test_bad_study_rows import study_with, write_raw
from tests.autotuner.test_cli import runner

# what driver.finish stores for it: decide() chose the baseline, baseline_published() moved the finalist
OUTCOME = {"speedup": 1.0, "baseline_candidate": 1, "chosen_candidate": 1, "best_candidate": 2,
           "decision": ROUNDS_FAILED.format(rounds=3), "finalist": {"speedup": 1.3}}  # fmt: skip


def test_a_study_that_published_nothing_is_not_said_to_have_kept_the_baseline(tmp_path, monkeypatch):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study = study_with(store, tmp_path, name="outage")
    write_raw(store, "at_studies", study.id, "outcome", json.dumps(OUTCOME))
    write_raw(store, "at_studies", study.id, "state", "done")
    store.dispose()
    monkeypatch.setattr(commands, "out", Console(width=200))
    result = runner.invoke(app, ["studies", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "baseline kept" not in said, said  # the dashboard: "— nothing published · finalist 1.30x"
    assert "nothing published" in said, said
