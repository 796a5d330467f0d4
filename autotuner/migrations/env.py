"""Alembic environment: our tables only (`at_*`), versioned in `at_alembic_version`."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from autotuner.store.db import VERSION_TABLE, make_engine
from autotuner.store.models import Base

config = context.config


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    # Optuna's tables live in the same database; autogenerate must not try to drop them.
    return type_ != "table" or bool(name and name.startswith("at_"))


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = config.attributes.get("engine") or make_engine(_url())
        with engine.begin() as conn:
            _run(conn)
    else:
        _run(connection)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("alembic: neither a connection, an engine nor sqlalchemy.url was given")
    return url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        render_as_batch=True,  # SQLite can only ALTER by copying the table
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
