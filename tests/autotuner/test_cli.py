"""The `autotuner` CLI, driven with Typer's runner (and a real process where the entry point matters)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from autotuner.cli.commands import app
from tests.helpers import LANDSCAPE

runner = CliRunner()


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'at.db'}"


@pytest.fixture
def tuned(tmp_path, db):
    """A finished replay study whose config is published."""
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    space = tmp_path / "space.yaml"
    space.write_text(
        "env:\n  NCCL_NSOCKS_PERTHREAD: [null, 4]\nprecisions: [[fp32, fp32], [fp16, fp16], [fp8, bf16], [int8, int8]]\n"
        "batch_sizes: [64, 256]\nallow_batch_change: true\nforce_inert: [NCCL_NSOCKS_PERTHREAD]\n"
    )
    result = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", str(workload), "--space", str(space),
                                 "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "3",
                                 "--candidates-per-launch", "3", "--confirm-rounds", "2",
                                 "--workdir", str(tmp_path / "runs"), "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    return result


def test_tune_prints_best_vs_baseline_and_publishes(tuned):
    out = tuned.output
    assert "what was published vs the baseline" in out
    # the ladder dropped the env step of the fastest row: it is labelled, not shown as the one shipped
    assert "fastest measured (not" in out  # the header folds at 80 columns
    assert "baseline" in out
    assert "confirmed speedup" in out
    assert "published cpu-box/small version 1" in out


def test_env_prints_the_exports_of_the_published_config(tuned, db):  # quoting: test_configs.py
    result = runner.invoke(app, ["env", "--cluster", "cpu-box", "--workload", "small", "--db", db])
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("# nccl-autotuner cpu-box/small/1n/v1")
    assert all(line.startswith("export AUTOTUNER_") or line.startswith("export NCCL_") for line in lines[1:])
    assert any(line.startswith("export AUTOTUNER_BATCH_SIZE=") for line in lines)


def hook_env(*args: str) -> subprocess.CompletedProcess:
    """`autotuner env` as a job runs it: its own process, stdout and stderr apart (CliRunner mixes them
    under older click)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    return subprocess.run([sys.executable, "-m", "autotuner", "env", *args], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip


def test_env_for_an_unknown_workload_prints_nothing_and_exits_0(tuned, db):
    result = hook_env("--cluster", "cpu-box", "--workload", "nope", "--db", db)
    assert result.returncode == 0
    assert result.stdout == ""
    # said, as the service's 404 is (before: nothing at all, a typo indistinguishable from no tuning)
    assert "no config published for cpu-box/nope in the store" in result.stderr


def test_configs_history_pin_rollback(tuned, db):
    listing = runner.invoke(app, ["configs", "--db", db])
    assert listing.exit_code == 0
    assert "cpu-box" in listing.output
    assert "v1" in listing.output
    assert (
        runner.invoke(app, ["configs", "rollback", "cpu-box", "small", "--db", db]).exit_code == 2
    )  # only v1
    history = runner.invoke(app, ["configs", "history", "cpu-box", "small", "--limit", "1", "--db", db])
    assert history.exit_code == 0
    assert "v1" in history.output
    assert "more:" not in history.output  # one version: one page
    empty = runner.invoke(app, ["configs", "history", "cpu-box", "small", "--offset", "1", "--db", db])
    assert "v1" not in empty.output
    shown = runner.invoke(app, ["configs", "show", "cpu-box", "small", "--format", "slurm", "--db", db])
    assert shown.exit_code == 0
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in shown.stdout


def tuned_again(tmp_path, db) -> list[str]:
    """The command the `tuned` fixture ran, naming the study it made."""
    return ["tune", "--cluster", "cpu-box", "--workload", str(tmp_path / "w.json"), "--space", str(tmp_path / "space.yaml"),
            "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "3", "--candidates-per-launch", "3",
            "--confirm-rounds", "2", "--workdir", str(tmp_path / "runs"), "--study", "cpu-box.small.1", "--db", db]  # fmt: skip


def test_tune_of_a_finished_study_redoes_nothing_and_refuses_other_options(tuned, tmp_path, db):
    # the command that made it, run again: nothing is redone
    again = runner.invoke(app, tuned_again(tmp_path, db))
    assert again.exit_code == 0, again.output
    assert "study cpu-box.small.1 (id 1) already done" in again.output
    # options the stored study does not have were ignored without a word: now refused, named
    other = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", "x", "--space", "socket",
                                "--study", "cpu-box.small.1", "--db", db])  # fmt: skip
    assert other.exit_code == 2, other.output
    assert "--space" in other.output


