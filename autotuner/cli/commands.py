"""The `autotuner` command line (Typer). Diagnostics go to stderr; machine output (export lines,
JSON) alone to stdout. The entry point is autotuner.__main__, which sends the pre-job hook commands
(`env`, `exec`) to autotuner.job.hook without importing any of this."""

from __future__ import annotations

import inspect
import json
import math
import re
import signal
import sys
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from autotuner.cli.claim_report import BASELINE_KEPT, finalist_text, kept_baseline, kept_served, short
from autotuner.cli.terminal import Name, labelled, shown, stdout_console
from autotuner.executors.results import finite
from autotuner.files import read_bounded
from autotuner.job.exports import FORMATS, render
from autotuner.names import published_hint
from autotuner.paths import default_database_url
from autotuner.store.models import name_of
from autotuner.store.states import CandidateState, LaunchKind, StudyState
from autotuner.store.validations import unshowable
from autotuner.text import displayed
from autotuner.tuning.lease import store_unavailable
from autotuner.tuning.outcome import Outcome
from autotuner.tuning.settings import RequestSettings, StudySettings, default_workdir
from autotuner.tuning.study import create_study, study_settings

app = typer.Typer(
    name="autotuner",
    help="Find the NCCL env, comm precision and batch size that make TorchRec all-to-all fast, and serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
configs_app = typer.Typer(
    help="Published configs: list (no command), show, history, pin, unpin, rollback, validations.",
    no_args_is_help=False,
)
app.add_typer(configs_app, name="configs")
err = Console(stderr=True)
out = stdout_console()

DB_HELP = (
    "SQLAlchemy URL of the store, e.g. sqlite:////srv/autotuner.db (default: autotuner.db in "
    "$AUTOTUNER_DATA_DIR, else in nccl-autotuner under ~/.local/share)"  # no word a help column cuts
)
DbOption = Annotated[str | None, typer.Option("--db", envvar="AUTOTUNER_DATABASE_URL", help=DB_HELP)]
KW = inspect.Parameter.KEYWORD_ONLY


def _store(db: str | None, *, create: bool = False, unavailable: int = 1) -> Any:
    """The store at `db` (else the default). Only `tune` creates one: a read of a SQLite file that is
    not there is an error naming it, not a new empty store (and directories) at a mistyped path.
    `unavailable`: the exit code for a server that does not answer (1: try again)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from autotuner.store.db import shown_url

    if db is not None and not db.strip():  # before: the default store, silently
        raise _fail("--db is empty: give a SQLAlchemy URL, e.g. sqlite:////srv/autotuner/autotuner.db")
    url = db or default_database_url()
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise _fail(
            f"--db {url!r} is not a SQLAlchemy URL: use e.g. sqlite:////srv/autotuner/autotuner.db"
        ) from exc
    where = shown_url(url)
    try:
        return _opened(url, parsed, where, create, unavailable)
    except OSError as exc:  # a folder that cannot be made (a file there), a name too long for the file system
        why = f"{exc.strerror} ({exc.filename})" if exc.strerror and exc.filename else str(exc)
        raise _fail(f"cannot open the store {where}: {why}") from exc


def _opened(url: str, parsed: Any, where: str, create: bool, unavailable: int) -> Any:
    import os

    from sqlalchemy.exc import DBAPIError, NoSuchModuleError, OperationalError

    from autotuner.store import Store
    from autotuner.store.db import SchemaError, foreign_sqlite_tables, in_memory, missing_sqlite_file

    if in_memory(parsed):  # before: a study tuned into it, then gone at exit
        raise _fail(f"--db {where} is an in-memory SQLite store: what is written there is gone when the "
                    "command exits; give a file, e.g. sqlite:////srv/autotuner/autotuner.db")  # fmt: skip
    missing = missing_sqlite_file(url)
    if not create and missing:
        raise _fail(f"no store at {missing}: give --db sqlite:////path/to/autotuner.db, or set "
                    "AUTOTUNER_DATABASE_URL or AUTOTUNER_DATA_DIR (`autotuner tune` creates one)")  # fmt: skip
    if foreign := foreign_sqlite_tables(url):  # left as it is: opening it would add our tables to it
        raise _fail(f"{where} is not an nccl-autotuner store (it holds {', '.join(foreign[:5])}"
                    f"{', ...' if len(foreign) > 5 else ''}): give the store's --db")  # fmt: skip
    try:
        return Store(url)
    except (
        NoSuchModuleError,
        ImportError,
    ) as exc:  # ImportError: a known dialect whose driver is not installed
        raise _fail(f"--db {where}: no database driver {parsed.drivername!r} (sqlite or postgresql)") from exc
    except SchemaError as exc:  # a newer version's store, a lock on a read-only mount: the message says
        raise _fail(f"cannot open the store {where}: {exc}") from exc
    except DBAPIError as exc:  # not a database file, a server that does not answer
        why = " ".join(str(exc.orig).split())
        folder = Path(parsed.database or ".").expanduser().parent
        read_only = parsed.get_backend_name() == "sqlite" and not os.access(folder, os.W_OK)
        if isinstance(exc, OperationalError) and read_only:
            # a read-only mount: SQLite reads a WAL store through `<file>-shm`, which it must create there
            raise _fail(f"cannot open the store {where}: {why} ({folder} is not writable, and SQLite reads this "
                        "store through a -shm file beside it: open a copy on a writable file system)") from exc  # fmt: skip
        code = unavailable if isinstance(exc, OperationalError) else 2  # a server that does not answer
        raise _fail(f"cannot open the store {where}: {why}", code) from exc


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)  # one line, however long
    return typer.Exit(code)


# ---------------------------------------------------------------------------------------- tune


MAX_JSON_FILE_BYTES = 64 << 20  # a workload is KBs, a recorded landscape a few MB


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(
            read_bounded(path, MAX_JSON_FILE_BYTES, follow_links=True), object_pairs_hook=_unique
        )
    except OSError as exc:
        raise _fail(f"{what} {path}: {exc.strerror or exc}") from exc
    except RecursionError:
        raise _fail(f"{what} {path} is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise _fail(f"{what} {path} is not valid JSON: {exc}") from exc


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys differ: a second "name" would silently win (and name another config)."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"key {twice!r} appears twice")
    return dict(pairs)


# tune's options in panels: each panel's table is laid out on its own, so a long option name in one
# (--candidates-per-launch) no longer squeezes every help text of the others at 80 columns.
PANELS = {
    "Where it runs": ("executor", "landscape", "executor_option", "workdir", "nproc_per_node", "nnodes",
                      "launch_timeout_s", "fabric"),
    "Search": ("trials", "time_budget_s", "candidates_per_launch", "warmup", "iterations", "sampler", "seed"),
    "Confirm and publish": ("confirm_rounds", "ladder_rounds", "quality_samples", "publish", "scaling_nodes"),
}  # fmt: skip
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}


def _folder(text: str) -> Path:
    """A folder given: "" was Path("."), the launch directories written wherever the command ran."""
    if not text.strip():
        raise typer.BadParameter("empty: give a folder, e.g. /srv/autotuner/runs")
    return Path(text)


TUNE_OPTIONS = [
    inspect.Parameter("cluster", KW, annotation=Annotated[str | None, typer.Option(help="cluster name: configs are keyed by it")], default=None),
    inspect.Parameter("workload", KW, annotation=Annotated[Path | None, typer.Option(help="JSON file with the trial spec's `workload` object")], default=None),
    inspect.Parameter("space", KW, annotation=Annotated[str | None, typer.Option(help="search space file (YAML/JSON) or preset: socket, efa")], default=None),
    inspect.Parameter("study", KW, annotation=Annotated[str | None, typer.Option(help="study name; an existing unfinished one is resumed")], default=None),
    inspect.Parameter("landscape", KW, annotation=Annotated[Path | None, typer.Option(rich_help_panel=PANEL_OF["landscape"], help="replay: recorded landscape file")], default=None),
    inspect.Parameter("executor_option", KW, annotation=Annotated[list[str] | None, typer.Option(rich_help_panel=PANEL_OF["executor_option"], help="KEY=VALUE for the executor, e.g. partition=gpu (a name as typed; lists, objects, numbers and true/false as JSON)")], default=None),
    inspect.Parameter("workdir", KW, annotation=Annotated[Path | None, typer.Option(rich_help_panel=PANEL_OF["workdir"], parser=_folder, metavar="PATH", help="launch directories (shared with the nodes)")], default=None),
    inspect.Parameter("db", KW, annotation=DbOption, default=None),
    inspect.Parameter("ctx", KW, annotation=typer.Context),  # which options were given (a resume)
]  # fmt: skip


def _settings_options() -> list[inspect.Parameter]:
    """One option per field of RequestSettings: the defaults, bounds and help of the REST body."""
    params = []
    for name, field in RequestSettings.model_fields.items():
        flag = flag_of(name)
        default = field.get_default(call_default_factory=True)
        if isinstance(default, bool):
            option = typer.Option(
                f"{flag}/--no-{flag[2:]}", help=field.description, rich_help_panel=PANEL_OF.get(name)
            )
            kind: Any = bool
        else:
            unset = _unsettable(name)
            # --trials none: no cap on search launches (the time budget ends the search), as `"trials":
            # null` does over REST
            text = (
                f"{field.description}; none: {UNSET_MEANS.get(name, 'unset')}" if unset else field.description
            )
            option = typer.Option(flag, help=text, rich_help_panel=PANEL_OF.get(name),
                                  metavar="INTEGER|none" if unset else None)  # fmt: skip
            kind = str if unset else _cli_type(field.annotation)
        if isinstance(default, list):
            default = ",".join(map(str, default))
        params.append(inspect.Parameter(name, KW, annotation=Annotated[kind, option], default=default))
    return params


UNSET_MEANS = {"trials": "no cap, until --time-budget"}


def _number(text: str) -> int | str:
    """An integer as typed, else the text (which the schema then refuses, naming the option)."""
    try:
        return int(text)
    except ValueError:
        return text


def _unsettable(name: str) -> bool:
    """A field that takes null over REST although its default is a value: `none` on the command line."""
    field = RequestSettings.model_fields[name]
    return type(None) in typing.get_args(field.annotation) and field.get_default() is not None


def _cli_type(annotation: Any) -> Any:
    """What typer parses a field as: numbers as numbers, choices and lists as text (pydantic checks them)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) else annotation
    return base if base in (int, float) else str


