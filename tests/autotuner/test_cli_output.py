"""What the CLI prints of text it did not write (a scheduler's pending reason, a path a trial made) is
shown, never read as rich markup nor obeyed by the terminal; and a pipe gets each row on one line.
Found by a review of the CLI's output: `[a1-a4]` in a Slurm reason vanished from the progress line, a
`[/]` crashed its refresh thread (the bar stopped for the rest of the run) and `prune`, an OSC 8
hyperlink reached the terminal whole, and `autotuner studies | grep NAME` found nothing (names folded
at 80 columns)."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import pytest
from rich.console import Console
from typer.testing import CliRunner

import autotuner.cli.commands as commands
import autotuner.tuning.prune as prune
from autotuner.store import Store

HOSTILE = (
    "Slurm PENDING: ReqNodeNotAvail, UnavailableNodes:dgx[a1-a4] held [/] \x1b]8;;https://x.test\x1b\\click"
)


@pytest.fixture
def err(monkeypatch) -> io.StringIO:
    text = io.StringIO()
    monkeypatch.setattr(commands, "err", Console(file=text, width=400, force_terminal=True))
    return text


def test_a_pending_reason_on_the_progress_line_is_shown_whole_and_never_obeyed(err):
    launch = types.SimpleNamespace(seq=2, kind="search", summary={})
    with commands._progress_bar(3) as progress:
        progress.on_launch_waiting(launch, HOSTILE)
    shown = err.getvalue()
    assert "UnavailableNodes:dgx[a1-a4] held [/]" in shown  # was: "dgx" (markup ate the rest), or MarkupError
    assert "\\x1b]8;;https://x.test\\x1b\\click" in shown
    assert "\x1b]8" not in shown  # the hyperlink's escape is not sent to the terminal


def test_prune_names_a_path_it_could_not_remove_as_it_is(monkeypatch, err, tmp_path):
    failed = f"{tmp_path}/launch-3: {tmp_path}/launch-3/ckpt/[/]rank0.pt: [Errno 13] Permission denied"
    monkeypatch.setattr(prune, "prune", lambda store, age, dry_run=False: [prune.Pruned(1, 0, 0, [failed])])
    Store(f"sqlite:///{tmp_path}/at.db").dispose()  # an empty store: the one failure is the stand-in's
    result = CliRunner().invoke(
        commands.app, ["prune", "--older-than", "0", "--db", f"sqlite:///{tmp_path}/at.db"]
    )
    assert result.exit_code == 1, (result.exception, err.getvalue())  # was: MarkupError, its own message lost
    assert f"could not remove {failed}" in err.getvalue()


def test_a_pipe_gets_every_studys_name_on_one_line(tmp_path):
    db = f"sqlite:///{tmp_path}/at.db"
    code = ("import sys; from autotuner.store import Store; from autotuner.tuning import StudySettings, create_study; "
            "from tests.helpers import LANDSCAPE; import json; "
            f"create_study(Store({db!r}), cluster='p4d-efa-us-east-1a', workload=json.loads(LANDSCAPE.read_text())['workload'], "
            "space={}, settings=StudySettings(executor='replay', trials=1, "
            f"executor_options={{'landscape': str(LANDSCAPE)}}, workdir={str(tmp_path / 'runs')!r}), "
            "name='p4d-efa-us-east-1a.dlrm-v2-criteo-1tb.2')")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    listed = subprocess.run([sys.executable, "-m", "autotuner", "studies", "--db", db], capture_output=True,
                            text=True, timeout=120, env=env)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if "p4d-efa-us-east-1a.dlrm-v2-criteo-1tb.2" in line]
    assert "p4d-efa-us-east-1a " in row  # the cluster too, whole, on the same line


def test_the_configs_group_help_names_every_command_it_has():
    said = CliRunner().invoke(commands.app, ["configs", "--help"]).output
    summary = commands.configs_app.info.help
    names = [c.name for c in commands.configs_app.registered_commands if c.name]
    assert names, "the configs group has commands"
    assert [n for n in names if n not in summary] == []  # was: show, unpin and validations left out
    assert summary.split(":")[0] in said


def test_the_ladder_table_at_80_columns_cuts_no_verdict():
    from autotuner.cli.claim_report import ladder_table
    from autotuner.tuning.outcome import LadderStep

    why = "cannot run: int8 comms on a reduce-scatter (row_wise) are refused"
    steps = [
        LadderStep(step="env", changed={"NCCL_NSOCKS_PERTHREAD": [None, "4"]}, kept=False,
                   verdict="inert here: not credited", candidate=None, cumulative=1.0),
        LadderStep(step="precision", changed={"fwd_precision": ["fp32", "int8"]}, kept=False, verdict=why,
                   candidate=None, cumulative=1.0),
    ]  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(ladder_table(steps))
    drawn = console.export_text()
    assert max(len(line) for line in drawn.splitlines()) <= 80
    words = drawn.split()
    for said in ("inert here: not credited", why):  # was: "inert here: n", "cannot run: int" (cut)
        assert all(word in words for word in said.split()), (said, drawn)