def test_a_tuner_whose_new_study_another_tuner_made_a_moment_ago_resumes_it(tuned, tmp_path, db, monkeypatch):
    """Two `autotuner tune --study NAME` started at once: both read no study of that name, one made it,
    and the other stopped with "study 'NAME' already exists" (exit 2), where it resumes one."""
    from autotuner.store import Store

    real, reads = Store.study, []

    def read_before_the_other_made_it(self, ref):
        reads.append(ref)
        return None if len(reads) == 1 else real(self, ref)

    monkeypatch.setattr(Store, "study", read_before_the_other_made_it)
    again = runner.invoke(app, tuned_again(tmp_path, db))
    assert again.exit_code == 0, again.output
    assert "study cpu-box.small.1 (id 1) already done" in again.output


def test_relative_paths_given_to_tune_still_hold_from_another_directory(tmp_path, db, monkeypatch):
    # the study keeps them: stored as given, a re-validation (or the service's scheduler, a resume) run
    # from another directory failed with FileNotFoundError
    shutil.copy(LANDSCAPE, tmp_path / "recorded.json")
    (tmp_path / "w.json").write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    (tmp_path / "space.yaml").write_text("precisions: [[fp32, fp32], [fp16, fp16]]\nbatch_sizes: [64]\n")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", "w.json", "--space", "space.yaml",
                                 "--executor", "replay", "--landscape", "recorded.json", "--trials", "1",
                                 "--workdir", "runs", "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path / "runs")
    again = runner.invoke(app, ["revalidate", "cpu-box", "small", "--db", db])
    assert again.exit_code == 0, again.output
    assert not (tmp_path / "runs" / "runs").exists()


@pytest.mark.parametrize(
    ("args", "variable", "rule"),
    [
        (["NCCL_NSOCK_PERTHREAD=4"], "NCCL_NSOCK_PERTHREAD", "unknown-variable"),
        (["LD_PRELOAD=/tmp/x.so"], "LD_PRELOAD", "injection"),
        (["PYTHONPATH=/tmp"], "PYTHONPATH", "injection"),
        (["NCCL_BUFFSIZE=4MB"], "NCCL_BUFFSIZE", "not-decimal"),
        (["NCCL_BUFFSIZE=0x10"], "NCCL_BUFFSIZE", "not-decimal"),
        (["NCCL_BUFFSIZE=010"], "NCCL_BUFFSIZE", "not-decimal"),
        (["NCCL_P2P_PXN_LEVEL=7"], "NCCL_P2P_PXN_LEVEL", "out-of-domain"),
        (["NCCL_NSOCKS_PERTHREAD=16", "NCCL_SOCKET_NTHREADS=8"], "NCCL_NSOCKS_PERTHREAD", "constraint"),
        (["NCCL_PROTO=LL128"], "NCCL_PROTO", "risky"),
    ],
)
def test_lint_env_rejects_bad_input_naming_variable_and_rule(args, variable, rule):
    result = runner.invoke(app, ["lint", *[a for x in args for a in ("--env", x)]])
    assert result.exit_code == 2, result.output
    assert variable in result.output
    assert rule in result.output


def test_lint_env_accepts_risky_when_allowed_and_clean_env():
    ok = runner.invoke(app, ["lint", "--env", "NCCL_PROTO=Simple", "--allow-risky", "NCCL_PROTO"])
    assert ok.exit_code == 0, ok.output
    assert (
        runner.invoke(
            app, ["lint", "--env", "NCCL_NSOCKS_PERTHREAD=4", "--env", "NCCL_SOCKET_NTHREADS=2"]
        ).exit_code
        == 0
    )


