"""`autotuner serve`: the service's command, registered with the engine's CLI as a plugin
(entry point group `autotuner.commands`), so the engine never imports the service."""

from __future__ import annotations

import atexit
import errno
import fcntl
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.console import Console

from api.settings import Settings, log_to_stderr
from autotuner.cli.terminal import labelled, shown
from autotuner.store.db import shown_url

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
# Each option's help with the default the settings take when neither it nor its variable is given.
_HELP = {
    name: f"{what} ({variable}; default {Settings.model_fields[name].default})"
    for name, what, variable in (("host", "bind address", "AUTOTUNER_HOST"), ("port", "port", "AUTOTUNER_PORT"),
                                 ("workers", "API processes", "AUTOTUNER_WORKERS"))
}  # fmt: skip
err = Console(stderr=True)
# The settings an option of `serve` sets, by the option's name: a refused value is named as the user gave
# it (`--port 99999` was reported as AUTOTUNER_PORT). Not --db: its option reads AUTOTUNER_DATABASE_URL too.
_FLAGS = {"host": "--host", "port": "--port", "workers": "--workers"}


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help=_HELP["host"])] = None,
    port: Annotated[int | None, typer.Option(help=_HELP["port"])] = None,
    workers: Annotated[int | None, typer.Option(help=_HELP["workers"])] = None,
    db: Annotated[str | None, typer.Option("--db", envvar="AUTOTUNER_DATABASE_URL", help="SQLAlchemy URL of the store")] = None,
    scheduler: Annotated[bool | None, typer.Option(help="run queued studies (one scheduler process; AUTOTUNER_SCHEDULER; default on)")] = None,
) -> None:  # fmt: skip
    """Run the service: REST API and dashboard (uvicorn workers) and one study scheduler process.

    Every other setting (tokens, the data directory, the executors studies may use, ...) is an
    AUTOTUNER_* variable or a line of AUTOTUNER_SETTINGS_FILE: docs/operations.md lists them."""
    import uvicorn

    from api.cache import SharedGeneration
    from api.scheduler import SchedulerProcess, restarts_file, scheduler_env

    overrides: dict[str, Any] = {k: v for k, v in {"host": host, "port": port, "workers": workers,
                                                   "database_url": db, "scheduler": scheduler}.items()
                                 if v is not None}  # fmt: skip
    try:
        settings = Settings(**overrides)
    except ValueError as exc:
        flags = {field: flag for field, flag in _FLAGS.items() if field in overrides}
        err.print(labelled("error:", _one_line(exc, flags)), highlight=False, soft_wrap=True)  # fmt: skip
        raise typer.Exit(2) from exc
    log_to_stderr()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = hold_data_dir(settings.data_dir)  # held until this process ends
    if isinstance(lock, str):
        err.print(labelled("error:", lock), highlight=False, soft_wrap=True)  # a path: one line
        raise typer.Exit(2)
    taken = cannot_listen(settings.host, settings.port, settings.workers)  # before the scheduler starts
    if taken is not None:
        err.print(labelled("error:", taken), highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    _export_for_workers(settings)
    _create_schemas(settings.url)
    # One counter for all workers, fresh per start: none answers older than another has (api/cache.py).
    SharedGeneration.create(settings.data_dir / "config-generation")
    os.environ["AUTOTUNER_GENERATION_FILE"] = str(settings.data_dir / "config-generation")
    runner = None
    if settings.scheduler:
        pid_file = settings.data_dir / "scheduler.pid"  # the workers read it: a restart writes another pid
        pid_file.unlink(missing_ok=True)
        restarts_file(pid_file).unlink(missing_ok=True)  # counted afresh for each start
        runner = SchedulerProcess(scheduler_env(settings), pid_file)
        runner.start()
        os.environ["AUTOTUNER_SCHEDULER_PID_FILE"] = str(pid_file)
    processes = f"{settings.workers} worker{'s' if settings.workers > 1 else ''}"
    err.print(shown(f"nccl-autotuner serving on {_address(settings.host, settings.port)} "
                    f"({processes}, store {shown_url(settings.url)})"), highlight=False)  # fmt: skip
    for note in access_notes(settings):
        err.print(labelled("note:", note, "yellow"), highlight=False)
    try:
        uvicorn.run("api.app:app_from_env", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_level="warning", access_log=False)  # fmt: skip
    finally:
        if runner is not None:
            runner.stop()


def _address(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def cannot_listen(host: str, port: int, workers: int) -> str | None:
    """Why the service cannot listen on host:port, or None: found before anything starts (uvicorn said
    `[Errno 98] Address already in use` with no address, after "serving on", and exited 3). Bound as
    uvicorn binds: one family for several workers, each address the host resolves to for one."""
    where = _address(host, port)
    family = (socket.AF_INET6 if ":" in host else socket.AF_INET) if workers > 1 else socket.AF_UNSPEC
    try:
        for af, kind, proto, _, address in socket.getaddrinfo(host or None, port, family, socket.SOCK_STREAM,
                                                              0, socket.AI_PASSIVE):  # fmt: skip
            with socket.socket(af, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT is free
                if (
                    af == socket.AF_INET6 and family == socket.AF_UNSPEC
                ):  # as asyncio's server: one per family
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:  # socket.gaierror too: a host name that does not resolve
        if exc.errno == errno.EADDRINUSE:
            return (f"cannot listen on {where}: the address is already in use (another service?): give a free "
                    "port with --port or AUTOTUNER_PORT")  # fmt: skip
        why = exc.strerror or str(exc)
        return f"cannot listen on {where}: {why} (set with --host/AUTOTUNER_HOST and --port/AUTOTUNER_PORT)"
    return None


def _one_line(exc: ValueError, flags: dict[str, str] | None = None) -> str:
    """A refused setting as one line naming it (pydantic's own text spans four, with a web address), by
    the option that gave it where `flags` (setting: option) says one did, else by its variable."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError) or not exc.errors():
        return " ".join(str(exc).split())
    first = exc.errors()[0]
    msg = " ".join(first["msg"].removeprefix("Value error, ").split())
    field = ".".join(map(str, first["loc"]))
    flag = (flags or {}).get(field)
    if flag is not None:
        return f"{flag} {first.get('input')}: {msg}"  # what the user typed (no secret: host, port, workers)
    return msg if not field or "AUTOTUNER_" in msg else f"AUTOTUNER_{field.upper()}: {msg}"


def _create_schemas(url: str) -> None:
    """Every schema the service uses, ours and Optuna's, made before any worker or the scheduler opens
    it (the first study of a fresh service failed when two of them created Optuna's at once); a store
    that cannot be opened (a newer version's, no database) is said, exit 2 (1: a server not answering)."""
    from sqlalchemy.exc import DBAPIError, NoSuchModuleError, OperationalError

    from autotuner.store import Store
    from autotuner.store.db import SchemaError
    from autotuner.tuning import optuna_storage

    try:
        Store(url).dispose()
        optuna_storage(url).engine.dispose()
    except (SchemaError, NoSuchModuleError, DBAPIError) as exc:
        why = " ".join(str(getattr(exc, "orig", None) or exc).split())
        err.print(labelled("error:", f"cannot open the store {shown_url(url)}: {why}"), highlight=False,
                  soft_wrap=True)  # fmt: skip
        raise typer.Exit(1 if isinstance(exc, OperationalError) else 2) from exc


def hold_data_dir(data_dir: Path) -> IO[str] | str:
    """The data dir's lock (an open file, kept open), or why not: another service holds it. What the
    service keeps there is its own (the workers' generation counter, the scheduler's pid, the metrics
    of its workers): a second service on it made the first's readiness and metrics lie."""
    import fcntl

    lock = open(data_dir / "serve.lock", "a+")  # held for the life of the process
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        return (f"another `autotuner serve` (pid {holder}) runs with the data dir {data_dir}: one service per "
                "data dir; give this one its own AUTOTUNER_DATA_DIR (replicas share a PostgreSQL store, "
                "not a data dir)")  # fmt: skip
    except OSError as exc:  # a file system without locks (Lustre without -o flock, NFS without lockd)
        err.print(labelled("note:", f"the data dir {data_dir} cannot be locked ({exc.strerror}): nothing stops "
                           "a second service on it", "yellow"), highlight=False, soft_wrap=True)  # fmt: skip
        return lock
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def access_notes(settings: Any) -> list[str]:
    """What the tokens configured let no one do: said at start, as an operator otherwise meets it as 401s."""
    scopes = set(settings.token_scopes.values())
    if not scopes and not settings.public_read:
        return ["no token is configured (AUTOTUNER_TOKENS): every API request answers 401 and the dashboard "
                "asks for a token no one has; set AUTOTUNER_TOKENS=SECRET:read,SECRET:write (and "
                "AUTOTUNER_PUBLIC_READ=1 to open reads and the dashboard)"]  # fmt: skip
    if not scopes & {"write", "admin"}:
        return ["no write token is configured (AUTOTUNER_TOKENS=SECRET:write): studies can only be started "
                "with `autotuner tune`, not through the API"]  # fmt: skip
    return []


def _export_for_workers(settings: Any) -> None:
    """Workers are separate processes that read their settings from the environment (and the settings
    file): what this command's options set is exported, so that a worker's settings are this one's
    (before, `--port 8123` reached uvicorn but a worker's own settings still said AUTOTUNER_PORT's)."""
    os.environ.update({"AUTOTUNER_DATABASE_URL": settings.url, "AUTOTUNER_DATA_DIR": str(settings.data_dir),
                       "AUTOTUNER_SCHEDULER": "1" if settings.scheduler else "0", "AUTOTUNER_HOST": settings.host,
                       "AUTOTUNER_PORT": str(settings.port), "AUTOTUNER_WORKERS": str(settings.workers)})  # fmt: skip
    if settings.workers > 1:
        os.environ["AUTOTUNER_SUPERVISOR_PID"] = str(os.getpid())  # the workers' parent
        # Counters and latency histograms live in each worker: Prometheus' multiprocess mode sums them.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir())
        shutil.rmtree(settings.data_dir / "prometheus", ignore_errors=True)  # where versions before put them


METRICS_PREFIX = "nccl-autotuner-metrics-"
OWNER_LOCK = ".owner.lock"  # in each service's metrics dir, flock'd by it for as long as it runs
_held: list[IO[bytes]] = []  # the lock files this process holds (closed, a lock is let go)


def metrics_dir(parent: Path | None = None) -> Path:
    """A directory of this service's own for the workers' metric files, in memory (/dev/shm) where it
    can be: they are mmap'd, and on a full disk each write faulted (SIGBUS), so that under the data
    dir a full disk killed every worker, over and over, with nothing logged, and no request was
    answered. Those of services gone (killed before they could remove theirs) are removed first: a dir
    is gone when its owner's lock can be taken, which holds across PID namespaces (a container sharing
    /dev/shm), where a pid says nothing."""
    shm = Path("/dev/shm")
    parent = parent or (shm if os.access(shm, os.W_OK | os.X_OK) else Path(tempfile.gettempdir()))
    for old in parent.glob(f"{METRICS_PREFIX}*"):
        if _owner_gone(old):
            shutil.rmtree(old, ignore_errors=True)
    made = Path(tempfile.mkdtemp(prefix=METRICS_PREFIX, dir=parent))
    lock = open(made / OWNER_LOCK, "ab")  # held open for the process's life: closed, the lock goes
    fcntl.flock(lock, fcntl.LOCK_EX)
    _held.append(lock)
    atexit.register(shutil.rmtree, made, True)
    return made


def _owner_gone(folder: Path) -> bool:
    """Whether the service that made `folder` is gone: its lock can be taken. One without a lock (being
    made this moment, or an older version's) is left alone."""
    try:
        with open(folder / OWNER_LOCK, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # no lock file, or held: its service runs
        return False
    return True


def main(argv: list[str]) -> int:
    """The plugin's entry: `autotuner serve ARGS`."""
    try:
        # without standalone mode click returns a command's typer.Exit code (bad settings: 2) instead
        # of raising it; dropped, a service that refused to start exited 0
        code = app(args=argv, prog_name="autotuner serve", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # click's usage errors, printed as click would
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        raise
    return code if isinstance(code, int) else 0
