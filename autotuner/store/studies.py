"""Clusters, workloads and studies, and the lease a study's runner holds.

A lease is written and judged by one clock, the database's: PostgreSQL's `statement_timestamp()`, SQLite's
`'now'` (every process on an SQLite file shares its host's clock). Judged by each replica's own clock, a
replica ahead by more than the lease took a live study (two runners on one study), and one ahead that
died left its study waiting for as long as it was ahead."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, DateTime, Result, func, literal, or_, select, type_coerce, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from autotuner.names import check_name
from autotuner.store.base import NameTaken, StoreBase
from autotuner.store.models import Cluster, Launch, Study, UTCDateTime, Workload, utcnow
from autotuner.store.states import ACTIVE, TERMINAL, StudyState

# SQLite's 'now' as SQLAlchemy writes a date there (UTC, microseconds): text that compares in order with
# the dates already stored. SQLite's clock has milliseconds.
SQLITE_NOW = "%Y-%m-%d %H:%M:%f000"


class StudyRecords(StoreBase):
    # ------------------------------------------------------------------ clusters and workloads

    @staticmethod
    def _named(s: Session, model: type[Any], name: str, create: dict[str, Any] | None) -> Any:
        """The row called `name`; created from `create` if missing (and not created meanwhile by a
        concurrent process: the unique name decides, the loser reads the winner's row). A name is
        only ever created valid (autotuner.names): BadName otherwise."""
        row = s.scalar(select(model).where(model.name == name))
        if row is None and create is not None:
            row = model(name=check_name(model.__name__.lower(), name), **create)
            try:
                with s.begin_nested():
                    s.add(row)
            except IntegrityError:
                row = s.scalars(select(model).where(model.name == name)).one()
        return row

    def cluster(self, name: str, *, create: bool = False) -> Cluster | None:
        with self.session() as s:
            return self._named(s, Cluster, name, {"fingerprint": {}} if create else None)

    def update_fingerprint(self, cluster_id: int, fingerprint: dict[str, Any]) -> None:
        with self.session() as s:
            row = s.get(Cluster, cluster_id)
            if row is not None and row.fingerprint != fingerprint:
                row.fingerprint = fingerprint

    def clusters(self) -> list[Cluster]:
        with self.session() as s:
            return list(s.scalars(select(Cluster).order_by(Cluster.name)))

    def workload(self, name: str) -> Workload | None:
        with self.session() as s:
            return s.scalar(select(Workload).where(Workload.name == name))

    def upsert_workload(self, name: str, spec: dict[str, Any]) -> Workload:
        with self.session() as s:
            row = self._named(s, Workload, name, {"spec": spec})
            if row.spec != spec:
                row.spec = spec
            return row

    # ------------------------------------------------------------------ studies

    def create_study(
        self,
        *,
        name: str,
        cluster: str,
        workload_name: str,
        workload_spec: dict[str, Any],
        space: dict[str, Any],
        settings: dict[str, Any],
        state: str = StudyState.QUEUED,
        inert: dict[str, str] | None = None,
    ) -> Study:
        check_name("study", name)
        with self.session() as s:  # one transaction: a name taken leaves the workload as it was
            if s.scalar(select(Study.id).where(Study.name == name)) is not None:
                raise NameTaken(f"study {name!r} already exists")
            cluster_row = self._named(s, Cluster, cluster, {"fingerprint": {}})
            workload_row = self._named(s, Workload, workload_name, {"spec": workload_spec})
            if workload_row.spec != workload_spec:
                workload_row.spec = workload_spec
            study = Study(
                name=name,
                cluster_id=cluster_row.id,
                workload_id=workload_row.id,
                workload_spec=workload_spec,
                state=state,
                space=space,
                settings=settings,
                inert=inert,
            )
            try:
                with s.begin_nested():
                    s.add(study)
            except IntegrityError:  # only the name is unique: a concurrent create took it first
                raise NameTaken(f"study {name!r} already exists") from None
            return s.scalars(select(Study).where(Study.id == study.id)).one()

    def study(self, ref: int | str) -> Study | None:
        with self.session() as s:
            query = select(Study).where(Study.id == ref if isinstance(ref, int) else Study.name == ref)
            return s.scalar(query)

    def studies(
        self, *, states: Sequence[str] | None = None, limit: int = 100, offset: int = 0
    ) -> list[Study]:
        with self.session() as s:
            query = select(Study).order_by(Study.id.desc()).limit(limit).offset(offset)
            if states:
                query = query.where(Study.state.in_(states))
            return list(s.scalars(query))

    def count_studies(self, *, states: Sequence[str] | None = None) -> int:
        with self.session() as s:
            query = select(func.count(Study.id))
            if states:
                query = query.where(Study.state.in_(states))
            return int(s.scalar(query) or 0)

    def update_study(self, study_id: int, **fields: Any) -> Study:
        return self._update(Study, study_id, fields)

    def move_study(self, study_id: int, state: str, **fields: Any) -> Study | None:
        """Set the study's state (and `fields`) unless it has ended: None if it had (a cancel that
        came meanwhile stands; before, the runner's next state wrote over it). Atomic."""
        with self.session() as s:
            moved = s.execute(update(Study).where(Study.id == study_id, Study.state.not_in(TERMINAL))
                              .values(state=state, **fields))  # fmt: skip
            return s.get(Study, study_id) if _matched(moved) == 1 else None

    def _db_now(self, plus_s: float = 0.0) -> ColumnElement[Any]:
        """The database's clock, `plus_s` seconds on, as an SQL expression evaluated by the statement
        that uses it: how every replica writes and judges a lease, whatever its own clock says. A
        backend with no rule here (neither SQLite nor PostgreSQL) gets this process's clock."""
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            return func.strftime(SQLITE_NOW, "now", f"{plus_s:+.6f} seconds")
        if dialect == "postgresql":
            return func.statement_timestamp(type_=DateTime(timezone=True)) + timedelta(seconds=plus_s)
        return literal(utcnow() + timedelta(seconds=plus_s), Study.lease_expires_at.type)

    def now(self) -> datetime:
        """The database's clock, now (aware UTC): what a study's and a launch's time is written and judged
        by, as leases are. A replica whose clock is off by minutes would otherwise end a resumed study's
        search early (its time budget) or time a re-attached launch out."""
        with self.session() as s:
            now = s.scalar(select(type_coerce(self._db_now(), UTCDateTime())))
        assert now is not None  # the database's clock reads as a date
        return now

    def _lapsed(self) -> ColumnElement[bool]:
        """A lease nobody holds, or one that expired by the database's clock."""
        return or_(Study.owner.is_(None), Study.lease_expires_at < self._db_now())

    def _lease(self, lease_s: float) -> dict[str, Any]:
        """The columns a lease of `lease_s` seconds from now sets (by the database's clock)."""
        return {"lease_expires_at": self._db_now(lease_s), "heartbeat_at": self._db_now()}

    def acquire_study(self, study_id: int, owner: str, lease_s: float) -> bool:
        """Take (or renew) the lease on a study. Atomic: of two contenders exactly one wins, and a
        holder that stopped renewing (killed) loses it once the lease expires by the database's clock."""
        with self.session() as s:
            result = s.execute(
                update(Study)
                .where(Study.id == study_id)
                .where(or_(self._lapsed(), Study.owner == owner))
                .values(owner=owner, **self._lease(lease_s))
            )
            return _matched(result) == 1

    def renew_study(self, study_id: int, owner: str, lease_s: float) -> bool:
        """Renew a lease this owner holds (atomic). Unlike acquire_study, never takes a lease that is
        free or taken by another: a runner paused past its lease, whose successor finished the study and
        let it go, renewed it and carried on with a study that was done."""
        with self.session() as s:
            result = s.execute(
                update(Study).where(Study.id == study_id, Study.owner == owner).values(**self._lease(lease_s))
            )
            return _matched(result) == 1

    def take_over_study(self, study_id: int, dead_owner: str, owner: str, lease_s: float) -> bool:
        """Take a lease from a holder known to be dead (atomic: only if it still holds it)."""
        with self.session() as s:
            result = s.execute(
                update(Study)
                .where(Study.id == study_id, Study.owner == dead_owner)
                .values(owner=owner, **self._lease(lease_s))
            )
            return _matched(result) == 1

    def release_study(self, study_id: int, owner: str) -> None:
        with self.session() as s:
            s.execute(
                update(Study)
                .where(Study.id == study_id, Study.owner == owner)
                .values(owner=None, lease_expires_at=None)
            )

    def runnerless(self, study_ids: list[int]) -> set[int]:
        """Of these, the studies started (running or confirming) whose lease nobody holds now, by the
        database's clock: their runner stopped (interrupted, killed, its host gone) and nothing runs
        them until one resumes them (`autotuner tune --study`) or a scheduler takes them up."""
        if not study_ids:
            return set()
        started = (StudyState.RUNNING, StudyState.CONFIRMING)
        with self.session() as s:
            query = select(Study.id).where(Study.id.in_(study_ids), Study.state.in_(started), self._lapsed())
            return set(s.scalars(query))

    def claimable_studies(self) -> list[Study]:
        """Active studies whose lease is free or expired, by the database's clock (what a scheduler may
        pick up)."""
        with self.session() as s:
            query = select(Study).where(Study.state.in_(ACTIVE), self._lapsed()).order_by(Study.id)
            return list(s.scalars(query))

    def cancelled_with_live_launches(self) -> list[Study]:
        """Cancelled studies that still have a launch pending or running, whose lease is free or
        expired (by the database's clock): what a cancel made while no runner followed the study left
        (a queued Kubernetes Job could start hours later and hold GPUs). The queue stops those launches.
        (A re-validation's launches, of a done or a cancelled study, are its own to follow again.)"""
        live = select(Launch.id).where(Launch.study_id == Study.id, Launch.state.in_(("pending", "running")),
                                       Launch.kind != "revalidate")  # fmt: skip
        with self.session() as s:
            query = (
                select(Study)
                .where(Study.state == StudyState.CANCELLED, live.exists(), self._lapsed())
                .order_by(Study.id)
            )
            return list(s.scalars(query))


def _matched(result: Result[Any]) -> int:
    """The rows an UPDATE matched (Session.execute returns a CursorResult for one, typed as a Result)."""
    return cast(CursorResult[Any], result).rowcount