def test_lint_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  NCCL_BUFFSIZE: ['4MB']\n  LD_LIBRARY_PATH: ['/x']\n")
    result = runner.invoke(app, ["lint", str(bad)])
    assert result.exit_code == 2
    assert "not-decimal" in result.output
    assert "injection" in result.output
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"env": {"NCCL_NSOCKS_PERTHREAD": [1, 2, 4]}}))
    assert runner.invoke(app, ["lint", str(good)]).exit_code == 0
    assert runner.invoke(app, ["lint", str(tmp_path / "missing.yaml")]).exit_code == 2


def test_lint_reads_a_preset_name_as_tune_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file named efa here: the name is the preset's
    result = runner.invoke(app, ["lint", "efa"])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output
    missing = runner.invoke(app, ["lint", "nosuch"])
    assert missing.exit_code == 2
    assert "no such file or preset (presets: efa, socket)" in " ".join(missing.output.split())


def test_tune_rejects_bad_input_with_a_clear_message(tmp_path, db):
    workload = tmp_path / "w.json"
    workload.write_text('{"name": "w", "tables": []}')
    result = runner.invoke(
        app, ["tune", "--cluster", "c", "--workload", str(workload), "--space", "socket", "--db", db]
    )
    assert result.exit_code == 2
    assert "workload.tables" in result.output
    result = runner.invoke(app, ["tune", "--cluster", "../etc", "--workload", str(workload), "--space", "socket",
                                 "--db", db])  # fmt: skip
    assert result.exit_code == 2
    assert "cluster name" in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--fabric", "2gb"], "--fabric: a rate such as 2gbit, 500mbit or 100kbit"),
     (["--executor", "replay"], "the replay executor needs a recorded landscape: give --landscape FILE "
                                "(or --executor-option landscape=FILE)")],
    ids=["fabric", "replay"],
)  # fmt: skip
def test_tune_says_what_to_give_in_the_options_words(tmp_path, db, args, said):
    """It said the regex of --fabric, and executor_options.landscape, which the command line has no option of."""
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    result = runner.invoke(app, ["tune", "--cluster", "c", "--workload", str(workload), "--space", "socket",
                                 "--db", db, *args])  # fmt: skip
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())
    assert "pattern" not in result.output
    assert "executor_options" not in result.output


