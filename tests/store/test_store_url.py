"""Store URLs as operators write them, and what a failed migration says on PostgreSQL. Found by the CLI
and store reviews."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from autotuner.store import Store
from tests.helpers import fresh_postgres_database, skip_or_fail


def test_a_percent_in_the_url_opens_the_store(tmp_path):
    # A percent-encoded PostgreSQL password (p%40ss) or a path with a '%': Alembic's configparser read
    # it as interpolation, and every store command (and `autotuner serve`) was a traceback.
    (tmp_path / "100%").mkdir()
    url = f"sqlite:///{tmp_path}/100%25/at.db"
    store = Store(url)
    try:
        assert store.store_id()
    finally:
        store.dispose()
    cli = subprocess.run([sys.executable, "-m", "autotuner", "studies", "--db", url], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "100"})  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "Traceback" not in cli.stderr


@pytest.mark.postgres
def test_a_failed_migration_on_postgresql_says_why():
    url = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not url:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    db_url = fresh_postgres_database(url)
    Store(db_url).dispose()
    # A store that says it is one revision behind while it has that revision's column already: the
    # upgrade's ALTER fails, and its error must be the one shown (the unlock after it hid it).
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE at_alembic_version SET version_num = '0012'"))
    engine.dispose()
    with pytest.raises(Exception, match="workload_spec") as failed:
        Store(db_url)
    assert "current transaction is aborted" not in str(failed.value)


@pytest.mark.postgres
def test_a_postgresql_connection_has_deadlines_unless_the_url_sets_its_own():
    """libpq waited on an unreachable server as long as the kernel does (a connect ~2 min, a query on a
    connection whose peer vanished ~15 min), holding a request's thread or the scheduler all along."""
    from autotuner.store.db import LIBPQ_DEADLINES, make_engine

    url = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not url:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    for query, connect_timeout in (("", "10"), ("?connect_timeout=3", "3")):
        engine = make_engine(url + query)
        try:
            with engine.connect() as conn:
                given = conn.connection.driver_connection.info.get_parameters()  # what libpq was handed
        finally:
            engine.dispose()
        assert given["connect_timeout"] == connect_timeout
        assert {k: given[k] for k in LIBPQ_DEADLINES if k != "connect_timeout"} == {
            k: str(v) for k, v in LIBPQ_DEADLINES.items() if k != "connect_timeout"
        }


@pytest.mark.postgres
def test_the_optuna_record_and_the_schema_lock_connect_with_the_deadlines_too():
    """Their engines are not make_engine's: the search writes Optuna's record at every launch (the
    scheduler's thread), the dashboard reads it, and the schema lock is held through a migration. Each
    waited on a vanished server as long as the kernel does."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from autotuner.store.db import LIBPQ_DEADLINES, schema_lock
    from autotuner.tuning import optuna_storage

    url = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not url:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    handed: list[dict[str, str]] = []

    def seen(dbapi_conn, _record):
        handed.append(dbapi_conn.info.get_parameters())

    event.listen(Engine, "connect", seen)
    try:
        storage = optuna_storage(url)
        try:
            with storage.engine.connect():
                pass
        finally:
            storage.engine.dispose()
        with schema_lock(url):
            pass
    finally:
        event.remove(Engine, "connect", seen)
    assert handed
    for given in handed:
        assert {k: given.get(k) for k in LIBPQ_DEADLINES} == {k: str(v) for k, v in LIBPQ_DEADLINES.items()}


def test_the_deadlines_leave_what_the_operator_set_to_libpq(monkeypatch):
    """PGCONNECT_TIMEOUT and a service file (`?service=`, PGSERVICE) are libpq's own settings: explicit
    connect_args overrode them without a word."""
    from autotuner.store.db import LIBPQ_DEADLINES, libpq_deadlines

    url = "postgresql+psycopg://at@db.example/autotuner"
    for name in ("PGCONNECT_TIMEOUT", "PGSERVICE"):
        monkeypatch.delenv(name, raising=False)
    assert libpq_deadlines(url) == LIBPQ_DEADLINES
    assert libpq_deadlines("sqlite:///at.db") == {}
    assert libpq_deadlines(url + "?service=autotuner") == {}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "3")
    assert libpq_deadlines(url) == {k: v for k, v in LIBPQ_DEADLINES.items() if k != "connect_timeout"}
    monkeypatch.setenv("PGSERVICE", "autotuner")
    assert libpq_deadlines(url) == {}
