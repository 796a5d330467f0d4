"""Engine creation and schema migrations.

SQLite by default (a file, WAL so readers never block the writer, a busy timeout so two writers
wait instead of failing), any SQLAlchemy URL (PostgreSQL) for a multi-replica deployment.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
VERSION_TABLE = "at_alembic_version"  # Optuna owns `alembic_version` in the same database
SQLITE_BUSY_TIMEOUT_S = 30


class SchemaError(RuntimeError):
    """The store's schema cannot be brought to what this code knows: a newer version wrote it, or its
    schema lock cannot be taken. The message says which, and what to do."""


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def shown_url(url: str) -> str:
    """A database URL fit for a log or a message: its password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite store that is not there (opening it would create an empty one), else None."""
    parsed = make_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    return path if path and path != ":memory:" and not Path(path).expanduser().is_file() else None


def stored_json(value: Any) -> str:
    """A JSON column's value as every backend takes it: NaN and the infinities, which Python writes and
    PostgreSQL refuses (`Token "NaN" is invalid`, failing the whole write), as null. A trial may write
    them in any figure the tuner does not check (a p90 of no samples)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(finite_or_null(value))


def finite_or_null(value: Any) -> Any:
    """`value` with NaN and the infinities as null (None): no JSON number says them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def foreign_sqlite_tables(url: str) -> list[str]:
    """The tables of a SQLite file that holds some but none of ours ([] when it is ours, empty or not
    SQLite): opening it as a store would add ours to another program's database. Read only."""
    parsed = make_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or not Path(path).expanduser().is_file():
        return []
    try:
        with closing(
            sqlite3.connect(f"{Path(path).expanduser().absolute().as_uri()}?mode=ro", uri=True)
        ) as conn:
            names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error:
        return []  # not SQLite: opening it says so
    ours = any(name.startswith("at_") or name == VERSION_TABLE for name in names)
    return [] if ours or not names else sorted(names)


def _enter_wal(cur: Any) -> None:
    """Switch the file to WAL, retrying while it is locked.

    SQLite answers `database is locked` at once, without its busy handler, when several processes
    switch a fresh file together (20 of 320 openers of 40 fresh files, 8 at a time, failed here).
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def make_engine(url: str, **kwargs: Any) -> Engine:
    kwargs.setdefault("json_serializer", stored_json)
    if is_sqlite(url):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
            **kwargs,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            # A byte that is not UTF-8 (a row edited by hand) read as U+FFFD: sqlite3 raised for the whole
            # query, and one such row stopped serving every config (its key alone is refused, as a bad name)
            dbapi_conn.text_factory = _lenient_text
            cur = dbapi_conn.cursor()
            _enter_wal(cur)
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    kwargs["connect_args"] = {**libpq_deadlines(url), **kwargs.get("connect_args", {})}
    return create_engine(url, pool_pre_ping=True, **kwargs)


# libpq waits on a server it cannot reach as long as the kernel does: a connect to a dropped host about
# 2 min, a query on a connection whose peer vanished (a partition, a failed-over host) about 15 min,
# holding a request's thread or the scheduler all along. These bound both; the operator's own win: the
# URL's, PGCONNECT_TIMEOUT, and a service file's (`?service=` or PGSERVICE: it may set any of them).
LIBPQ_DEADLINES = {"connect_timeout": 10, "tcp_user_timeout": 30_000, "keepalives": 1, "keepalives_idle": 30,
                   "keepalives_interval": 10, "keepalives_count": 3}  # fmt: skip


def libpq_deadlines(url: str) -> dict[str, int]:
    """LIBPQ_DEADLINES less what the URL sets, as connect_args for any engine on `url` (make_engine's,
    Optuna's record, the schema lock's); {} where the driver is not libpq's."""
    parsed = make_url(url)
    if parsed.get_driver_name() not in ("psycopg", "psycopg2"):
        return {}
    given = parsed.query
    if "service" in given or os.environ.get("PGSERVICE"):
        return {}
    env = {"connect_timeout"} if os.environ.get("PGCONNECT_TIMEOUT") else set()
    return {k: v for k, v in LIBPQ_DEADLINES.items() if k not in given and k not in env}


