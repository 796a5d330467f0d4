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
from autotuner.executors.replay import ReplayExecutor
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


def replay_study(store: Store, tmp_path, name: str):
    return create_study(store, cluster="c", workload=RECORDED["workload"], space=SPACE, name=name,
                        settings=StudySettings(executor="replay", workdir=str(tmp_path / "runs"),
                                               executor_options={"landscape": str(LANDSCAPE)}))  # fmt: skip


def test_a_cancelled_study_resumed_says_so(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study = replay_study(store, tmp_path, "q1")
    store.move_study(study.id, "cancelled")
    store.dispose()
    result = runner.invoke(app, ["tune", "--study", "q1", "--db", db])
    assert result.exit_code == 1
    assert "study q1 was cancelled before it concluded: nothing was published" in result.output


def test_cancel_ends_a_study_and_stops_what_no_runner_follows(tmp_path):
    """The CLI had no cancel: a study an interrupted `autotuner tune` left running could only be resumed
    (or cancelled over REST), and a service's scheduler on the store took it up meanwhile."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study = replay_study(store, tmp_path, "left")
    store.move_study(study.id, "running")
    launch = store.add_launch(study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]},
                              executor="replay")  # fmt: skip
    store.update_launch(launch.id, state="running", backend_id="replay-1")  # its runner killed meanwhile
    result = runner.invoke(app, ["cancel", str(study.id), "--db", db])  # by id, or by name
    assert result.exit_code == 0, result.output
    # output: stderr alone where click can tell them apart, with stdout (empty here) where it cannot
    assert result.output.splitlines() == [f"study left (id {study.id}) cancelled",
                                          "stopped 1 launch(es) it left running"]  # fmt: skip
    assert store.study(study.id).state == "cancelled"
    assert (store.launch(launch.id).state, store.launch(launch.id).error) == (
        "cancelled",
        "its study ended while no runner followed it: cancelled",
    )
    again = runner.invoke(app, ["cancel", "left", "--db", db])
    assert (again.exit_code, again.output.strip()) == (
        1,
        f"error: study left (id {study.id}) is already cancelled",
    )
    for name in ("lefft", "99999999999999999999", "\u00b2"):  # a traceback for the last two
        unknown = runner.invoke(app, ["cancel", name, "--db", db])
        assert (unknown.exit_code, unknown.output.strip()) == (
            2, f"error: no study {name!r} in this store: `autotuner studies` lists them"
        )  # fmt: skip
    store.dispose()


def left_running(store: Store, tmp_path, backend_id: str = "replay-1",
                 left: str = "replay-1 may still run: its cancel failed (TimeoutError)") -> tuple:  # fmt: skip
    """A replay study "left" with a launch given up at its timeout, its cancel not confirmed."""
    study = replay_study(store, tmp_path, "left")
    launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": [{}]},
                              executor="replay")  # fmt: skip
    store.update_launch(launch.id, state="cancelled", backend_id=backend_id, error="cancelled at its timeout",
                        left_running=left)  # fmt: skip
    return study, launch


def test_cancel_of_an_ended_study_sends_the_cancels_it_left_unconfirmed_again(tmp_path, monkeypatch):
    """Only a service's scheduler sent them again: where none ran on the store, a job whose scancel never
    reached the controller held its nodes until its time limit, and `autotuner cancel` said only "already
    cancelled"."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study, launch = left_running(store, tmp_path)
    store.move_study(study.id, "cancelled")
    still = "replay-1 may still run: the controller did not answer; check `squeue --jobs 1`"
    monkeypatch.setattr(ReplayExecutor, "cancel", lambda *_: still)
    result = runner.invoke(app, ["cancel", "left", "--db", db])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert said == (f"study left (id {study.id}) is already cancelled: cancelling again the launches it may have "
                    f"left running launch 1: {still} error: 1 launch(es) may still run: `autotuner cancel` sends "
                    "their cancels again, as a service's scheduler on this store does every minute")  # fmt: skip
    assert store.launch(launch.id).left_running == still  # what the cancel says now
    monkeypatch.undo()  # the job ended meanwhile: the replay executor's cancel says so
    result = runner.invoke(app, ["cancel", "left", "--db", db])
    assert result.exit_code == 0, result.output
    ended = "later seen ended (replay-1, cancelled again by `autotuner cancel`)"
    assert f"launch 1: {ended}" in " ".join(result.output.split())
    row = store.launch(launch.id)
    assert (row.left_running, row.error) == (None, f"cancelled at its timeout; {ended}")
    again = runner.invoke(app, ["cancel", "left", "--db", db])  # nothing left: as before
    assert (again.exit_code, again.output.strip()) == (
        1,
        f"error: study left (id {study.id}) is already cancelled",
    )
    store.dispose()


def test_cancel_of_a_study_not_ended_sends_the_cancels_it_left_unconfirmed_again(tmp_path, monkeypatch):
    """A study not ended (a tune interrupted after a launch given up at its queue timeout, its scancel
    unconfirmed) was cancelled with exit 0 and not a word of the job that may still run."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    study, launch = left_running(store, tmp_path)
    still = "replay-1 may still run: the controller did not answer"
    monkeypatch.setattr(ReplayExecutor, "cancel", lambda *_: still)
    result = runner.invoke(app, ["cancel", "left", "--db", db])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert f"study left (id {study.id}) cancelled launch 1: {still} error: 1 launch(es) may still run" in said
    store.dispose()


def test_tune_names_the_launches_its_study_may_have_left_running(tmp_path):
    """A launch whose cancel was not confirmed (its queue timeout, a scancel that never reached the
    controller) was said in the launch's error alone: `tune` ended without a word of the job that may
    still hold nodes, or of what sends its cancel again where no service runs the store."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    left = "Slurm job 7 may still run: scancel did not reach the controller (by hand: `scancel 7`)"
    study, launch = left_running(store, tmp_path, "7", left)
    store.dispose()
    result = runner.invoke(app, ["tune", "--study", "left", "--db", db])
    said = " ".join(result.output.split())
    assert f"launch {launch.seq}: {left} `autotuner cancel left` sends their cancels again" in said, said


def test_a_study_name_to_resume_that_is_not_there_is_said_so(tmp_path):
    """It read as a new study missing its options: "--cluster, --workload and --space are required"."""
    db = f"sqlite:///{tmp_path / 'at.db'}"
    Store(db).dispose()
    result = runner.invoke(app, ["tune", "--study", "lefft", "--db", db])
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == (
        "error: no study 'lefft' in this store: `autotuner studies` lists them; to create it, give --cluster, "
        "--workload and --space too"
    )


def landscape_with(tmp_path, **changes) -> str:
    recorded = {**json.loads(LANDSCAPE.read_text()), **changes}
    path = tmp_path / "landscape.json"
    path.write_text(json.dumps(recorded))
    return str(path)


@pytest.mark.parametrize(
    ("changes", "said"),
    [({"points": [{"env": {}, "candidate": {}, "results": "ok"}]}, "point 0: results must be a non-empty list"),
     ({"points": [{"env": {}, "candidate": {}, "results": [1, 2]}]}, "point 0: results must be a non-empty list"),
     ({"points": []}, "a landscape with no recorded points answers no launch"),
     ({"workload": {**RECORDED["workload"], "tables": RECORDED["workload"]["tables"][:1]}},
      "the landscape was recorded for another model (its tables differ")],
    ids=["results a string", "results not objects", "no points", "another model"],
)  # fmt: skip
def test_a_landscape_that_cannot_answer_this_study_is_refused_before_it_starts(tmp_path, changes, said):
    """Results that were no objects were a traceback mid-study; another model's were published as this
    job's figures (found by fuzzing)."""
    result = tune(tmp_path, "--landscape", landscape_with(tmp_path, **changes))
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert "Traceback" not in result.output
    assert Store(f"sqlite:///{tmp_path / 'at.db'}").studies() == []  # refused before its row


def test_the_job_s_own_batch_and_name_are_not_another_model(tmp_path):
    workload = {**RECORDED["workload"], "name": "renamed", "batch_size": 256}
    result = tune(tmp_path, "--landscape", landscape_with(tmp_path, workload=workload))
    assert "another model" not in result.output
    assert "created" in result.output  # the study ran (this space's points are not all recorded)


def test_an_executor_option_nested_too_deep_is_said(tmp_path):
    result = tune(tmp_path, "--executor-option", "delay_s=" + "[" * 3000)
    assert result.exit_code == 2, result.output
    assert "--executor-option delay_s: its JSON is nested too deep" in result.output


@pytest.mark.parametrize("below", ["a-file/at.db", "x" * 300 + ".db"])
def test_a_store_that_cannot_be_made_there_is_said(tmp_path, below):
    (tmp_path / "a-file").write_text("")
    result = runner.invoke(app, ["studies", "--db", f"sqlite:///{tmp_path / below}"])
    assert result.exit_code == 2, result.output
    result = tune(tmp_path, "--db", f"sqlite:///{tmp_path / below}")
    assert result.exit_code == 2, result.output
    assert "cannot open the store" in result.output


def test_an_argument_that_is_not_utf8_is_refused_before_any_query(tmp_path):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "autotuner", "configs", "show", b"caf\xe9", "small", "--db",
            f"sqlite:///{tmp_path / 'at.db'}"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "the argument 'caf\\xe9' is not UTF-8 text" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--cluster", "c"], ["--confirm-rounds", "1"]])
def test_a_new_study_refused_makes_no_store(tmp_path, args):
    """A typo'd --db with a refused study left an empty store (and its folder) behind."""
    db = tmp_path / "typo" / "at.db"
    full = (
        []
        if args[0] == "--cluster"
        else ["--cluster", "c", "--workload", str(LANDSCAPE), "--space", "socket"]
    )
    result = runner.invoke(app, ["tune", *full, *args, "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "typo").exists()


def test_an_empty_workdir_is_refused_not_the_current_directory(tmp_path, monkeypatch):
    """--workdir "" was Path("."): launch directories written wherever the command ran (found by fuzzing)."""
    monkeypatch.chdir(tmp_path)
    result = tune(tmp_path, "--workdir", "")
    assert result.exit_code == 2, result.output
    assert "empty: give a folder" in result.output
    assert not list(tmp_path.glob("study-*"))


@pytest.mark.parametrize("version", ["1_0", "\u0663", "+3", " 3"])
def test_a_version_is_ascii_digits(tmp_path, version):
    """int() took "1_0" for 10 and an Arabic-Indic 3 for 3: a pin of a version nobody typed."""
    result = runner.invoke(
        app, ["configs", "pin", "c", "w", version, "--db", f"sqlite:///{tmp_path / 'at.db'}"]
    )
    assert result.exit_code == 2, result.output
    assert "is not a version: v3 or 3" in result.output