def settings_from_options(options: dict[str, Any]) -> RequestSettings:
    """The command line's values as the REST body's settings; bad ones name their option."""
    values = dict(options)
    for name, value in options.items():
        if isinstance(value, str) and name in RequestSettings.model_fields and _unsettable(name):
            values[name] = None if value.strip().lower() == "none" else _number(value)
    nodes = values.get("scaling_nodes")
    if isinstance(nodes, str):
        try:
            values["scaling_nodes"] = [int(n) for n in nodes.split(",") if n.strip()]
        except ValueError as exc:
            raise _fail(f"--scaling-nodes {nodes!r}: comma-separated integers, e.g. 1,2,4") from exc
    try:
        return RequestSettings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        if first["loc"]:
            raise _fail(f"{flag_of(str(first['loc'][0]))}: {msg}") from exc
        # a rule across fields names them as the REST body does: here, as their options
        said = re.sub(r"\b([a-z_]+)\b( false\b)?", _as_options, msg)
        raise _fail(f"settings: {said}") from exc


def _as_options(match: re.Match[str]) -> str:
    """A settings field named in a message, as its option ("publish false": `--no-publish`)."""
    field, false = match[1], match[2]
    if field not in RequestSettings.model_fields:
        return match[0]
    return "--no-" + flag_of(field).removeprefix("--") if false else flag_of(field)


def flag_of(field: str) -> str:
    """The command-line option of a settings field."""
    info = RequestSettings.model_fields[field]
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return "--" + str(extra.get("cli") or field.replace("_", "-"))


def _executor_options(items: list[str] | None, landscape: Path | None) -> dict[str, Any]:
    from autotuner.executors.registry import EXECUTORS

    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise _fail(f"--executor-option {item!r}: use KEY=VALUE")
        if key in options or (key == "landscape" and landscape is not None):  # which one was meant?
            raise _fail(f"--executor-option {key} given twice{' (and as --landscape)' if key == 'landscape' else ''}: "
                        "give it once")  # fmt: skip
        # The text as typed where the option takes it (account=12345 is the account "12345", not a number
        # refused; account=null the account "null", not unset), as in a settings file; else JSON: lists,
        # objects, numbers, true/false.
        takes = {entry.options.takes_text(key, raw) for entry in EXECUTORS.values()} - {None}
        if takes == {True}:
            options[key] = raw
            continue
        try:
            options[key] = json.loads(raw)
        except RecursionError:
            raise _fail(f"--executor-option {key}: its JSON is nested too deep") from None
        except ValueError:
            options[key] = raw  # a plain string
    if landscape is not None:  # absolute: the study keeps it for whoever resumes it, from wherever
        options["landscape"] = str(landscape.absolute())
    return options


def _new_study_request(options: dict[str, Any]) -> RequestSettings:
    """A new study's settings, or exit 2 saying what is missing or wrong."""
    if options["cluster"] is None or options["workload"] is None or options["space"] is None:
        if options["study"] is not None:  # a typo'd name to resume reads as a new study's
            raise _fail(f"no study {options['study']!r} in this store: `autotuner studies` lists them; to "
                        "create it, give --cluster, --workload and --space too")  # fmt: skip
        raise _fail("--cluster, --workload and --space are required for a new study")
    return settings_from_options({k: options[k] for k in RequestSettings.model_fields})


def tune(**options: Any) -> None:
    """Run (or resume) a tuning study, then publish the confirmed best config."""
    from autotuner.cli.claim_report import inert_lines
    from autotuner.executors import make_executor
    from autotuner.tuning import StoreUnavailable, StudyBusy, WorkdirFull
    from autotuner.tuning.driver import UNRUNNABLE, cannot_run, driver_for

    ctx = options.pop("ctx")
    # a new study's settings are checked before a store is made for it
    request = _new_study_request(options) if options["study"] is None else None
    store = _store(options["db"], create=True)
    row = store.study(options["study"]) if options["study"] else None
    created = False
    if row is None:
        row = _new_study(store, options, request or _new_study_request(options))
        created = row is not None
        if row is None:  # another tuner started with this --study made it a moment ago: this one resumes it
            row = store.study(options["study"])
    assert row is not None  # made here, or by the tuner that took the name
    if created:
        err.print(
            Text.assemble("study ", shown(row.name, "bold"), f" (id {row.id}) created"), highlight=False
        )
        for line in inert_lines(row.inert, row.space.get("force_inert", [])):
            err.print(shown(line), highlight=False)
    else:
        _check_resume(row, options, [name for name in options if _given(ctx, name)])
        ended = row.state in (StudyState.DONE, StudyState.FAILED, StudyState.CANCELLED)
        err.print(Text.assemble("study " if ended else "resuming study ", shown(row.name, "bold"),
                                f" (id {row.id}) already {row.state}: see `autotuner studies`" if ended
                                else f" (id {row.id}, {row.state})"), highlight=False)  # fmt: skip
    budget = row.settings.get("trials") if isinstance(row.settings, dict) else None
    with _progress_bar((budget if isinstance(budget, int) else 0) + 1) as progress, _terminate_as_interrupt():
        try:
            driver = driver_for(store, row, make_executor, progress=progress)
        except UNRUNNABLE as exc:
            raise _fail(cannot_run(store, row.id, exc), 1) from exc
        try:
            final = driver.run()
        except StudyBusy as exc:
            raise _fail(str(exc), 3) from exc
        except StoreUnavailable as exc:
            raise _fail(f"{exc}: resume it with autotuner tune --study {row.name}", 1) from exc
        except WorkdirFull as exc:
            raise _fail(f"{exc}: the study stays running, no trial spent; free space there, then resume it "
                        f"with autotuner tune --study {row.name}", 1) from exc  # fmt: skip
        except KeyboardInterrupt as exc:
            # what else may run it: a service's scheduler on this store takes up a study nobody runs
            raise _fail(f"interrupted: the running launch was cancelled; the study stays {StudyState.RUNNING}: "
                        f"resume it with `autotuner tune --study {row.name}`, or end it with `autotuner cancel "
                        f"{row.name}` (until then a service's scheduler on this store that runs its executor "
                        "may take it up)", 130) from exc  # fmt: skip
    _print_outcome(store, final)
    if _say_left_running(store, row.id):  # where no service runs the store, nothing else sends them again
        err.print(shown(f"`autotuner cancel {row.name}` sends their cancels again (a service's scheduler on this "
                        "store does every minute)"), highlight=False)  # fmt: skip
    if final.state != StudyState.DONE:
        raise typer.Exit(1)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (kill, systemd, a batch system's stop) as Ctrl-C: the running launch cancelled and the
    study's lease let go at once; killed by it, the tuner held the lease until it lapsed, and a runner
    on another host waited that long to resume the study."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_ORDER = {name: i for i, name in enumerate(n for names in PANELS.values() for n in names)}
tune.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    sorted([*TUNE_OPTIONS, *_settings_options()], key=lambda p: _ORDER.get(p.name, -1))
)
app.command()(tune)