def alembic_config(engine: Engine) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    # Alembic's options go through configparser, whose interpolation reads '%': a percent-encoded
    # password (p%40ss) or a path with a '%' made every store command a traceback.
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the latest revision (idempotent; safe to call at every start).

    Processes starting at once take turns: on PostgreSQL an advisory lock, on SQLite a lock file
    beside the database (without it, two processes creating the tables of a fresh file failed with
    `table at_clusters already exists`). A store already at the latest revision is only read: no lock,
    nothing written (a store on a read-only mount opens). One a newer version wrote: SchemaError,
    before anything is done to it.
    """
    cfg = alembic_config(engine)
    scripts = ScriptDirectory.from_config(cfg)
    with engine.connect() as conn:
        if _current_revision(conn, scripts) == scripts.get_current_head():
            return
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(727001)"))
            try:
                _current_revision(conn, scripts)  # again, under the lock: another process may have moved it
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
            except BaseException:
                # A failed step aborted the transaction: the unlock would fail ("current transaction is
                # aborted") and hide why. The session-level lock outlives the rollback.
                conn.rollback()
                raise
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(727001)"))
                conn.commit()
        return
    url = engine.url.render_as_string(hide_password=False)
    with schema_lock(url), _ddl_engine(engine) as ddl, ddl.begin() as conn:
        _current_revision(conn, scripts)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def in_memory(url: Any) -> bool:
    """A SQLite URL (parsed) whose store lives in this process only (sqlite://, :memory:, mode=memory)."""
    if url.get_backend_name() != "sqlite":
        return False
    database = url.database or ""
    mode = url.query.get("mode")
    return (database in ("", ":memory:") or database.startswith("file::memory:")
            or "mode=memory" in database or mode == "memory" or (isinstance(mode, tuple) and "memory" in mode))  # fmt: skip


@contextmanager
def _ddl_engine(engine: Engine) -> Iterator[Engine]:
    """For a SQLite file, an engine whose transactions hold DDL too: pysqlite begins a transaction
    only before INSERT, UPDATE or DELETE, so each CREATE or ALTER committed on its own, and a migration
    cut short (killed, a full disk) left tables without their revision: every later start failed on
    "table at_clusters already exists" or "duplicate column name". Here BEGIN is said by us (SQLAlchemy's
    recipe for pysqlite): the whole upgrade commits, or none of it. In memory, the engine itself (a
    second one would open another database)."""
    if in_memory(engine.url):
        yield engine
        return
    ddl = make_engine(engine.url.render_as_string(hide_password=False), poolclass=NullPool)

    @event.listens_for(ddl, "connect")
    def _no_implicit_begin(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(ddl, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now: a migration writes

    try:
        yield ddl
    finally:
        ddl.dispose()


def _current_revision(conn: Connection, scripts: ScriptDirectory) -> str | None:
    """The store's schema revision (None: no schema yet); one this code does not know is a SchemaError
    (Alembic's own error is a traceback about a revision it cannot locate)."""
    current = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_heads()
    known = {script.revision for script in scripts.walk_revisions()}
    if newer := sorted(set(current) - known):
        raise SchemaError(
            f"this store was written by a newer nccl-autotuner (schema {', '.join(newer)}; this version knows "
            f"up to {scripts.get_current_head()}): upgrade nccl-autotuner"
        )
    return current[0] if len(current) == 1 else None


@contextmanager
def schema_lock(url: str, key: int = 727002) -> Iterator[None]:
    """Held by one process at a time per database, across processes and hosts that share it: around
    creating or migrating a schema (ours, Optuna's), which neither SQLite nor Alembic makes safe
    against a concurrent creator. SQLite: an flock on `<database>.schema-lock`; PostgreSQL: an
    advisory lock (`key`) on a connection of its own."""
    if is_sqlite(url):
        database = make_url(url).database
        if not database or database == ":memory:":
            yield
            return
        path = Path(database).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(f"{path}.schema-lock", "a+b")
        except OSError as exc:  # a read-only mount: said, not a traceback
            raise SchemaError(
                f"cannot take the schema lock {path}.schema-lock ({exc.strerror}): creating or migrating the "
                "store's schema needs it, so its directory must be writable"
            ) from exc
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return
    if make_url(url).get_backend_name() != "postgresql":
        yield
        return
    engine = create_engine(url, poolclass=NullPool, connect_args=libpq_deadlines(url))
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                conn.commit()
    finally:
        engine.dispose()
