"""A schema migration of a SQLite store that is cut short (the process killed, a full disk) leaves the
store as it was. Each CREATE or ALTER committed on its own (pysqlite begins no transaction before DDL),
so a tuner killed while it made a fresh store's tables left some of them and no revision: every later
start failed with "table at_clusters already exists"; one killed while it upgraded an old store, with
"duplicate column name". A durability review found both with kill -9."""

from __future__ import annotations

import gzip
import shutil
import signal
import subprocess
import sys

import pytest
import sqlalchemy as sa

from autotuner.store import Store
from tests.store.test_upgrade_from_old_store import OLD_STORE

# Killed (SIGKILL) right after the Nth statement that changes the schema has run.
KILLER = """
import os, signal, sys
from sqlalchemy import Engine, event
from autotuner.store import Store

n = int(sys.argv[2])
seen = 0

@event.listens_for(Engine, "after_cursor_execute")
def _kill(conn, cursor, statement, *args):
    global seen
    if statement.lstrip().upper().startswith(("CREATE", "ALTER", "DROP")):
        seen += 1
        if seen == n:
            os.kill(os.getpid(), signal.SIGKILL)

Store(sys.argv[1])
"""


def _killed_while_migrating(url: str, after: int) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLER, url, str(after)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("after", [3, 12])
def test_a_fresh_store_killed_while_its_tables_are_made_opens_next_time(tmp_path, after):
    url = f"sqlite:///{tmp_path / 'at.db'}"
    _killed_while_migrating(url, after)
    tables = sa.inspect(sa.create_engine(url)).get_table_names()
    assert not [t for t in tables if t.startswith("at_")], tables  # none kept: the upgrade is one transaction
    store = Store(url)  # "table at_clusters already exists" before
    store.upsert_workload("w", {})
    assert store.workload("w") is not None
    store.dispose()


def test_an_old_store_killed_while_it_is_upgraded_is_upgraded_next_time(tmp_path):
    path = tmp_path / "old.db"
    with gzip.open(OLD_STORE) as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    url = f"sqlite:///{path}"
    with sa.create_engine(url).connect() as conn:
        before = conn.execute(sa.text("SELECT version_num FROM at_alembic_version")).scalar()
    _killed_while_migrating(url, 1)  # after its first ALTER: "duplicate column name" before
    with sa.create_engine(url).connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM at_alembic_version")).scalar() == before
    store = Store(url)
    assert store.studies()  # what the old store held, readable
    store.dispose()


def test_a_named_in_memory_store_is_migrated_on_its_own_engine(tmp_path):
    """A second engine on `file:x?mode=memory&cache=shared` opens the same database only while another
    connection keeps it: the check read str() of the query ({'mode': 'memory', ...}) and never matched."""
    from sqlalchemy.engine import make_url

    from autotuner.store.db import in_memory

    assert in_memory(make_url("sqlite:///file:x?mode=memory&cache=shared&uri=true"))
    assert in_memory(make_url("sqlite://"))
    assert not in_memory(make_url(f"sqlite:///{tmp_path / 'at.db'}"))
    assert not in_memory(make_url("postgresql+psycopg://u@h/db"))