def _check_resume(row: Any, options: dict[str, Any], given: list[str]) -> None:
    """A study resumes with what it was created with: an option `given` on the command line that says
    otherwise is refused, naming it (before: every one was dropped in silence, the study resumed as
    stored)."""
    differ = [
        name for name in given if name not in ("study", "db") and not _same_as_stored(row, name, options)
    ]
    if differ:
        flags = ", ".join("--" + name.replace("_", "-") if name not in RequestSettings.model_fields
                          else flag_of(name) for name in differ)  # fmt: skip
        raise _fail(f"study {row.name} exists, and a study resumes as it was created: {flags} "
                    f"differ{'s' if len(differ) == 1 else ''} from it; drop them, or give a new --study name")  # fmt: skip


def _same_as_stored(row: Any, name: str, options: dict[str, Any]) -> bool:
    """Whether option `name` as given says what the stored study `row` holds."""
    from autotuner.space import load_space

    settings = row.settings if isinstance(row.settings, dict) else {}
    executor_options = settings.get("executor_options") or {}
    value = options[name]
    if name == "cluster":
        return bool(value == row.cluster.name)
    if name == "workload":
        try:
            given = json.loads(read_bounded(value, MAX_JSON_FILE_BYTES, follow_links=True))
        except (OSError, ValueError, RecursionError):  # a workload that does not load is not the stored one
            return False
        return bool(given == (row.workload_spec or row.workload.spec))
    if name == "space":
        try:
            space = load_space(value).model_dump(mode="json")
        except Exception:  # a space that does not load is not the stored one
            return False
        # a space that names no batch was given the workload's: the rest says whether it is the same
        stored = row.space if isinstance(row.space, dict) else {}
        return bool(space == stored or {**space, "batch_sizes": None} == {**stored, "batch_sizes": None})
    if name == "landscape":
        return str(value.absolute()) == executor_options.get("landscape")
    if name == "workdir":
        return str(value.absolute()) == settings.get("workdir")
    if name == "executor_option":
        given = _executor_options(value, None)
        return all(executor_options.get(key) == item for key, item in given.items())
    request = settings_from_options({k: options[k] for k in RequestSettings.model_fields})
    return bool(request.model_dump(mode="json")[name] == settings.get(name))


def _new_study(store: Any, options: dict[str, Any], request: RequestSettings) -> Any:
    """The study, created; None when its --study name was taken meanwhile (a tuner started at the same
    instant made it: this one resumes it, as it resumes any study of that name)."""
    from autotuner.tuning.study import StudyExists

    executor_options = _executor_options(options["executor_option"], options["landscape"])
    # the engine's own words name executor_options.landscape, which this command line spells otherwise
    if request.executor == "replay" and "landscape" not in executor_options:
        raise _fail("the replay executor needs a recorded landscape: give --landscape FILE "
                    "(or --executor-option landscape=FILE)")  # fmt: skip
    # kept absolute, as the landscape; by default a folder of this store's own (two stores never share one)
    workdir = str(options["workdir"].absolute() if options["workdir"] else default_workdir(store.url))
    try:
        settings = study_settings(request, workdir=workdir, executor_options=executor_options)
        return create_study(store, cluster=options["cluster"], workload=_load_json(options["workload"], "workload"),
                            space=options["space"], settings=settings, name=options["study"],
                            own_workdir=options["workdir"] is not None)  # fmt: skip
    except StudyExists as exc:
        if options["study"] is None:
            raise _fail(str(exc)) from exc
        return None
    except ValueError as exc:
        raise _fail(str(exc)) from exc


def _launch_status(launch: Any, rows: list[Any], best_yet: list[float]) -> str:
    """How a launch went, in a line; `best_yet` holds the study's best measured so far (each launch's
    own best jumped up and down)."""
    ok = [r for r in rows if r.state == CandidateState.OK]
    # a quality launch trains and scores models: its rows have no throughput
    best = max((r.samples_per_s for r in ok if r.samples_per_s), default=None)
    best_yet[0] = max(best_yet[0], best or 0.0)
    status = f"launch {launch.seq} {launch.kind}: {len(ok)}/{len(rows)} ok" + (
        f", {best:,.0f} samples/s (best so far {best_yet[0]:,.0f})" if best else ""
    )
    wall = (launch.summary or {}).get("wall_s")
    if launch.kind == LaunchKind.QUALITY and wall:  # the convergence check's cost, said as it ends
        status += f", {len(rows)} models trained in {wall:.0f} s"
    return status


def _waiting_status(launch: Any, why: str) -> str:
    said = f"queued: {displayed(why)}" if why else "running"  # the scheduler's words: shown, not obeyed
    return f"launch {launch.seq} {launch.kind} {said}"


@contextmanager
def _progress_bar(total: int) -> Iterator[Any]:
    """A bar over the baseline and search launches; its status line says how each launch went. Off a
    terminal, the same words as plain lines (_progress_lines)."""
    from autotuner.tuning import Progress as DriverProgress

    if not err.is_terminal:  # rich's bar draws nothing off a terminal (CI, `| tee`): silent for minutes
        yield _progress_lines()
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}", markup=False), console=err, transient=False,
    ) as bar:  # fmt: skip
        task = bar.add_task("baseline", total=total, status="")
        best_yet = [0.0]

        def ended(launch: Any, rows: list[Any]) -> None:
            status = _launch_status(launch, rows, best_yet)
            # a launch tried again counts once, as the study's budget counts it (a bar at 3/2 otherwise)
            if launch.kind in (LaunchKind.BASELINE, LaunchKind.SEARCH) and launch.attempt == 1:
                bar.advance(task)
            bar.update(task, status=status)

        def phase(name: str) -> None:
            if name not in ("baseline", "search"):  # the search is over: the bar ends where it did
                done = bar.tasks[0].completed
                bar.update(task, total=done, completed=done)  # it stayed at 2/4 through confirm and ladder
            bar.update(task, description=name)

        def note(line: str) -> None:
            bar.console.print(shown(line), highlight=False)  # above the bar, which redraws below it

        def waiting(launch: Any, why: str) -> None:
            bar.update(task, status=_waiting_status(launch, why))

        yield DriverProgress(on_launch_end=ended, on_launch_waiting=waiting, on_phase=phase, on_note=note)


def _progress_lines() -> Any:
    """The bar's words as plain lines: one a phase, a finished launch, a change of a launch's wait."""
    from autotuner.tuning import Progress as DriverProgress

    best_yet = [0.0]

    def say(line: str) -> None:
        err.print(shown(line), highlight=False, soft_wrap=True)  # a log's line, not wrapped at 80 columns

    return DriverProgress(
        on_launch_end=lambda launch, rows: say(_launch_status(launch, rows, best_yet)),
        on_launch_waiting=lambda launch, why: say(_waiting_status(launch, why)),
        on_phase=lambda name: say(f"phase: {name}"),
        on_note=say,
    )


