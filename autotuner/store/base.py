"""The store's core: the engine, one short transaction per call, and the row helpers the table
families share. Every read and write of our tables goes through a `Store` (autotuner.store.repo)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from autotuner.store.db import make_engine, migrate
from autotuner.store.models import StoreIdentity


def env_hash(env: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()


class NotFound(LookupError):
    pass


class ServedChanged(RuntimeError):
    """What a key serves changed since a change to it was decided (another writer's, meanwhile)."""


class NameTaken(ValueError):
    """A row of that unique name exists (created by another process a moment ago, perhaps)."""


class StoreBase:
    def __init__(self, url: str, *, migrate_schema: bool = True) -> None:
        self.url = url
        self.engine = make_engine(url)
        if migrate_schema:
            try:
                migrate(self.engine)
            except BaseException:  # a store this code cannot use (newer, not a database): no pool left open
                self.engine.dispose()
                raise
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """Commit on success, roll back on error, always close."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()

    def store_id(self) -> str | None:
        """The store's own id, made with it (one database has many URLs: a host name, its address);
        None if a hand removed it."""
        with self.session() as s:
            row = s.get(StoreIdentity, 1)
            return None if row is None else row.uuid

    def _update(self, model: type[Any], row_id: int, fields: dict[str, Any]) -> Any:
        """Set columns of one row by name; a name that is not a column is an error, not a no-op."""
        with self.session() as s:
            return set_columns(s, model, row_id, fields)


def set_columns(s: Session, model: type[Any], row_id: int, fields: dict[str, Any]) -> Any:
    """In session `s`, set columns of one row by name (TypeError for a name that is no column,
    NotFound for no such row)."""
    unknown = sorted(set(fields) - set(model.__table__.columns.keys()))
    if unknown:
        raise TypeError(f"{model.__name__} has no column {unknown[0]!r}")
    row = s.get(model, row_id)
    if row is None:
        raise NotFound(f"{model.__name__.lower()} {row_id}")
    for key, value in fields.items():
        setattr(row, key, value)
    return row
