"""The `autotuner` command line (Typer). Diagnostics go to stderr; machine output (export lines,
JSON) alone to stdout. The entry point is autotuner.__main__, which sends the pre-job hook commands
(`env`, `exec`) to autotuner.job.hook without importing any of this."""

from __future__ import annotations

import inspect
import json
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
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotuner.cli.terminal import labelled, shown
from autotuner.executors.results import finite
from autotuner.job.exports import render
from autotuner.paths import default_database_url
from autotuner.store.states import CandidateState, LaunchKind, StudyState
from autotuner.tuning.outcome import Outcome
from autotuner.tuning.settings import RequestSettings, StudySettings
from autotuner.tuning.study import create_study, study_settings

app = typer.Typer(
    name="autotuner",
    help="Find the NCCL env, comm precision and batch size that make TorchRec all-to-all fast, and serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
configs_app = typer.Typer(help="Published configs: list, history, pin, rollback.", no_args_is_help=False)
app.add_typer(configs_app, name="configs")
err = Console(stderr=True)
out = Console()

DbOption = Annotated[
    str | None, typer.Option("--db", envvar="AUTOTUNER_DATABASE_URL", help="SQLAlchemy URL of the store")
]
KW = inspect.Parameter.KEYWORD_ONLY


def _store(db: str | None):
    from autotuner.store import Store

    return Store(db or default_database_url())


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(labelled("error:", message), highlight=False)
    return typer.Exit(code)


# ---------------------------------------------------------------------------------------- tune


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise _fail(f"{what} {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise _fail(f"{what} {path} is not valid JSON: {exc}") from exc


TUNE_OPTIONS = [
    inspect.Parameter("cluster", KW, annotation=Annotated[str | None, typer.Option(help="cluster name: configs are keyed by it")], default=None),
    inspect.Parameter("workload", KW, annotation=Annotated[Path | None, typer.Option(help="JSON file with the trial spec's `workload` object")], default=None),
    inspect.Parameter("space", KW, annotation=Annotated[str | None, typer.Option(help="search space file (YAML/JSON) or preset: socket, efa")], default=None),
    inspect.Parameter("study", KW, annotation=Annotated[str | None, typer.Option(help="study name; an existing unfinished one is resumed")], default=None),
    inspect.Parameter("landscape", KW, annotation=Annotated[Path | None, typer.Option(help="replay: recorded landscape file")], default=None),
    inspect.Parameter("executor_option", KW, annotation=Annotated[list[str] | None, typer.Option(help="KEY=VALUE for the executor (JSON values), e.g. partition=gpu")], default=None),
    inspect.Parameter("workdir", KW, annotation=Annotated[Path | None, typer.Option(help="launch directories (shared with the nodes)")], default=None),
    inspect.Parameter("db", KW, annotation=DbOption, default=None),
]  # fmt: skip


def _settings_options() -> list[inspect.Parameter]:
    """One option per field of RequestSettings: the defaults, bounds and help of the REST body."""
    params = []
    for name, field in RequestSettings.model_fields.items():
        flag = flag_of(name)
        default = field.get_default(call_default_factory=True)
        if isinstance(default, bool):
            option, kind = typer.Option(f"{flag}/--no-{flag[2:]}", help=field.description), bool
        else:
            option, kind = typer.Option(flag, help=field.description), _cli_type(field.annotation)
        if isinstance(default, list):
            default = ",".join(map(str, default))
        params.append(inspect.Parameter(name, KW, annotation=Annotated[kind, option], default=default))
    return params


def _cli_type(annotation: Any) -> Any:
    """What typer parses a field as: numbers as numbers, choices and lists as text (pydantic checks them)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) else annotation
    return base if base in (int, float) else str


def settings_from_options(options: dict[str, Any]) -> RequestSettings:
    """The command line's values as the REST body's settings; bad ones name their option."""
    values = dict(options)
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
        where = flag_of(str(first["loc"][0])) if first["loc"] else "settings"
        raise _fail(f"{where}: {first['msg'].removeprefix('Value error, ')}") from exc


def flag_of(field: str) -> str:
    """The command-line option of a settings field."""
    info = RequestSettings.model_fields[field]
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return "--" + str(extra.get("cli") or field.replace("_", "-"))


def _executor_options(items: list[str] | None, landscape: Path | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise _fail(f"--executor-option {item!r}: use KEY=VALUE")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw  # a plain string
    if landscape is not None:
        options["landscape"] = str(landscape)
    return options


def tune(**options: Any) -> None:
    """Run (or resume) a tuning study, then publish the confirmed best config."""
    from autotuner.cli.claim_report import inert_lines
    from autotuner.executors import make_executor
    from autotuner.tuning import StudyBusy
    from autotuner.tuning.driver import UNRUNNABLE, cannot_run, driver_for

    store = _store(options["db"])
    row = store.study(options["study"]) if options["study"] else None
    if row is None:
        row = _new_study(store, options)
        err.print(f"study [bold]{row.name}[/bold] (id {row.id}) created")
        for line in inert_lines(row.inert, row.space.get("force_inert", [])):
            err.print(shown(line), highlight=False)
    else:
        err.print(f"resuming study [bold]{row.name}[/bold] (id {row.id}, {row.state})")
    budget = row.settings.get("trials") if isinstance(row.settings, dict) else None
    with _progress_bar((budget if isinstance(budget, int) else 0) + 1) as progress:
        try:
            driver = driver_for(store, row, make_executor, progress=progress)
        except UNRUNNABLE as exc:
            raise _fail(cannot_run(store, row.id, exc), 1) from exc
        try:
            final = driver.run()
        except StudyBusy as exc:
            raise _fail(str(exc), 3) from exc
    _print_outcome(store, final)
    if final.state != StudyState.DONE:
        raise typer.Exit(1)


tune.__signature__ = inspect.Signature([*TUNE_OPTIONS, *_settings_options()])  # type: ignore[attr-defined]
app.command()(tune)


def _new_study(store: Any, options: dict[str, Any]) -> Any:
    if options["cluster"] is None or options["workload"] is None or options["space"] is None:
        raise _fail("--cluster, --workload and --space are required for a new study")
    request = settings_from_options({k: options[k] for k in RequestSettings.model_fields})
    executor_options = _executor_options(options["executor_option"], options["landscape"])
    workdir = str(options["workdir"]) if options["workdir"] else None
    try:
        settings = study_settings(request, workdir=workdir, executor_options=executor_options)
        return create_study(store, cluster=options["cluster"], workload=_load_json(options["workload"], "workload"),
                            space=options["space"], settings=settings, name=options["study"])  # fmt: skip
    except ValueError as exc:
        raise _fail(str(exc)) from exc


@contextmanager
def _progress_bar(total: int) -> Iterator[Any]:
    """A bar over the baseline and search launches; its status line says how each launch went."""
    from autotuner.tuning import Progress as DriverProgress

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=err, transient=False,
    ) as bar:  # fmt: skip
        task = bar.add_task("baseline", total=total, status="")

        def ended(launch: Any, rows: list[Any]) -> None:
            ok = [r for r in rows if r.state == CandidateState.OK]
            # a quality launch trains and scores models: its rows have no throughput
            best = max((r.samples_per_s for r in ok if r.samples_per_s), default=None)
            status = f"launch {launch.seq} {launch.kind}: {len(ok)}/{len(rows)} ok" + (
                f", best {best:,.0f} samples/s" if best else ""
            )
            wall = (launch.summary or {}).get("wall_s")
            if launch.kind == LaunchKind.QUALITY and wall:  # the convergence check's cost, said as it ends
                status += f", {len(rows)} models trained in {wall:.0f} s"
            if launch.kind in (LaunchKind.BASELINE, LaunchKind.SEARCH):
                bar.advance(task)
            bar.update(task, status=status)

        yield DriverProgress(on_launch_end=ended, on_phase=lambda phase: bar.update(task, description=phase))


def _print_outcome(store: Any, study: Any) -> None:
    from autotuner.cli.claim_report import claim_text, confirmed_line, print_claim, scaling_table

    outcome = Outcome.load(study.outcome) or Outcome()
    if study.state == StudyState.FAILED:
        err.print(labelled(f"study {study.name} failed:", study.error), highlight=False)
        return
    rows = {label: store.candidate(cid) for label, cid in
            (("baseline", study.baseline_candidate_id), ("best", study.best_candidate_id)) if cid}  # fmt: skip
    table = Table(title=f"study {study.name}: best vs baseline", title_justify="left")
    table.add_column("")
    for label in rows:
        table.add_column(label, overflow="fold")

    def line(name: str, show: Any) -> None:
        table.add_row(name, *(show(c) for c in rows.values()))

    line("env", lambda c: "\n".join(f"{k}={v}" for k, v in sorted(c.env.items())) or "(no overrides)")
    line("precision fwd/bwd", lambda c: f"{c.fwd_precision}/{c.bwd_precision}")
    line("batch per rank", lambda c: str(c.batch_size))
    line("sharding", lambda c: c.sharding)
    line("pipeline", lambda c: c.pipeline or "-")
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
    err.print(outcome.decision or "")
    if outcome.published_version is not None:
        err.print(f"published {study.cluster.name}/{study.workload.name} version {outcome.published_version}")


# ---------------------------------------------------------------------------------------- studies


@app.command()
def studies(db: DbOption = None) -> None:
    """List studies with their state and progress."""
    store = _store(db)
    table = Table()
    for col in ("id", "name", "cluster", "workload", "state", "launches", "best samples/s", "speedup"):
        table.add_column(col)
    for s in store.studies():
        best = store.candidate(s.best_candidate_id) if s.best_candidate_id else None
        trials = StudySettings.model_validate(s.settings).trials
        speedup = (Outcome.load(s.outcome) or Outcome()).speedup
        table.add_row(str(s.id), s.name, s.cluster.name, s.workload.name, s.state,
                      f"{s.launches_done}/{trials if trials is not None else '-'}",
                      f"{best.samples_per_s:,.0f}" if best and best.samples_per_s else "-",
                      f"{speedup:.2f}x" if speedup else "-")  # fmt: skip
    out.print(table)


# ---------------------------------------------------------------------------------------- configs


@configs_app.callback(invoke_without_command=True)
def configs(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
    workload: Annotated[str | None, typer.Option(help="only this workload")] = None,
    db: DbOption = None,
) -> None:
    """List the configs being served (pinned version, else latest)."""
    if ctx.invoked_subcommand is not None:
        return
    store = _store(db)
    rows = [c for c in store.served_configs()
            if (cluster is None or c.cluster.name == cluster) and (workload is None or c.workload.name == workload)]  # fmt: skip
    _config_table(rows, "served configs")


def _config_table(rows: list[Any], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("cluster", "workload", "nodes", "version"):
        table.add_column(col, no_wrap=True)  # what a reader looks a config up by: never cut
    for col in ("env", "precision", "batch", "speedup", "published"):
        table.add_column(col, overflow="fold")
    for c in rows:
        ev = c.evidence or {}
        speed = f"{ev['speedup']:.2f}x" if ev.get("speedup") else "-"
        if ev.get("ci_low"):
            speed += f" [{ev['ci_low']:.2f}-{ev['ci_high']:.2f}]"
        table.add_row(c.cluster.name, c.workload.name, str(c.nodes), f"v{c.version}" + (" (pinned)" if c.pinned else ""),
                      " ".join(f"{k}={v}" for k, v in sorted(c.env.items())) or "-",
                      f"{c.fwd_precision}/{c.bwd_precision}", str(c.batch_size), speed,
                      c.created_at.strftime("%Y-%m-%d %H:%M"))  # fmt: skip
    out.print(table)


@configs_app.command("history")
def configs_history(
    cluster: str, workload: str, nodes: int | None = None,
    limit: Annotated[int, typer.Option(min=1, help="versions per page")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="skip this many (newest first)")] = 0,
    db: DbOption = None,
) -> None:  # fmt: skip
    """Published versions of a (cluster, workload), newest first, a page at a time."""
    rows = _store(db).config_history(cluster, workload, nodes, limit=limit + 1, offset=offset)
    _config_table(rows[:limit], f"history of {cluster}/{workload}")
    if len(rows) > limit:
        err.print(f"more: --offset {offset + limit}")


def _serve_change(change: Any, what: str) -> None:
    """Run a pin/unpin/rollback and say which version is served now."""
    from autotuner.store import NotFound

    try:
        row = change()
    except NotFound as exc:
        raise _fail(str(exc)) from exc
    err.print(
        f"serving {row.cluster.name}/{row.workload.name} ({row.nodes} nodes) version {row.version} ({what})"
    )


@configs_app.command("pin")
def configs_pin(cluster: str, workload: str, version: int, nodes: int = 1, db: DbOption = None) -> None:
    """Serve VERSION regardless of newer publishes."""
    _serve_change(lambda: _store(db).pin_config(cluster, workload, nodes, version), "pinned")


@configs_app.command("unpin")
def configs_unpin(cluster: str, workload: str, nodes: int = 1, db: DbOption = None) -> None:
    """Serve the latest version again."""
    _serve_change(lambda: _store(db).pin_config(cluster, workload, nodes, None), "latest")


@configs_app.command("rollback")
def configs_rollback(cluster: str, workload: str, nodes: int = 1, db: DbOption = None) -> None:
    """Pin the version before the one served now."""
    _serve_change(lambda: _store(db).rollback_config(cluster, workload, nodes), "rolled back, pinned")


@configs_app.command("show")
def configs_show(
    cluster: str, workload: str, nodes: int | None = None, fmt: Annotated[str, typer.Option("--format")] = "json",
    db: DbOption = None,
) -> None:  # fmt: skip
    """Print the served config as json, sh or slurm."""
    store = _store(db)
    row = store.served_config(cluster, workload, nodes)
    if row is None:
        raise _fail(f"no config published for {cluster}/{workload}", 1)
    from autotuner.cli.claim_report import evidence_claim, print_claim

    print_claim(err, *evidence_claim(row.evidence))  # stderr: the config stays clean
    sys.stdout.write(render(store.public_config(row), fmt) + "\n")


@configs_app.command("validations")
def configs_validations(cluster: str, workload: str, nodes: int | None = None, db: DbOption = None) -> None:
    """The re-validations of a (cluster, workload)'s versions, newest first."""
    from autotuner.job.fingerprint import describe

    store = _store(db)
    versions = store.config_versions(cluster, workload, nodes)
    table = Table(title=f"re-validations of {cluster}/{workload}", title_justify="left")
    for col in ("id", "version", "trigger", "state", "speedup", "on", "action", "when"):
        table.add_column(col, overflow="fold")
    for v in store.validations(config_ids=list(versions)):
        result = v.result or {}
        speed = f"{result['speedup']:.2f}x" if result.get("speedup") else "-"
        if result.get("ci_low"):
            speed += f" [{result['ci_low']:.2f}-{result['ci_high']:.2f}]"
        when = v.finished_at or v.created_at
        table.add_row(str(v.id), f"v{versions[v.config_id]}", shown(v.trigger), shown(v.state), speed,
                      shown(describe(v.fingerprint) if v.fingerprint else "-"), shown(v.action or v.reason or ""),
                      when.strftime("%Y-%m-%d %H:%M") if when else "-")  # fmt: skip
    out.print(table)


# ---------------------------------------------------------------------------------------- revalidate


@app.command()
def revalidate(
    cluster: str,
    workload: str,
    nodes: Annotated[
        int | None, typer.Option(help="the node count of the config (default: the served one)")
    ] = None,
    version: Annotated[
        int | None, typer.Option(help="re-check this version (default: the served one)")
    ] = None,
    reason: Annotated[str | None, typer.Option(help="recorded with the re-validation")] = None,
    db: DbOption = None,
) -> None:
    """Re-validate the published config: its setting against its study's baseline in interleaved
    launches (the study's rounds, executor and settings), recorded as an entry of that version. Held:
    exit 0. Failed: a new version (the last that still holds here, else the baseline) unless the version
    is pinned (flagged), exit 1. Not measured: exit 3."""
    from autotuner.executors import make_executor
    from autotuner.job.fingerprint import describe
    from autotuner.store import NotFound, ValidationState, ValidationTrigger
    from autotuner.tuning import Progress as DriverProgress
    from autotuner.tuning import StudyBusy
    from autotuner.tuning.revalidate import (
        CannotRevalidate,
        Revalidation,
        config_to_revalidate,
        label,
        request,
    )

    store = _store(db)
    try:
        config = config_to_revalidate(store, cluster, workload, nodes, version)
        row, created = request(store, config, ValidationTrigger.MANUAL, reason or "autotuner revalidate")
    except (NotFound, CannotRevalidate) as exc:
        raise _fail(str(exc)) from exc
    err.print(f"re-validation {row.id} of {label(config)}" + ("" if created else f" (was {row.state})"))
    settings = StudySettings.model_validate(store.study(config.study_id).settings)  # type: ignore[union-attr]

    def ended(launch: Any, rows: list[Any]) -> None:
        shown = ", ".join(f"b{r.batch_size} {r.samples_per_s:,.0f}/s" if r.samples_per_s else f"b{r.batch_size} {r.state}"
                          for r in rows)  # fmt: skip
        err.print(f"  launch {launch.seq}: {shown}", highlight=False)

    try:
        done = Revalidation(
            store, row.id, make_executor(settings), progress=DriverProgress(on_launch_end=ended)
        ).run()
    except StudyBusy as exc:
        raise _fail(f"{exc}: it runs elsewhere (the service's scheduler?)", 3) from exc
    result = done.result or {}
    err.print(labelled(f"{done.state}:", result.get("why") or done.error, "bold"), highlight=False)
    if done.fingerprint is not None:
        wall = result.get("wall_s")
        err.print(shown(f"measured on {describe(done.fingerprint)} in {wall if finite(wall) else 0:.0f} s"),
                  highlight=False)  # fmt: skip
    err.print(shown(done.action or ""), highlight=False)
    codes: dict[str, int] = {ValidationState.HELD: 0, ValidationState.FAILED: 1}
    raise typer.Exit(codes.get(done.state, 3))


# ---------------------------------------------------------------------------------------- lint


@app.command()
def lint(
    file: Annotated[Path | None, typer.Argument(help="search space file (YAML or JSON)")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable)")] = None,
    allow_risky: Annotated[list[str] | None, typer.Option(help="risky variables you accept")] = None,
) -> None:
    """Check a search space file, or a set of KEY=VALUE variables for a job. Exit 2 on errors."""
    from autotuner.envvars import format_problems, lint_env, parse_assignments
    from autotuner.space import lint_space

    if file is None and not env:
        raise _fail("give a space FILE, or --env KEY=VALUE ...")
    problems = []
    if file is not None:
        if not file.exists():
            raise _fail(f"{file}: no such file")
        problems += lint_space(file)
    if env:
        try:
            pairs = parse_assignments(env)
        except ValueError as exc:
            raise _fail(str(exc)) from exc
        problems += lint_env(pairs, allow_risky=allow_risky or ())
    errors = [p for p in problems if p.severity == "error"]
    if problems:
        err.print(format_problems(problems), highlight=False, markup=False)
    if errors:
        raise typer.Exit(2)
    err.print("[green]ok[/green]" + (f" ({len(problems)} warnings)" if problems else ""))


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


def _add_plugins() -> None:
    """Commands other packages register (group `autotuner.commands`, e.g. `serve` from api): listed
    here by name, imported only when run, so the engine's CLI knows nothing of them."""
    for entry in entry_points(group="autotuner.commands"):
        app.command(entry.name, help=f"{entry.name} (from {entry.module}; `autotuner {entry.name} --help`)",
                    **_HOOK)(_plugin(entry))  # fmt: skip


def _plugin(entry: Any) -> Any:
    def run(ctx: typer.Context) -> None:
        raise typer.Exit(entry.load()(list(ctx.args)))

    return run


_add_plugins()