def _print_outcome(store: Any, study: Any) -> None:
    from autotuner.cli.claim_report import claim_text, confirmed_line, print_claim, scaling_table

    if study.state == StudyState.FAILED:
        err.print(labelled(f"study {study.name} failed:", study.error), highlight=False)
        return
    if study.state == StudyState.CANCELLED and not study.outcome:  # an empty table said nothing
        err.print(
            f"study {study.name} was cancelled before it concluded: nothing was published", highlight=False
        )
        return
    try:
        outcome = Outcome.load(study.outcome) or Outcome()
    except (ValueError, TypeError) as exc:  # a row an older version (or a hand) wrote: said, not a traceback
        err.print(labelled(f"study {study.name}: its stored outcome cannot be read:", " ".join(str(exc).split())[:300]),
                  highlight=False)  # fmt: skip
        raise typer.Exit(1) from exc
    rows = _outcome_columns(store, study, outcome)
    table = Table(title=f"study {study.name}: what was published vs the baseline", title_justify="left")
    table.add_column("")
    for label in rows:
        table.add_column(label, overflow="fold")

    def line(name: str, show: Any) -> None:
        table.add_row(name, *(show(c) for c in rows.values()))

    # stored text, shown as it is: a "[/]" in an env value crashed the print (MarkupError)
    line("env", lambda c: shown(_env_text(c.env) or "(no overrides)"))
    line("precision fwd/bwd", lambda c: shown(f"{c.fwd_precision}/{c.bwd_precision}"))
    line("batch per rank", lambda c: shown(c.batch_size))
    line("sharding", lambda c: shown(c.sharding))
    line("pipeline", lambda c: shown(c.pipeline or "-"))
    line("samples/s", lambda c: f"{c.samples_per_s:,.0f}" if c.samples_per_s else "-")
    line("all-to-all ms/iter", lambda c: f"{c.a2a_ms:.2f}" if c.a2a_ms is not None else "-")
    line(
        "quantization error", lambda c: f"{max(v or 0.0 for v in (c.quant_error_fwd, c.quant_error_bwd)):.2e}"
    )
    err.print(table)
    ladder = outcome.ladder or []
    print_claim(
        err, ladder, claim_text(ladder, outcome.quality, study.inert, study.space.get("force_inert", []))
    )
    if outcome.scaling:
        err.print(scaling_table(outcome.scaling))
    if confirmed := confirmed_line(outcome):
        err.print(confirmed)
    err.print(shown(outcome.decision or ""), highlight=False)  # it may embed a stored error
    if outcome.published_version is not None:
        err.print(shown(f"published {study.cluster.name}/{study.workload.name} version {outcome.published_version}"),
                  highlight=False)  # fmt: skip


def _outcome_columns(store: Any, study: Any, outcome: Outcome) -> dict[str, Any]:
    """The baseline, the setting published (`chosen_candidate`: the ladder or the convergence check may
    have dropped knobs of the fastest row), and the fastest row measured when it is neither, labelled
    so: a "best" column beside "published" read as shipped what the ladder dropped."""

    def setting(c: Any) -> tuple[Any, ...]:
        return (c.env, c.fwd_precision, c.bwd_precision, c.batch_size, c.sharding, c.pipeline)

    baseline = store.candidate(study.baseline_candidate_id) if study.baseline_candidate_id else None
    chosen = store.candidate(outcome.chosen_candidate) if outcome.chosen_candidate is not None else None
    best = store.candidate(study.best_candidate_id) if study.best_candidate_id else None
    published = outcome.published_version is not None
    columns: dict[str, Any] = {}
    if baseline is not None:
        same = published and chosen is not None and setting(chosen) == setting(baseline)
        columns["baseline (published)" if same else "baseline"] = baseline
    if chosen is not None and (baseline is None or setting(chosen) != setting(baseline)):
        columns["published" if published else "chosen (not published)"] = chosen
    if best is not None and all(setting(best) != setting(c) for c in columns.values()):
        columns["fastest measured (not published)"] = best
    return columns


def _env_text(env: Any) -> str:
    """A stored env as KEY=VALUE lines (a row written by hand may hold anything: shown, not read)."""
    if not isinstance(env, dict):
        return str(env)
    return "\n".join(f"{k}={v}" for k, v in sorted(env.items(), key=lambda kv: str(kv[0])))


# ---------------------------------------------------------------------------------------- studies


@app.command()
def cancel(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="its name, or its id")],
    db: DbOption = None,
) -> None:
    """Cancel a queued or running study: it publishes nothing. Its running launch is stopped by its
    runner at the next heartbeat, here where nothing runs it. A study that ended first: exit 1, unless
    it left launches whose cancel was not confirmed, whose cancels are sent again (exit 0 once each is
    seen ended). Exit 1 while any of its launches may still run."""
    store = _store(db)
    an_id = study.isascii() and study.isdigit() and int(study) < 2**31  # "²" is a digit; SQLite's ints end
    row = store.study(study) or (store.study(int(study)) if an_id else None)
    if row is None:
        raise _fail(f"no study {study!r} in this store: `autotuner studies` lists them")
    if store.move_study(row.id, StudyState.CANCELLED) is None:  # only one that has not ended: atomic
        ended = f"study {row.name} (id {row.id}) is already {store.study(row.id).state}"
        if not _left_running(store, row.id):
            raise _fail(ended, 1)
        err.print(shown(f"{ended}: cancelling again the launches it may have left running"), highlight=False)
    else:
        err.print(
            Text.assemble("study ", shown(row.name, "bold"), f" (id {row.id}) cancelled"), highlight=False
        )
        if row.id in {s.id for s in store.cancelled_with_live_launches()}:  # no runner follows them
            _stop_leftovers(store, row)
            return
    # Launches whose cancel was not confirmed before (an ended study's, or one given up at its queue
    # timeout before its runner was interrupted): where no service runs the store, nothing else sends
    # their cancels again. A runner that lives stops only its own running launch.
    _cancel_again(store, row.id)


def _stop_leftovers(store: Any, row: Any) -> None:
    """Stop the launches a cancelled study left pending or running with no runner following them."""
    from autotuner.executors import make_executor
    from autotuner.tuning import StudyBusy
    from autotuner.tuning.driver import driver_for

    try:
        stopped = driver_for(store, row, make_executor).stop_leftovers()
    except StudyBusy:  # a runner took it up meanwhile: it stops its launch itself
        return
    except Exception as exc:  # the study stays cancelled; a service's scheduler tries again
        raise _fail(
            f"its launches left running could not be stopped: {type(exc).__name__}: {exc}", 1
        ) from exc
    err.print(f"stopped {stopped} launch(es) it left running", highlight=False)
    _fail_if_left_running(store, row.id)


def _left_running(store: Any, study_id: int) -> list[Any]:
    """The study's launches whose cancel was not confirmed: their jobs may still run."""
    return [x for x in store.launches(study_id) if x.left_running and x.backend_id]


def _cancel_again(store: Any, study_id: int) -> None:
    """Send the cancels of the study's launches that may still run again (what a service's scheduler does
    every minute): exit 0 once each is seen ended (or none is left), else 1 with what may still run."""
    from autotuner.executors import make_executor
    from autotuner.tuning.left_running import LeftRunning

    again = LeftRunning(store, make_executor, by="`autotuner cancel`")
    for launch in _left_running(store, study_id):
        outcome, what = again.cancel_again(launch)
        if outcome != "left":  # what may still run is said below, from its row
            err.print(labelled(f"launch {launch.seq}:", shown(what)), highlight=False)
    _fail_if_left_running(store, study_id)


def _say_left_running(store: Any, study_id: int) -> int:
    """Each launch of the study that may still run, with what its backend says (how to stop it by hand);
    how many."""
    left = _left_running(store, study_id)
    for launch in left:
        err.print(labelled(f"launch {launch.seq}:", shown(launch.left_running)), highlight=False)
    return len(left)


def _fail_if_left_running(store: Any, study_id: int) -> None:
    if left := _say_left_running(store, study_id):
        raise _fail(f"{left} launch(es) may still run: `autotuner cancel` sends their cancels again, as a "
                    "service's scheduler on this store does every minute", 1)  # fmt: skip


