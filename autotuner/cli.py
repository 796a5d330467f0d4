"""The `autotuner` command line (Typer). Diagnostics go to stderr; machine output (export lines,
JSON) alone to stdout. The entry point is autotuner.__main__, which sends the pre-job hook commands
(`env`, `exec`) to autotuner.hook without importing any of this."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotuner.configs import config_to_dict, render
from autotuner.study import StudySettings, create_study, default_database_url

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


def _store(db: str | None):  # noqa: ANN202
    from autotuner.store import Store

    return Store(db or default_database_url())


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


# ---------------------------------------------------------------------------------------- tune


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise _fail(f"{what} {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise _fail(f"{what} {path} is not valid JSON: {exc}") from exc


@app.command()
def tune(
    cluster: Annotated[str | None, typer.Option(help="cluster name: configs are keyed by it")] = None,
    workload: Annotated[
        Path | None, typer.Option(help="JSON file with the trial spec's `workload` object")
    ] = None,
    space: Annotated[
        str | None, typer.Option(help="search space file (YAML/JSON) or preset: socket, efa")
    ] = None,
    executor: Annotated[str, typer.Option(help="local | replay | slurm | kubernetes")] = "local",
    nproc: Annotated[int, typer.Option(help="ranks per node")] = 2,
    nnodes: Annotated[int, typer.Option(help="nodes per launch")] = 1,
    trials: Annotated[int, typer.Option(help="search launches (each measures several candidates)")] = 6,
    time_budget: Annotated[float | None, typer.Option(help="seconds; no new launch after")] = None,
    candidates_per_launch: Annotated[int | None, typer.Option(help="cap k of candidates per launch")] = None,
    iterations: Annotated[int, typer.Option(help="measured iterations per candidate")] = 30,
    warmup: Annotated[int, typer.Option(help="warmup iterations per candidate")] = 3,
    confirm_rounds: Annotated[int, typer.Option(help="interleaved best/baseline rounds")] = 3,
    sampler: Annotated[str, typer.Option(help="tpe | random")] = "tpe",
    seed: int = 0,
    fabric: Annotated[
        str | None, typer.Option(help="local: emulate a fabric of this rate (e.g. 2gbit)")
    ] = None,
    landscape: Annotated[Path | None, typer.Option(help="replay: recorded landscape file")] = None,
    executor_option: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the executor (JSON values), e.g. partition=gpu")
    ] = None,
    launch_timeout: Annotated[float, typer.Option(help="seconds before a launch is killed")] = 900,
    scaling_nodes: Annotated[
        str, typer.Option(help="after publishing, measure at these node counts: 1,2,4")
    ] = "",
    workdir: Annotated[Path | None, typer.Option(help="launch directories (shared with the nodes)")] = None,
    study: Annotated[
        str | None, typer.Option(help="study name; an existing unfinished one is resumed")
    ] = None,
    db: DbOption = None,
) -> None:
    """Run (or resume) a tuning study, then publish the confirmed best config."""
    from autotuner.driver import Progress as DriverProgress
    from autotuner.driver import StudyBusy, StudyDriver
    from autotuner.executors import make_executor

    store = _store(db)
    existing = store.study(study) if study else None
    if existing is None:
        if cluster is None or workload is None or space is None:
            raise _fail("--cluster, --workload and --space are required for a new study")
        options: dict[str, Any] = {}
        try:
            nodes_curve = [int(n) for n in scaling_nodes.split(",") if n.strip()]
        except ValueError as exc:
            raise _fail(f"--scaling-nodes {scaling_nodes!r}: comma-separated integers, e.g. 1,2,4") from exc
        for item in executor_option or []:
            key, sep, raw = item.partition("=")
            if not sep or not key:
                raise _fail(f"--executor-option {item!r}: use KEY=VALUE")
            try:
                options[key] = json.loads(raw)
            except ValueError:
                options[key] = raw  # a plain string
        if landscape is not None:
            options["landscape"] = str(landscape)
        try:
            settings = StudySettings(
                executor=executor, nproc_per_node=nproc, nnodes=nnodes, trials=trials, time_budget_s=time_budget,
                candidates_per_launch=candidates_per_launch, iterations=iterations, warmup=warmup,
                confirm_rounds=confirm_rounds, sampler=sampler, seed=seed, fabric=fabric,
                launch_timeout_s=launch_timeout, workdir=str(workdir) if workdir else None, executor_options=options,
                scaling_nodes=nodes_curve,
            )  # fmt: skip
            row = create_study(store, cluster=cluster, workload=_load_json(workload, "workload"), space=space,
                               settings=settings, name=study)  # fmt: skip
        except ValueError as exc:
            raise _fail(str(exc)) from exc
        err.print(f"study [bold]{row.name}[/bold] (id {row.id}) created")
    else:
        row = existing
        settings = StudySettings.model_validate(row.settings)
        err.print(f"resuming study [bold]{row.name}[/bold] (id {row.id}, {row.state})")

    total = (settings.trials or 0) + 1
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=err, transient=False,
    ) as bar:  # fmt: skip
        task = bar.add_task("baseline", total=total, status="")

        def ended(launch: Any, rows: list[Any]) -> None:
            ok = [r for r in rows if r.state == "ok"]
            best = max((r.samples_per_s for r in ok), default=None)
            status = f"launch {launch.seq} {launch.kind}: {len(ok)}/{len(rows)} ok" + (
                f", best {best:,.0f} samples/s" if best else ""
            )
            if launch.kind in ("baseline", "search"):
                bar.advance(task)
            bar.update(task, status=status)

        progress = DriverProgress(
            on_launch_end=ended,
            on_phase=lambda phase: bar.update(task, description=phase),
        )
        try:
            final = StudyDriver(store, row.id, make_executor(settings), progress=progress).run()
        except StudyBusy as exc:
            raise _fail(str(exc), 3) from exc
    _print_outcome(store, final)
    if final.state != "done":
        raise typer.Exit(1)


def _print_outcome(store: Any, study: Any) -> None:
    outcome = study.outcome or {}
    if study.state == "failed":
        err.print(f"[red]study {study.name} failed:[/red] {study.error}")
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
    if "ci_low" in outcome:
        err.print(
            f"confirmed speedup [bold]{outcome['speedup']:.2f}x[/bold] "
            f"(95% CI {outcome['ci_low']:.2f}-{outcome['ci_high']:.2f}, {outcome['rounds']} interleaved rounds)"
        )
    err.print(outcome.get("decision", ""))
    if "published_version" in outcome:
        err.print(
            f"published {study.cluster.name}/{study.workload.name} version {outcome['published_version']}"
        )


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
        speedup = (s.outcome or {}).get("speedup")
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
def configs_history(cluster: str, workload: str, db: DbOption = None) -> None:
    """Every published version of a (cluster, workload)."""
    _config_table(_store(db).config_history(cluster, workload), f"history of {cluster}/{workload}")


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
    row = _store(db).served_config(cluster, workload, nodes)
    if row is None:
        raise _fail(f"no config published for {cluster}/{workload}", 1)
    sys.stdout.write(render(config_to_dict(row), fmt) + "\n")


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

_HOOK = {
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
}


@app.command("env", **_HOOK)
def env_cmd(ctx: typer.Context) -> None:
    """Print the tuned config's export lines (pre-job hook; fail-open). See `autotuner env --help`."""
    from autotuner.hook import env_main

    raise typer.Exit(env_main(list(ctx.args)))