def test_hook_entry_point_skips_heavy_imports(tmp_path):
    """`autotuner env` runs at every job start: no Typer, Rich, SQLAlchemy or torch on the service path."""
    code = (
        "import sys\n"
        "sys.argv = ['autotuner', 'env', '--server', 'http://127.0.0.1:9', '--cluster', 'c', '--workload', 'w']\n"
        "from autotuner.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    rc = exit.code\n"
        "print(rc, sorted(m for m in ('typer', 'rich', 'sqlalchemy', 'torch', 'optuna') if m in sys.modules))\n"
        "tops = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(sorted(m for m in tops if m not in ('autotuner', 'trials') and not m.startswith('_') and m != 'site'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('trials')))\n"
    )
    env = {**os.environ, "AUTOTUNER_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    # the gate the hook applies (autotuner.envvars, autotuner.job.exports) is standard library only, too; of
    # trials/ only the spec's lists of choices (trials.choices, standard library only), not the spec
    assert out.stdout.split("\n")[:3] == ["0 []", "[]", "['trials', 'trials.choices']"], out.stderr
    assert "unreachable" in out.stderr


def test_the_progress_line_of_a_quality_launch_has_no_throughput_and_says_its_cost(caplog, capsys):
    # A quality launch trains and scores models: its rows carry no samples/s (the bar must say so, not
    # fail), and its wall time is said as it ends (the convergence check's cost)
    from types import SimpleNamespace

    from autotuner.cli.commands import _progress_bar

    launch = SimpleNamespace(seq=7, kind="quality", summary={"wall_s": 41.6})
    rows = [SimpleNamespace(state="ok", samples_per_s=None), SimpleNamespace(state="ok", samples_per_s=None)]
    with _progress_bar(3) as progress:
        progress.on_launch_end(launch, rows)
    assert "progress callback" not in caplog.text
    assert "launch 7 quality: 2/2 ok, 2 models trained in 42 s" in capsys.readouterr().err


def tune_a_small_space(tmp_path, db):
    """A replay study whose search measures its 4 points in 2 of its 10 launches."""
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    space = tmp_path / "space.yaml"  # 2 env points x 2 in-process points
    space.write_text("env:\n  NCCL_NSOCKS_PERTHREAD: [null, 4]\nprecisions: [[fp32, fp32], [fp16, fp16]]\n"
                     "batch_sizes: [64]\nforce_inert: [NCCL_NSOCKS_PERTHREAD]\n")  # fmt: skip
    result = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", str(workload), "--space", str(space),
                                 "--executor", "replay", "--landscape", str(LANDSCAPE), "--trials", "10",
                                 "--confirm-rounds", "2", "--ladder-rounds", "0", "--quality-samples", "0",
                                 "--workdir", str(tmp_path / "runs"), "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    return result


def test_tune_says_once_that_the_search_ended_early(tmp_path, db):
    """The service's log said it at INFO; `tune` said nothing, and `studies` then read "launches 2/10"."""
    said = " ".join(tune_a_small_space(tmp_path, db).output.split())
    assert said.count("every runnable point of its space is measured: the search ends") == 1, said
    # and its column says what it counts: search launches of --trials, not every launch the study ran
    listed = runner.invoke(app, ["studies", "--db", db], env={"COLUMNS": "200"})
    header, row = [line for line in listed.stdout.splitlines() if "searched" in line or "done" in line][:2]
    assert header.split()[header.split().index("searched")] == "searched"
    assert "launches" not in header
    assert re.search(r" 2/\d+ ", row), row


def test_tune_off_a_terminal_says_each_phase_and_launch_in_a_line(tmp_path, db):
    """Off a terminal (CI, `| tee`) rich's bar drew nothing until the study ended: minutes of silence."""
    lines = tune_a_small_space(tmp_path, db).output.splitlines()
    progress = [line for line in lines if line.startswith(("phase: ", "launch ", "every runnable"))]
    assert [line.split(":")[0] for line in progress] == [
        "phase", "launch 1 baseline", "phase", "launch 2 search", "launch 3 search", "every runnable point of its space is measured",
        "phase", "launch 4 confirm",
    ], lines  # fmt: skip
    assert progress[0] == "phase: baseline"
    assert progress[1].startswith("launch 1 baseline: 1/1 ok, ")


def test_env_from_a_store_that_is_not_there_says_so_and_creates_nothing(tmp_path):
    # before: an empty SQLite file was created there and a multi-line "no such table" error printed
    missing = tmp_path / "typo.db"
    result = hook_env("--cluster", "c", "--workload", "w", "--db", f"sqlite:///{missing}")
    assert result.returncode == 0
    assert result.stdout == ""
    assert f"could not read the config: FileNotFoundError: no store at {missing}" in result.stderr
    assert not missing.exists()


def test_two_stores_never_share_a_launch_directory_and_prune_keeps_to_its_own(tmp_path, monkeypatch):
    # without --workdir both stores' study 1 ran in DATA_DIR/runs/study-1/launch-0001: each overwrote the
    # other's spec and result, and `autotuner prune` on one store removed the other's launches
    from autotuner.store import Store

    data = tmp_path / "data"
    monkeypatch.setenv("AUTOTUNER_DATA_DIR", str(data))
    monkeypatch.delenv("AUTOTUNER_DATABASE_URL", raising=False)
    (tmp_path / "w.json").write_text(json.dumps(json.loads(LANDSCAPE.read_text())["workload"]))
    (tmp_path / "space.yaml").write_text("precisions: [[fp32, fp32], [fp16, fp16]]\nbatch_sizes: [64]\n")
    stores = {"default": None, "scratch": f"sqlite:///{tmp_path / 'scratch.db'}"}
    for db in stores.values():
        result = runner.invoke(app, ["tune", "--cluster", "cpu-box", "--workload", str(tmp_path / "w.json"),
                                     "--space", str(tmp_path / "space.yaml"), "--executor", "replay",
                                     "--landscape", str(LANDSCAPE), "--trials", "1", *(["--db", db] if db else [])])  # fmt: skip
        assert result.exit_code == 0, result.output
    opened = {name: Store(db or f"sqlite:///{data / 'autotuner.db'}") for name, db in stores.items()}
    dirs = {
        name: {x.workdir for s in store.studies() for x in store.launches(s.id)}
        for name, store in opened.items()
    }
    assert all(d.startswith(str(data / "runs" / "study-1")) for d in dirs["default"])  # as the docs say
    assert all(d.startswith(str(data / "runs" / "scratch-")) for d in dirs["scratch"])
    assert not dirs["default"] & dirs["scratch"]

    pruned = runner.invoke(app, ["prune", "--older-than", "0", "--db", stores["scratch"]])
    assert pruned.exit_code == 0, pruned.output
    assert all(os.path.isdir(d) for d in dirs["default"])
    assert not any(os.path.exists(d) for d in dirs["scratch"])


def test_a_relative_data_dir_is_kept_absolute(tmp_path, monkeypatch):
    # AUTOTUNER_DATA_DIR=data recorded launches as data/runs/...: prune (absolute paths only) then never
    # removed them, and a run from another directory looked elsewhere
    from api.settings import Settings
    from autotuner.paths import default_data_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNER_DATA_DIR", "data")
    assert default_data_dir() == tmp_path / "data"
    assert Settings().data_dir == tmp_path / "data"  # the service reads the variable itself


def test_the_service_and_the_cli_name_the_same_folder_for_a_store_and_apart_for_two(tmp_path):
    # the service put every store's launches in DATA_DIR/runs: one on PostgreSQL and the CLI on the
    # data dir's own SQLite (as operations.md has it) both ran their study 1 in runs/study-1
    from autotuner.tuning.settings import default_workdir

    own = default_workdir(f"sqlite:///{tmp_path / 'autotuner.db'}", tmp_path)
    postgres = default_workdir("postgresql+psycopg://tuner:s3cret@db.internal/autotuner", tmp_path)
    assert own == tmp_path / "runs"
    assert postgres.parent == tmp_path / "runs"
    assert postgres.name.startswith("autotuner-")
    assert "s3cret" not in str(postgres)
    # one store, one folder: the password rotated, the service or the CLI asking
    assert default_workdir("postgresql+psycopg://tuner:rotated@db.internal/autotuner", tmp_path) == postgres


@pytest.mark.parametrize(
    ("allowed", "code", "rule"),
    [("NCCL_FOO", 2, "unknown-variable"), ("LD_PRELOAD", 2, "injection"), ("", 2, "injection"),
     ("NCCL_NSOCKS_PERTHREAD", 0, "no-effect")],
)  # fmt: skip
def test_lint_judges_what_it_is_told_to_allow_as_a_space_file_does(allowed, code, rule):
    """--allow-risky NCCL_FOO (a typo) or LD_PRELOAD was taken without a word; a space's allow_risky
    refuses them (found by fuzzing)."""
    result = runner.invoke(app, ["lint", "--env", "NCCL_NET=Socket", "--allow-risky", allowed])
    assert result.exit_code == code, result.output
    assert rule in result.output


def test_an_executor_option_given_twice_is_refused_not_the_last_taken(tmp_path):
    args = ["tune", "--cluster", "c", "--workload", str(tmp_path / "w.json"), "--space", "socket", "--executor",
            "replay", "--db", f"sqlite:///{tmp_path / 'at.db'}"]  # fmt: skip
    twice = runner.invoke(app, [*args, "--executor-option", "seed=1", "--executor-option", "seed=2"])
    assert twice.exit_code == 2, twice.output
    assert "--executor-option seed given twice" in twice.output
    both = runner.invoke(app, [*args, "--executor-option", "landscape=/a.json", "--landscape", "/b.json"])
    assert both.exit_code == 2, both.output
    assert "given twice (and as --landscape)" in both.output


def test_the_tune_bar_ends_with_the_search_and_keeps_the_studys_best(monkeypatch):
    """From a new user's walk: the bar stayed at 2/4 through confirm and ladder when the search ended
    early, and "best" was each launch's own (68,017, then 40,187, then 12,145)."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    import autotuner.cli.commands as commands

    console = Console(file=io.StringIO(), width=200, force_terminal=True, record=True)  # the bar's
    monkeypatch.setattr(commands, "err", console)

    def row(samples_per_s: float) -> SimpleNamespace:
        return SimpleNamespace(state="ok", samples_per_s=samples_per_s)

    def launch(seq: int, kind: str, attempt: int = 1) -> SimpleNamespace:
        return SimpleNamespace(seq=seq, kind=kind, attempt=attempt, summary={})

    with commands._progress_bar(5) as progress:
        progress.on_phase("baseline")
        progress.on_launch_end(launch(1, "baseline"), [row(27_000.0)])
        progress.on_phase("search")
        progress.on_launch_end(launch(2, "search"), [row(68_000.0)])
        progress.on_launch_end(launch(3, "search"), [SimpleNamespace(state="failed", samples_per_s=None)])
        progress.on_launch_end(launch(4, "search", attempt=2), [row(40_000.0)])  # 3, cancelled, again
        progress.on_phase("confirm")
    drawn = console.export_text().strip()  # a terminal's redraws, recorded one after another
    last = "confirm " + drawn.rpartition("confirm ")[2]
    assert " 3/3 " in last  # the search ended after 3 of the 5 launches budgeted: the bar ends there
    assert last.endswith("launch 4 search: 1/1 ok, 40,000 samples/s (best so far 68,000)")


def test_lint_says_each_problem_in_a_table_with_its_severity_and_counts_them():
    """Its messages wrapped back to column 0 under the variables, with no severity and no count."""
    result = runner.invoke(app, ["lint", "--env", "NCCL_BUFFSIZE=4MB", "--env", "NCCL_NSOCKS_PERTHREAD=16",
                                 "--env", "NCCL_SOCKET_NTHREADS=8"], env={"COLUMNS": "80"})  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("variable"))
    assert header.split() == ["variable", "severity", "rule", "problem"]
    column = header.index("problem")
    rows = lines[lines.index(header) + 2 : -1]
    assert all(not line[:column].strip() or line.split()[1] == "error" for line in rows), rows
    assert all(len(line.rstrip()) <= 80 for line in lines)
    assert lines[-1] == "2 errors, 0 warnings"


def test_the_help_says_what_serve_does_and_its_defaults():
    """`autotuner --help` said "serve (from api.cli; ...)", and `serve --help` no default at all."""
    import subprocess
    import sys

    listing = subprocess.run([sys.executable, "-m", "autotuner", "--help"], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "200"}, timeout=60)  # fmt: skip
    assert "Run the service: REST API, dashboard and the study scheduler" in listing.stdout
    assert "from api.cli" not in listing.stdout
    serve = subprocess.run([sys.executable, "-m", "autotuner", "serve", "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"}, timeout=60)  # fmt: skip
    assert serve.returncode == 0, serve.stderr
    for said in (
        "AUTOTUNER_HOST; default 127.0.0.1",
        "AUTOTUNER_PORT; default 8000",
        "AUTOTUNER_WORKERS; default 2",
    ):
        assert said in serve.stdout


@pytest.mark.parametrize("error", ["database is locked", "a bug"])
def test_a_store_that_stops_answering_after_it_opened_is_said_not_a_traceback(
    tuned, db, monkeypatch, capsys, error
):
    """A store that stopped answering between its opening and a command's first read (SQLite locked past
    its busy timeout, PostgreSQL restarting): the command printed a raw traceback, where it says the store
    did not answer and to run it again (exit 1). A bug keeps its traceback."""
    from sqlalchemy.exc import OperationalError

    from autotuner.__main__ import main
    from autotuner.store import Store

    def away(*_args, **_kwargs):
        raise OperationalError("SELECT at_studies ...", {}, Exception(error))

    monkeypatch.setattr(Store, "studies", away)
    monkeypatch.setattr(sys, "argv", ["autotuner", "studies", "--db", db])
    if error == "a bug":
        with pytest.raises(OperationalError):
            main()
        return
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 1
    said = capsys.readouterr().err
    assert said.startswith(
        "error: the store did not answer (OperationalError: (builtins.Exception) database is locked"
    )
    assert "run the command again once it does" in said