@app.command()
def studies(
    state: Annotated[
        StudyState | None,
        typer.Option(metavar="STATE", help=f"only studies in this state: {', '.join(StudyState)}"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many, newest first")] = 100,
    offset: Annotated[int, typer.Option(min=0, max=1_000_000, help="skip this many newest first")] = 0,
    db: DbOption = None,
) -> None:
    """List studies with their state and progress, newest first.

    "searched": search launches done, of the study's --trials (the baseline, confirmation and ladder
    launches are not counted); "best samples/s": the fastest setting measured, published or not; the
    speedup: the published one's."""
    store = _store(db)
    states = [state] if state else None
    rows, total = store.studies(states=states, limit=limit, offset=offset), store.count_studies(states=states)
    if not rows:
        err.print(
            "no study yet (`autotuner tune` starts one)"
            if not total
            else f"no study past the {total:,} listed"
        )
        return
    table = _narrow_table("studies")
    # names break only between words (Name); the speedup wraps its CI below it only when it must
    for col in ("id", "name", "cluster", "workload", "state", "searched", "best samples/s", "speedup"):
        numeric = col in ("id", "searched", "best samples/s", "speedup")
        table.add_column(col, justify="right" if numeric else "left", overflow="fold",
                         no_wrap=col in ("id", "state", "searched", "best samples/s"))  # fmt: skip
    lost = store.runnerless([s.id for s in rows])
    outcomes = {s.id: _outcome_of(s) for s in rows}  # each read once, for its cells and its line below
    for s in rows:
        table.add_row(*_study_cells(store, s, outcomes[s.id], s.id in lost))
    out.print(table)
    for s in rows:  # why, in the dashboard's words: a failed study's error, the finalist a kept baseline beat
        if (why := _why_line(s, outcomes[s.id])) is not None:
            err.print(why, highlight=False)
    if lost:  # "running" alone read as if something ran them
        err.print("no runner: the study's runner stopped (interrupted, killed, or its host gone) and nothing "
                  "runs it now; `autotuner tune --study NAME` resumes it, or a service's scheduler takes it up")  # fmt: skip
    if offset + len(rows) < total:  # said, not cut in silence (the newest 100 were all it showed)
        err.print(
            f"{offset + 1:,}-{offset + len(rows):,} of {total:,}: more with --offset {offset + len(rows)}"
        )


def _study_cells(store: Any, s: Any, outcome: Outcome | None, runner_lost: bool = False) -> list[Any]:
    """One study's row (`outcome`: its stored one, read: _outcome_of); a stored value that cannot be read
    is shown as "?" (one bad row never stops the listing)."""
    best = store.candidate(s.best_candidate_id) if s.best_candidate_id else None
    trials = s.settings.get("trials") if isinstance(s.settings, dict) else None
    speedup = (
        _speedup_cell(outcome.model_dump()) if outcome and outcome.speedup else "?" if s.outcome else "-"
    )
    if outcome and kept_served(str(s.state), s.settings, outcome):  # its 1.00x is no published config's
        speedup = "- nothing published"
    elif outcome and outcome.speedup and outcome.ci_low is None and kept_baseline(outcome):
        speedup += f" {BASELINE_KEPT}"
    state = f"{shown(s.state)}, no runner" if runner_lost else shown(s.state)
    return [str(s.id), Name(s.name), Name(name_of(s.cluster) or "?"), Name(name_of(s.workload) or "?"), state,
            f"{s.launches_done}/{trials if isinstance(trials, int) else '-'}",
            _figure(best.samples_per_s if best else None, ",.0f"), Name(speedup)]  # fmt: skip


def _why_line(s: Any, outcome: Outcome | None) -> Text | None:
    """Why a listed study ended as it did, in the dashboard's words: a failed study's error; one that
    published nothing (the config served before stays) or kept the baseline, and the finalist it had."""
    if s.state == StudyState.FAILED and s.error:
        return labelled(f"{s.name} failed:", short(displayed(str(s.error))))
    if outcome is None:
        return None
    finalist = finalist_text(outcome)
    if kept_served(str(s.state), s.settings, outcome):
        return shown(f"{s.name}: nothing published" + (f" · finalist {finalist}" if finalist else ""))
    if finalist and kept_baseline(outcome) and outcome.ci_low is None:
        return shown(f"{s.name}: {BASELINE_KEPT} · finalist {finalist} not published")
    return None


def _outcome_of(s: Any) -> Outcome | None:
    """A study's outcome; None when it cannot be read (or it has none)."""
    try:
        return Outcome.load(s.outcome)
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------------------- configs

ClusterArg = Annotated[str, typer.Argument(help="cluster name, as given to `autotuner tune --cluster`")]
WorkloadArg = Annotated[str, typer.Argument(help="workload name: the `name` of the tuned workload")]
# Bounds as the REST routes' (api/fastpath.py MAX_NODES, the history page's): a number past them is
# typer's range error, exit 2, not an OverflowError from the database driver.
MAX_NODES = 1_000_000
MAX_PAGE, MAX_OFFSET = 1000, 1_000_000
NodesOption = Annotated[int | None, typer.Option(min=1, max=MAX_NODES, help="node count of the config (default: the served one)")]  # fmt: skip
NodesFilter = Annotated[int | None, typer.Option(min=1, max=MAX_NODES, help="only this node count (default: all)")]  # fmt: skip
ChangeNodesOption = Annotated[int, typer.Option(min=1, max=MAX_NODES, help="node count of the config")]


def _version(text: str) -> int:
    """A version as the tables print it (v3) or as a number (3); int() alone took "1_0" for 10."""
    digits = text.removeprefix("v")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        raise typer.BadParameter(f"{text!r} is not a version: v3 or 3")
    return int(digits)


VersionArg = Annotated[
    int,
    typer.Argument(
        parser=_version, metavar="VERSION", help="version, as `configs history` lists it: v3 or 3"
    ),
]


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option `name` was on the command line (not from its env var or default)."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def _db_of(ctx: typer.Context, db: str | None) -> str | None:
    """A subcommand's own --db, else the one given to `configs` before it (`configs --db URL history`)."""
    if _given(ctx, "db"):
        return db
    return (ctx.obj or {}).get("db") or db


@configs_app.callback(invoke_without_command=True)
def configs(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
    workload: Annotated[str | None, typer.Option(help="only this workload")] = None,
    db: DbOption = None,
) -> None:
    """List the configs being served (pinned version, else latest)."""
    if ctx.invoked_subcommand is not None:
        if cluster is not None or workload is not None:
            raise _fail(f"--cluster and --workload filter `autotuner configs`; `configs {ctx.invoked_subcommand}` "
                        "takes CLUSTER WORKLOAD after it")  # fmt: skip
        if _given(ctx, "db"):
            ctx.obj = {"db": db}
        return
    store = _store(db)
    rows = [c for c in store.served_configs()
            if (cluster is None or c.cluster.name == cluster) and (workload is None or c.workload.name == workload)]  # fmt: skip
    if not rows:
        err.print(shown("no config published" + "".join(f" for {k} {v}" for k, v in
                  (("cluster", cluster), ("workload", workload)) if v is not None)), highlight=False)  # fmt: skip
        return
    _config_table(store, rows, "served configs")


def _figure(value: Any, spec: str) -> str:
    """A stored figure as `spec` formats it: "-" where none is stored, "?" where what is stored is no
    finite number (a row an older version or a hand wrote: the rest of the table is still printed)."""
    if value is None:
        return "-"
    return format(value, spec) if finite(value) else "?"


def _speedup_cell(figures: Any) -> str:
    """A speedup over the baseline, then its 95% CI: below it where the column wraps (a narrow terminal),
    beside it where there is room (it went below it at any width). Stored figures that are not a JSON
    object of numbers (evidence or a result written by hand) are "?"."""
    if not isinstance(figures, dict):
        return "?"
    speedup, ci = figures.get("speedup"), (figures.get("ci_low"), figures.get("ci_high"))
    if speedup is None or speedup == 0:  # none measured (0: as an empty speedup always read)
        return "-"
    if not finite(speedup):
        return "?"
    speed = f"{speedup:.2f}x"
    if all(finite(v) and v for v in ci):
        speed += f" [{ci[0]:.2f}-{ci[1]:.2f}]"
    elif any(v is not None and not finite(v) for v in ci):
        speed += " [?]"
    return speed


def _version_cell(version: Any) -> str:
    """v3; "v?" for a version stored as no whole number (a hand's: the row is still listed)."""
    return f"v{version}" if isinstance(version, int) and not isinstance(version, bool) else "v?"


def _when(moment: Any) -> str:
    """A date, its time beside it, or below it where the column wraps."""
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


def _narrow_table(title: str) -> Table:
    """A table that fits 80 columns: no borders, one space between columns."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 0))  # fmt: skip


def _config_table(store: Any, rows: list[Any], title: str, served: set[int] | None = None) -> None:
    """Numbers, versions and dates are never broken; names and the env fold when they must. A version
    whose last re-validation failed (kept: pinned, or no longer served) is marked "flagged", and why is
    said on stderr, as REST's `flagged` says it. A version served now (`served`: its ids; None: every
    row) that REST's validations call stale is marked "stale", and why on stderr (`_stale`)."""
    table = _narrow_table(title)
    for col in ("cluster", "workload"):
        table.add_column(col, overflow="fold", min_width=len(col))
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("env", overflow="fold")
    table.add_column("fwd/bwd", no_wrap=True)  # the comm precisions
    table.add_column("batch", justify="right", no_wrap=True)
    table.add_column("speedup", justify="right")  # its CI beside it, or below it where it must wrap
    table.add_column("published")  # the time beside the date, or below it
    views = store.validation_views(rows)
    stale = _stale(store, [c for c in rows if served is None or c.id in served], views)
    for c in rows:
        flagged = (views.get(c.id) or {}).get("flagged")
        table.add_row(Name(c.cluster.name), Name(c.workload.name), str(c.nodes),
                      Text.assemble(_version_cell(c.version), "\npinned" if c.pinned else "",
                                    ("\nflagged", "bold yellow") if flagged else "",
                                    ("\nstale", "bold yellow") if stale.get(c.id) else ""),
                      shown(_env_text(c.env) or "-"), shown(f"{c.fwd_precision}/{c.bwd_precision}"),
                      shown(c.batch_size), Name(_speedup_cell(c.evidence or {})), _when(c.created_at))  # fmt: skip
    out.print(table)
    for c in rows:
        where = f"{c.cluster.name}/{c.workload.name} ({c.nodes}n) v{c.version}"
        if flagged := (views.get(c.id) or {}).get("flagged"):
            err.print(labelled(f"{where} flagged:", flagged, "yellow"), highlight=False, soft_wrap=True)
        _say_stale(f"{where} stale:", stale.get(c.id))


def _stale(store: Any, rows: list[Any], views: dict[int, dict[str, Any]]) -> dict[int, dict[str, str]]:
    """{id: REST's `stale_reasons`} of served `rows`: what the validations endpoint, the dashboard's
    stale notes and /metrics say (one function, `staleness`): jobs report another stack than the version
    was validated on (`fingerprint`), its last re-validation failed and it is kept (`failed`), it is
    older than AUTOTUNER_REVALIDATE_EVERY as this command's environment says it (`overdue`). A row whose
    staleness cannot be read is left unmarked (said on stderr): the listing is still printed."""
    from autotuner.job.exports import config_to_dict
    from autotuner.tuning.revalidate import staleness

    if not rows:
        return {}
    every = _revalidate_every()
    reports = store.fingerprint_reports(c.id for c in rows)
    found = {}
    for c in rows:
        try:
            found[c.id] = staleness(config_to_dict(c, views.get(c.id)), reports[c.id], every)["reasons"]
        except Exception as exc:  # a row written by hand: its date or a report's stack cannot be read
            err.print(labelled(f"config {c.id} (v{c.version}): whether it is stale cannot be read:",
                               f"{type(exc).__name__}: {exc}"[:300], "yellow"), highlight=False, soft_wrap=True)  # fmt: skip
    return found


def _revalidate_every() -> float | None:
    """AUTOTUNER_REVALIDATE_EVERY as the service reads it (None: no schedule, or not a duration)."""
    import os

    from autotuner.tuning.revalidate import parse_every

    try:
        return parse_every(os.environ.get("AUTOTUNER_REVALIDATE_EVERY"))
    except ValueError as exc:
        err.print(labelled("note: AUTOTUNER_REVALIDATE_EVERY:", f"{exc}; whether a config is overdue is not said",
                           "yellow"), highlight=False, soft_wrap=True)  # fmt: skip
        return None


def _say_stale(label: str, reasons: dict[str, str] | None, skip: tuple[str, ...] = ("failed",)) -> None:
    """Why a version is stale, on stderr, a line a reason as the dashboard's notes, but for `skip`: a
    failed re-validation is said by its "flagged" line where one is printed."""
    for reason, why in (reasons or {}).items():
        if reason not in skip:
            err.print(labelled(label, why, "yellow"), highlight=False, soft_wrap=True)


def _say_served_stale(store: Any, row: Any, skip: tuple[str, ...] = ("failed",)) -> None:
    """Why the served `row` is stale, if it is ("stale: v3 ...")."""
    _say_stale(
        f"stale: v{row.version}", _stale(store, [row], store.validation_views([row])).get(row.id), skip
    )


def _versions(store: Any, cluster: str, workload: str, nodes: int | None) -> dict[int, int | None]:
    """{id: version} of a (cluster, workload); none is an error naming what is published."""
    versions = store.config_versions(cluster, workload, nodes)
    if not versions:
        raise _fail(_not_published(store, cluster, workload, nodes))
    return versions


def _not_published(store: Any, cluster: str, workload: str, nodes: int | None) -> str:
    published = [(c.cluster.name, c.workload.name) for c in store.served_configs()]
    at = f" at {nodes} node{'s' if nodes != 1 else ''}" if nodes is not None else ""
    hint = published_hint(cluster, workload, published)
    return f"no config published for {cluster}/{workload}{at} ({hint}; `autotuner configs` lists them)"


@configs_app.command("history")
def configs_history(
    ctx: typer.Context, cluster: ClusterArg, workload: WorkloadArg, nodes: NodesFilter = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE, help="versions per page")] = 100,  # as REST history
    offset: Annotated[int, typer.Option(min=0, max=MAX_OFFSET, help="skip this many (newest first)")] = 0,
    db: DbOption = None,
) -> None:  # fmt: skip
    """Published versions of a (cluster, workload), newest first, a page at a time."""
    store = _store(_db_of(ctx, db))
    _versions(store, cluster, workload, nodes)
    rows = store.config_history(cluster, workload, nodes, limit=limit + 1, offset=offset)
    served = {c.id for c in store.served_configs(cluster, workload)}
    _config_table(store, rows[:limit], f"history of {cluster}/{workload}", served)
    if len(rows) > limit:
        err.print(f"more: --offset {offset + limit}")