@app.command("exec", **_HOOK)
def exec_cmd(ctx: typer.Context) -> None:
    """Run `-- CMD ARGS` with the tuned env (pre-job hook; fail-open)."""
    from autotuner.hook import exec_main

    raise typer.Exit(exec_main(list(ctx.args)))


# ---------------------------------------------------------------------------------------- serve


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="bind address (AUTOTUNER_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (AUTOTUNER_PORT)")] = None,
    workers: Annotated[int | None, typer.Option(help="API processes (AUTOTUNER_WORKERS)")] = None,
    db: DbOption = None,
    scheduler: Annotated[bool | None, typer.Option(help="run queued studies (one scheduler process)")] = None,
) -> None:
    """Run the service: REST API and dashboard (uvicorn workers) and one study scheduler process."""
    import logging
    import os
    import shutil

    import uvicorn

    from api.scheduler import SchedulerProcess, scheduler_env
    from api.settings import Settings

    overrides: dict[str, Any] = {k: v for k, v in {"host": host, "port": port, "workers": workers,
                                                   "database_url": db, "scheduler": scheduler}.items()
                                 if v is not None}  # fmt: skip
    try:
        settings = Settings(**overrides)
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Workers are separate processes that read their settings from the environment.
    os.environ.update({"AUTOTUNER_DATABASE_URL": settings.url, "AUTOTUNER_DATA_DIR": str(settings.data_dir)})
    if settings.workers > 1:
        os.environ["AUTOTUNER_DIE_WITH_PARENT"] = "1"
        # Counters and latency histograms live in each worker: Prometheus' multiprocess mode sums them.
        metrics_dir = settings.data_dir / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    from autotuner.store import Store

    Store(settings.url).dispose()  # migrate once, before workers race to
    runner = None
    if settings.scheduler:
        runner = SchedulerProcess(scheduler_env(settings))
        runner.start()
        os.environ["AUTOTUNER_SCHEDULER_PID"] = str(runner.pid)
    err.print(f"nccl-autotuner serving on http://{settings.host}:{settings.port} "
              f"({settings.workers} workers, store {settings.url})")  # fmt: skip
    try:
        uvicorn.run("api.app:app_from_env", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_level="warning", access_log=False)  # fmt: skip
    finally:
        if runner is not None:
            runner.stop()