def _serve_change(
    ctx: typer.Context, db: str | None, key: tuple[str, str, int], target: Any, what: str
) -> None:
    """Make `target()` (a version, None: the latest; or (the version served now, the version): only if
    that one is still served) the served one and say which version is served now. A version that could
    not be served is refused, nothing changed, as REST refuses it (409): making it the served one would
    break serving for the key where it works now."""
    from autotuner.store import NotFound, ServedChanged

    store = _store(_db_of(ctx, db))
    cluster, workload, nodes = key
    try:
        wanted = target(store)
        served_now, version = wanted if isinstance(wanted, tuple) else (None, wanted)
        if version is not None and (why := _why_unservable(store, key, version)):
            raise _fail(f"{cluster}/{workload} version {version} cannot be served ({why}): not made the served "
                        "version, nothing changed")  # fmt: skip
        row = store.pin_config(cluster, workload, nodes, version, served_now=served_now)
    except NotFound as exc:
        raise _fail(f"{exc} (`autotuner configs history` lists the versions)") from exc
    except ServedChanged as exc:
        raise _fail(str(exc), 1) from exc
    said = f"{row.nodes} node{'s' if row.nodes != 1 else ''}"
    err.print(shown(f"serving {row.cluster.name}/{row.workload.name} ({said}) version {row.version} ({what})"),
              highlight=False)  # fmt: skip


def _why_unservable(store: Any, key: tuple[str, str, int], version: int) -> str | None:
    """Why a version could not be served (None: it can, or there is no such version): the service's
    check before a pin or a rollback (store.servable)."""
    from autotuner.store import servable

    try:
        row = store.config_row(*key, version)
        if row is None:
            return None  # pin_config says there is no such version
        servable(row)
    except ValueError as exc:
        return str(exc)
    except Exception as exc:  # its stored data cannot even be read
        return f"it cannot be read ({type(exc).__name__})"
    return None


@configs_app.command("pin")
def configs_pin(
    ctx: typer.Context, cluster: ClusterArg, workload: WorkloadArg, version: VersionArg,
    nodes: ChangeNodesOption = 1, db: DbOption = None,
) -> None:  # fmt: skip
    """Serve VERSION regardless of newer publishes."""
    _serve_change(ctx, db, (cluster, workload, nodes), lambda store: version, "pinned")


@configs_app.command("unpin")
def configs_unpin(
    ctx: typer.Context,
    cluster: ClusterArg,
    workload: WorkloadArg,
    nodes: ChangeNodesOption = 1,
    db: DbOption = None,
) -> None:
    """Serve the latest version again."""
    _serve_change(ctx, db, (cluster, workload, nodes), lambda store: None, "latest")


@configs_app.command("rollback")
def configs_rollback(
    ctx: typer.Context,
    cluster: ClusterArg,
    workload: WorkloadArg,
    nodes: ChangeNodesOption = 1,
    db: DbOption = None,
) -> None:
    """Pin the version before the one served now."""
    _serve_change(ctx, db, (cluster, workload, nodes),
                  lambda store: store.rollback_target(cluster, workload, nodes), "rolled back, pinned")  # fmt: skip


@configs_app.command("show")
def configs_show(
    ctx: typer.Context, cluster: ClusterArg, workload: WorkloadArg, nodes: NodesOption = None,
    fmt: Annotated[str, typer.Option("--format", help="json | sh | env | slurm")] = "json",
    db: DbOption = None,
) -> None:  # fmt: skip
    """Print the served config (json, or its export lines: sh, env, slurm); its claim goes to stderr.

    As the service and the pre-job hook, it prints only what a job may be handed: a variable the check
    drops is named on stderr, and it exits 2."""
    from autotuner.job.exports import checked_config

    if fmt not in FORMATS:
        raise _fail(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    store = _store(_db_of(ctx, db))
    row = store.served_config(cluster, workload, nodes)
    if row is None:
        raise _fail(_not_published(store, cluster, workload, nodes))
    from autotuner.cli.claim_report import evidence_claim, print_claim

    try:
        print_claim(err, *evidence_claim(row.evidence))  # stderr: the config stays clean
    except (ValueError, TypeError, AttributeError) as exc:  # as the REST listing: the config is still shown
        err.print(
            labelled("its claim cannot be read:", " ".join(str(exc).split())[:300], "yellow"), highlight=False
        )
    try:
        config = store.public_config(row)
    except Exception as exc:  # a row an older version (or a hand) wrote: said, not a traceback
        if store_unavailable(exc):
            raise
        raise _fail(unshowable(row, exc)) from None
    if config.get("flagged"):  # as REST's `flagged`: its last re-validation failed, and it is kept
        err.print(
            labelled(f"flagged: v{row.version}", config["flagged"], "yellow"), highlight=False, soft_wrap=True
        )
    _say_served_stale(store, row)
    checked, dropped = checked_config(config)
    for name, why in dropped.items():
        err.print(labelled(f"not printed: {name}", why), highlight=False, soft_wrap=True)
    _write_stdout(render(checked if dropped else config, fmt) + "\n")
    if dropped:
        raise _fail(f"{len(dropped)} variable{'s' if len(dropped) != 1 else ''} of this config would not be "
                    "served by the service nor taken by the pre-job hook (above): only the rest was printed")  # fmt: skip


def _write_stdout(text: str) -> None:
    """Machine output; a stdout that is closed (`>&-`) or gone (a pipe's reader quit) is said, exit 2."""
    import os

    try:
        if sys.stdout is None:
            raise BrokenPipeError
        sys.stdout.write(text)
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError) as exc:  # ValueError: a closed file
        try:  # what is left in its buffer goes nowhere at exit, not into a second traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass
        raise _fail("stdout is closed or gone: the config could not be printed") from exc


@configs_app.command("validations")
def configs_validations(
    ctx: typer.Context,
    cluster: ClusterArg,
    workload: WorkloadArg,
    nodes: NodesFilter = None,
    db: DbOption = None,
) -> None:
    """The re-validations of a (cluster, workload)'s versions, newest first.

    Why the served one is stale, if it is, goes to stderr."""
    from autotuner.job.fingerprint import describe

    store = _store(_db_of(ctx, db))
    versions = _versions(store, cluster, workload, nodes)
    table = _narrow_table(f"re-validations of {cluster}/{workload}")
    for col in ("id", "version", "trigger", "state", "speedup", "on", "action", "when"):
        table.add_column(col, overflow="fold", no_wrap=col in ("id", "version"),
                         justify="right" if col in ("id", "speedup") else "left")  # fmt: skip
    for v in store.validations(config_ids=list(versions)):
        table.add_row(str(v.id), _version_cell(versions[v.config_id]), shown(v.trigger), shown(v.state), _speedup_cell(v.result or {}),
                      shown(describe(v.fingerprint) if v.fingerprint else "-"), shown(v.action or v.reason or ""),
                      _when(v.finished_at or v.created_at))  # fmt: skip
    if (served := store.served_config(cluster, workload, nodes)) is not None:  # as REST's validations
        _say_served_stale(store, served, skip=())
    if not table.rows:
        err.print(f"{cluster}/{workload} has no re-validation yet (`autotuner revalidate {cluster} {workload}` runs one)",
                  highlight=False)  # fmt: skip
        return
    out.print(table)


# ---------------------------------------------------------------------------------------- revalidate


REVALIDATE_HELP = (
    "Re-check the served config against its baseline: exit 0 held, 1 failed, 2 no such config or version, "
    "3 not measured, 4 unresolved.\n\n"
    "1 failed: the config regressed (shown slower, or its gain shown gone). 3 not measured: it could not "
    "run, or the store did not answer, or a full disk kept a launch back (run it again). 4 unresolved: measured, but the rounds cannot tell "
    "whether it still gains; it stays served.\n\n"
    "Its setting runs against its study's baseline in interleaved launches (the study's rounds, executor "
    "and settings), recorded as an entry of that version. Failed: a new version is published (the last "
    "that still holds here, else the baseline) unless the version is pinned, which is flagged instead."
)  # one line a paragraph: the help keeps a docstring's line breaks


def _launch_ended(launch: Any, rows: list[Any]) -> None:
    said = ", ".join(f"b{r.batch_size} {r.samples_per_s:,.0f}/s" if r.samples_per_s else f"b{r.batch_size} {r.state}"
                     for r in rows)  # fmt: skip
    err.print(f"  launch {launch.seq}: {said}", highlight=False)


@app.command(help=REVALIDATE_HELP)
def revalidate(
    cluster: ClusterArg,
    workload: WorkloadArg,
    nodes: NodesOption = None,
    version: Annotated[
        int | None,
        typer.Option(
            parser=_version,
            metavar="VERSION",
            help="re-check this version, v3 or 3 (default: the served one)",
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="recorded with the re-validation")] = None,
    db: DbOption = None,
) -> None:
    """Re-validate the served config (REVALIDATE_HELP)."""
    from autotuner.executors import make_executor
    from autotuner.store import NotFound, ValidationState, ValidationTrigger
    from autotuner.tuning import Progress as DriverProgress
    from autotuner.tuning import StoreUnavailable, StudyBusy, WorkdirFull
    from autotuner.tuning.revalidate import (
        CannotRevalidate,
        Revalidation,
        config_to_revalidate,
        end_unrunnable,
        label,
        request,
    )

    store = _store(db, unavailable=3)  # not measured, not failed: 1 says the config regressed
    try:
        config = config_to_revalidate(store, cluster, workload, nodes, version)
        row, created = request(store, config, ValidationTrigger.MANUAL, reason or "autotuner revalidate")
    except (NotFound, CannotRevalidate) as exc:
        # nothing published (a typo): fails naming what is, as `configs` does
        _versions(store, cluster, workload, nodes)
        raise _fail(str(exc)) from exc
    err.print(f"re-validation {row.id} of {label(config)}" + ("" if created else f" (was {row.state})"))
    try:
        settings = StudySettings.model_validate(store.study(config.study_id).settings)  # type: ignore[union-attr]
        executor = make_executor(settings)
    except Exception as exc:  # its study's stored rows cannot run it: ended with why, as the scheduler does
        raise _fail(f"re-validation {row.id}: {end_unrunnable(store, row.id, exc)}", 3) from exc
    try:
        done = Revalidation(
            store, row.id, executor, progress=DriverProgress(on_launch_end=_launch_ended)
        ).run()
    except StudyBusy as exc:
        raise _fail(f"{exc}: it runs elsewhere (the service's scheduler?)", 3) from exc
    except (StoreUnavailable, WorkdirFull) as exc:  # left running: what it measured so far is kept
        when = "when the store answers" if isinstance(exc, StoreUnavailable) else "once there is space there"
        raise _fail(f"{exc}: not measured, run it again {when}", 3) from exc
    _print_validation(done)
    codes: dict[str, int] = {
        ValidationState.HELD: 0,
        ValidationState.FAILED: 1,
        ValidationState.UNRESOLVED: 4,
    }
    raise typer.Exit(codes.get(done.state, 3))


def _print_validation(done: Any) -> None:
    """A re-validation's end: its verdict and why, what it measured on, what it did."""
    from autotuner.job.fingerprint import describe

    result = done.result or {}
    err.print(labelled(f"{done.state}:", result.get("why") or done.error, "bold"), highlight=False)
    if done.fingerprint is not None:
        wall = result.get("wall_s")
        err.print(shown(f"measured on {describe(done.fingerprint)} in {wall if finite(wall) else 0:.0f} s"),
                  highlight=False)  # fmt: skip
    err.print(shown(done.action or ""), highlight=False)


# ---------------------------------------------------------------------------------------- lint


@app.command()
def lint(
    file: Annotated[
        str | None, typer.Argument(help="search space file (YAML or JSON) or preset: socket, efa")
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable)")] = None,
    allow_risky: Annotated[list[str] | None, typer.Option(help="risky variables you accept")] = None,
) -> None:
    """Check a search space file, or a set of KEY=VALUE variables for a job. Exit 2 on errors."""
    from autotuner.envvars import lint_env, parse_assignments
    from autotuner.space import allow_risky_problems, lint_space, no_such_source, source_path

    if file is None and not env:
        raise _fail("give a space FILE, or --env KEY=VALUE ...")
    problems = []
    if file is not None:
        if not source_path(file).exists():  # the same reading of FILE as `tune --space`
            raise _fail(f"{file}: {no_such_source()}")
        problems += lint_space(file)
    if env:
        try:
            pairs = parse_assignments(env)
        except ValueError as exc:
            raise _fail(str(exc)) from exc
        problems += allow_risky_problems(allow_risky or []) + lint_env(pairs, allow_risky=allow_risky or ())
    errors = [p for p in problems if p.severity == "error"]
    if problems:
        err.print(_problem_table(problems))
        warnings = len(problems) - len(errors)
        err.print(f"{len(errors)} error{'s' if len(errors) != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}",
                  highlight=False)  # fmt: skip
    if errors:
        raise typer.Exit(2)
    err.print("[green]ok[/green]" + (" (warnings only)" if problems else ""))


def _problem_table(problems: list[Any]) -> Table:
    """One row a problem, its message wrapped in its own column (it wrapped back to column 0, under
    the variables, and said no severity): the values in it are a file's or a command line's, shown."""
    table = _narrow_table("problems")
    # a variable's name stays whole unless it is a path (a file's own problem names the file): folded
    table.add_column("variable", overflow="fold", max_width=32)
    table.add_column("severity", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("problem", overflow="fold", ratio=1, min_width=24)
    for p in problems:
        severity = str(p.severity.value if hasattr(p.severity, "value") else p.severity)
        table.add_row(shown(p.variable), shown(severity, "red" if severity == "error" else "yellow"),
                      shown(p.rule), shown(p.message))  # fmt: skip
    return table


# ---------------------------------------------------------------------------------------- prune


def _size(n: int) -> str:
    """Bytes as people read them: 812 B, 31.4 KB, 2.0 GB."""
    if n < 1000:
        return f"{n} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6)):
        if n < scale * 1000:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e9:,.1f} GB"


@app.command()
def prune(
    older_than: Annotated[float, typer.Option(min=0, metavar="DAYS", help="launches that ended this many days ago or more")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="say what would be removed; remove nothing")] = False,
    db: DbOption = None,
) -> None:  # fmt: skip
    """Remove old launch directories (logs, scripts, raw results) of ended studies.

    What they measured stays in the store (candidates, summaries, log tails): all the dashboard reads."""
    from datetime import timedelta

    from autotuner.tuning.prune import prune as prune_launch_dirs
    from autotuner.tuning.revalidate import MAX_DAYS

    if not math.isfinite(older_than) or older_than > MAX_DAYS:  # past it, the date overflows
        raise _fail(f"--older-than takes 0 to {MAX_DAYS} days, got {older_than:g}")
    store = _store(db)
    pruned = prune_launch_dirs(store, timedelta(days=older_than), dry_run=dry_run)
    if not pruned:
        when = (
            f"{older_than:g} day{'s' if older_than != 1 else ''} ago or earlier" if older_than else "by now"
        )
        err.print(f"nothing to remove: no launch of an ended study that ended {when} still has its directory")
        return
    table = _narrow_table("would remove" if dry_run else "removed")
    for col in ("study", "name", "launch dirs", "size"):
        table.add_column(col, justify="left" if col == "name" else "right", overflow="fold")
    for p in pruned:  # the studies pruned, by id (a listing of all stops at its first page)
        study = store.study(p.study_id)
        table.add_row(str(p.study_id), shown(study.name if study else "?"), str(p.launches), _size(p.bytes))
    out.print(table)
    launches, size = sum(p.launches for p in pruned), _size(sum(p.bytes for p in pruned))
    err.print(
        f"{'would remove' if dry_run else 'removed'} {launches} launch directories, {size}", highlight=False
    )
    failed = [f for p in pruned for f in p.failed]
    for why in failed:
        err.print(Text.assemble("could not remove ", shown(why)), highlight=False, soft_wrap=True)  # one line
    if failed:
        raise _fail(
            f"{len(failed)} launch director{'y' if len(failed) == 1 else 'ies'} could not be removed (above)",
            1,
        )


# ---------------------------------------------------------------------------------------- hook

_HOOK: dict[str, Any] = {
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
}


@app.command("env", **_HOOK)
def env_cmd(ctx: typer.Context) -> None:
    """Print the tuned config's export lines (pre-job hook; fail-open). See `autotuner env --help`."""
    from autotuner.job.hook import env_main

    raise typer.Exit(env_main(list(ctx.args)))


@app.command("exec", **_HOOK)
def exec_cmd(ctx: typer.Context) -> None:
    """Run `-- CMD ARGS` with the tuned env (pre-job hook; fail-open)."""
    from autotuner.job.hook import exec_main

    raise typer.Exit(exec_main(list(ctx.args)))


# ---------------------------------------------------------------------------------------- plugins


# What the plugins this project ships do, said without importing them (the list stays light).
PLUGIN_HELP = {"serve": "Run the service: REST API, dashboard and the study scheduler"}


def _add_plugins() -> None:
    """Commands other packages register (group `autotuner.commands`, e.g. `serve` from api): listed
    here by name, imported only when run, so the engine's CLI knows nothing of them."""
    for entry in entry_points(group="autotuner.commands"):
        what = PLUGIN_HELP.get(entry.name, f"{entry.name}, from {entry.module}")
        app.command(entry.name, help=f"{what} (`autotuner {entry.name} --help` for its options)",
                    **_HOOK)(_plugin(entry))  # fmt: skip


def _plugin(entry: Any) -> Any:
    def run(ctx: typer.Context) -> None:
        raise typer.Exit(entry.load()(list(ctx.args)))

    return run


_add_plugins()
