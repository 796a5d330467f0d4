"""Published configs: versions, what each (cluster, workload, nodes) serves, pin and rollback,
and the generation number every change to what is served bumps."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import func, insert, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from autotuner.names import check_name
from autotuner.store.base import NotFound, ServedChanged
from autotuner.store.models import (
    Cluster,
    Config,
    ConfigGeneration,
    ConfigValidation,
    ConfigVersionMark,
    Workload,
)
from autotuner.store.studies import StudyRecords, _matched

log = logging.getLogger("autotuner.store")

MAX_VERSION = 2**31 - 1  # versions are an INTEGER column (32 bits on PostgreSQL)


class ConfigRecords(StudyRecords):
    # ------------------------------------------------------------------ configs

    def publish_config(
        self, *, cluster: str, workload: str, nodes: int, replaces: int | None = None, **fields: Any
    ) -> Config:
        """A new version for (cluster, workload, nodes). Names that could not be served (a row an
        older version stored) are refused here: BadName. `replaces`: the id of the config that must
        still be what the key serves (its latest version, not pinned), checked in the publishing
        transaction; when it is not (published over, or pinned, meanwhile), nothing is published:
        NotServed."""
        check_name("cluster", cluster)
        check_name("workload", workload)
        cluster_row = self.cluster(cluster, create=True)
        workload_row = self.workload(workload)
        if workload_row is None:
            raise NotFound(f"workload {workload!r}")
        assert cluster_row is not None
        key = (
            Config.cluster_id == cluster_row.id,
            Config.workload_id == workload_row.id,
            Config.nodes == nodes,
        )
        with self.session() as s:
            self._bump_generation(s)  # first: writers of configs take turns, so the max read next is the last
            if replaces is not None:
                _still_served(s, key, replaces)
            version = _next_version(s, key, (cluster_row.name, workload_row.name, nodes))
            config = Config(cluster_id=cluster_row.id, workload_id=workload_row.id, nodes=nodes,
                            version=version, fingerprint=cluster_row.fingerprint, **fields)  # fmt: skip
            s.add(config)
            s.flush()
            return s.scalars(select(Config).where(Config.id == config.id)).one()

    def configs_of_study(self, study_id: int) -> list[Config]:
        """The versions a study published (and its re-validations), oldest first."""
        with self.session() as s:
            return list(
                s.scalars(select(Config).where(Config.study_id == study_id).order_by(Config.id)).unique()
            )

    def config_history(
        self, cluster: str | None = None, workload: str | None = None, nodes: int | None = None,
        *, limit: int | None = None, offset: int = 0,
    ) -> list[Config]:  # fmt: skip
        """Published versions, by (cluster, workload, nodes) and newest first; a page of them with `limit`."""
        with self.session() as s:
            return list(
                s.scalars(_history(Config, cluster, workload, nodes).offset(offset).limit(limit)).unique()
            )

    def config_history_ids(
        self, cluster: str, workload: str, nodes: int | None, *, limit: int | None = None, offset: int = 0
    ) -> list[int]:
        """The ids of `config_history`'s page, without loading the rows (one may not load)."""
        with self.session() as s:
            return list(s.scalars(_history(Config.id, cluster, workload, nodes).offset(offset).limit(limit)))

    def config_versions(self, cluster: str, workload: str, nodes: int | None = None) -> dict[int, int | None]:
        """{id: version} of (cluster, workload)'s configs, without loading their rows; None for a version
        stored as no whole number (SQLite keeps a hand's 'x'): the others are still listed by it."""
        with self.session() as s:
            rows = s.execute(select(Config.id, Config.version).where(*_of(cluster, workload, nodes)))
            return {int(i): v if isinstance(v, int) and not isinstance(v, bool) else None for i, v in rows}

    @staticmethod
    def _head_ids(*filters: Any) -> Any:
        """Ids of the served version of each (cluster, workload, nodes): pinned, else the latest."""
        rank = (
            func.row_number()
            .over(
                partition_by=(Config.cluster_id, Config.workload_id, Config.nodes),
                order_by=(Config.pinned.desc(), Config.version.desc()),
            )
            .label("rank")
        )
        ranked = select(Config.id, rank).join(Config.cluster).join(Config.workload).where(*filters).subquery()
        return select(ranked.c.id).where(ranked.c.rank == 1)

    def served_configs(self, cluster: str | None = None, workload: str | None = None) -> list[Config]:
        """The config each (cluster, workload, nodes) serves: its pinned version, else its latest."""
        filters = []
        if cluster is not None:
            filters.append(Cluster.name == cluster)
        if workload is not None:
            filters.append(Workload.name == workload)
        with self.session() as s:
            return list(s.scalars(select(Config).where(Config.id.in_(self._head_ids(*filters)))).unique())

    @staticmethod
    def _bump_generation(s: Session) -> None:
        """Count a change to what is served, in the change's transaction (on PostgreSQL the row lock
        also orders concurrent changes: generations are never reused or skipped by a commit). Done
        first, it makes the change's writers take turns: PostgreSQL holds the row, SQLite its one write
        lock, until the commit (a read first takes no lock: two publishes read one max version, two
        pins each kept their own version pinned). A row a hand deleted is made again first, in the same
        transaction (atomically: two writers finding it gone make one), then counted: it holds a stamp
        no service loaded, so every cache takes the bump for a change whatever its number."""
        bump = (
            update(ConfigGeneration)
            .where(ConfigGeneration.id == 1)
            .values(generation=ConfigGeneration.generation + 1, stamp=secrets.token_hex(8))
        )
        if _matched(s.execute(bump)):
            return
        _make_generation_row(s)
        s.execute(bump)

    def config_generation(self) -> int:
        """How many changes to what is served were committed: a primary-key read, cheap to poll."""
        return self.config_generation_stamp()[0]

    def config_generation_stamp(self) -> tuple[int, str | None]:
        """The generation and the stamp its last bump drew (two states of one generation differ in
        it: a store restored from an older dump that took as many changes as it lost)."""
        query = select(ConfigGeneration.generation, ConfigGeneration.stamp).where(ConfigGeneration.id == 1)
        with self.session() as s:
            row = s.execute(query).first()
        if row is None and self._repair_generation():
            with self.session() as s:
                row = s.execute(query).first()
        return (int(row[0] or 0), row[1]) if row else (0, None)

    def _repair_generation(self) -> bool:
        """Make the generation's row again if a hand deleted it (at 0, with a stamp no service loaded),
        in a transaction of its own; False if it cannot be written (a read-only store: then it is read
        as generation 0 until a change makes it)."""
        try:
            with self.session() as s:
                _make_generation_row(s)
        except SQLAlchemyError as exc:
            said = getattr(self, "_said_unrepaired", False)  # once, not at every poll of a cache
            self._said_unrepaired = True
            (log.debug if said else log.warning)(
                "the config generation's row is gone and could not be made again (%s): read as 0 until a "
                "change makes it", type(exc).__name__, exc_info=not said,
            )  # fmt: skip
            return False
        log.warning("the config generation's row was gone (deleted by hand?): made again")
        return True

    def served_heads(self) -> ServedHeads:
        """The generation, its stamp, and (id, pinned, last finished re-validation id or 0, stamp) of
        every served config at that generation, without loading rows: what a cache diffs against.
        A head's stamp (when the row was made, and when its last re-validation finished) tells a row
        from another that a restored store handed the same id to, however far its generation climbed
        since. One statement, so one snapshot on SQLite and PostgreSQL alike (two statements could
        straddle a commit and label a state with the wrong generation). The heads do not hang on the
        generation's row: one a hand deleted is made again and read again (else read as 0)."""
        query = self._heads_query()
        with self.session() as s:
            rows = s.execute(query).all()
        if rows[0][0] is None and self._repair_generation():
            with self.session() as s:
                rows = s.execute(query).all()
        generation, stamp = (int(rows[0][0] or 0), rows[0][1])
        heads = [
            (i, bool(p), int(v or 0), f"{_instant(made)}|{_instant(at)}")
            for _, _, i, p, v, made, at in rows
            if i is not None
        ]
        return ServedHeads(generation, stamp, heads)

    def _heads_query(self) -> Any:
        """`served_heads`' statement: one row at least (a constant row, joined to the generation's row
        and to every served config), whether or not the generation's row is there."""
        finished = ConfigValidation.finished_at.is_not(None)
        checked, checked_at = (
            select(func.max(column)).where(ConfigValidation.config_id == Config.id, finished)
            .correlate(Config).scalar_subquery()
            for column in (ConfigValidation.id, ConfigValidation.finished_at)
        )  # fmt: skip
        one = select(literal(1).label("one")).subquery()
        return (
            select(ConfigGeneration.generation, ConfigGeneration.stamp, Config.id, Config.pinned, checked,
                   Config.created_at, checked_at)
            .select_from(one)
            .outerjoin(ConfigGeneration, ConfigGeneration.id == 1)
            .outerjoin(Config, Config.id.in_(self._head_ids()))
        )  # fmt: skip

    def config_labels(self, ids: Sequence[int]) -> list[tuple[int, str, str, int, int, Any]]:
        """(id, cluster, workload, nodes, version, created_at) of configs, without reading their
        JSON columns: what names a row whose data cannot be loaded."""
        query = (
            select(Config.id, Cluster.name, Workload.name, Config.nodes, Config.version, Config.created_at)
            .join(Config.cluster)
            .join(Config.workload)
            .where(Config.id.in_(list(ids)))
        )
        with self.session() as s:
            return [tuple(row) for row in s.execute(query)]  # type: ignore[misc]

    def configs_by_id(self, ids: Sequence[int]) -> list[Config]:
        with self.session() as s:
            return list(s.scalars(select(Config).where(Config.id.in_(list(ids)))).unique())

    def served_config(self, cluster: str, workload: str, nodes: int | None = None) -> Config | None:
        return pick_served(self.served_configs(cluster, workload), nodes)

    def pin_config(
        self, cluster: str, workload: str, nodes: int, version: int | None, *, served_now: int | None = None
    ) -> Config | None:
        """Serve `version` regardless of newer publishes (None: unpin, serve the latest again); returns
        what is served then, read in the change's own transaction. `served_now`: only if that version is
        still the one served (ServedChanged otherwise, nothing changed): a change decided on what was
        served, such as a rollback, is not applied over another made meanwhile (three rollbacks at once
        each pinned the version below the same one, and one answered a version no longer served).
        Reads and changes by key, whatever the number of versions."""
        key = _of(cluster, workload, nodes)
        with self.session() as s:
            self._bump_generation(s)  # first: two pins at once must not leave two versions pinned
            if not s.scalar(select(func.count()).select_from(Config).where(*key)):
                raise NotFound(f"no config for {cluster}/{workload} {_at(nodes)}")
            if served_now is not None and (now := self._served_in(s, cluster, workload, nodes)) != served_now:
                raise ServedChanged(f"{cluster}/{workload} {_at(nodes)}: the served version changed meanwhile "
                                    f"(v{served_now} -> v{now}); nothing changed, ask again")  # fmt: skip
            if version is not None and (
                not 1 <= version <= MAX_VERSION  # a bigger number is no version, not a driver error
                or s.scalar(select(Config.id).where(*key, Config.version == version)) is None
            ):
                raise NotFound(f"{cluster}/{workload} {_at(nodes)} has no version {version}")
            # Only the rows whose flag changes (the pinned one, the one to pin): rows carry their evidence.
            # This session holds no Config object, so there is nothing to synchronize (and no RETURNING).
            changes = (
                Config.pinned.is_(True)
                if version is None
                else or_(Config.pinned.is_(True), Config.version == version)
            )
            s.execute(update(Config).where(*key, changes)
                      .values(pinned=Config.version == version if version is not None else False)
                      .execution_options(synchronize_session=False))  # fmt: skip
            return pick_served(self._heads_in(s, cluster, workload), nodes)

    def _served_in(self, s: Session, cluster: str, workload: str, nodes: int) -> int | None:
        """The version served at exactly `nodes`, read in session `s`."""
        return next((c.version for c in self._heads_in(s, cluster, workload) if c.nodes == nodes), None)

    def _heads_in(self, s: Session, cluster: str, workload: str) -> list[Config]:
        """What each node count of (cluster, workload) serves, read in session `s`."""
        heads = select(Config).where(
            Config.id.in_(self._head_ids(Cluster.name == cluster, Workload.name == workload))
        )
        return list(s.scalars(heads).unique())

    def config_row(self, cluster: str, workload: str, nodes: int, version: int) -> Config | None:
        """One version of a key (None: no such version)."""
        if not 1 <= version <= MAX_VERSION:
            return None
        with self.session() as s:
            return s.scalars(
                select(Config).where(*_of(cluster, workload, nodes), Config.version == version)
            ).first()

    def rollback_config(self, cluster: str, workload: str, nodes: int) -> Config:
        """Pin the version just below the one served now."""
        served, older = self.rollback_target(cluster, workload, nodes)
        result = self.pin_config(cluster, workload, nodes, older, served_now=served)
        assert result is not None
        return result

    def rollback_target(self, cluster: str, workload: str, nodes: int) -> tuple[int, int]:
        """The version served now and the one just below it (NotFound: none)."""
        served = self.served_config(cluster, workload, nodes)
        if served is None or served.nodes != nodes:
            raise NotFound(f"no config for {cluster}/{workload} {_at(nodes)}")
        with self.session() as s:
            older = s.scalar(
                select(func.max(Config.version)).where(
                    *_of(cluster, workload, nodes), Config.version < served.version
                )
            )
        if older is None:
            raise NotFound(f"{cluster}/{workload} {_at(nodes)}: version {served.version} is the oldest")
        return served.version, int(older)


def _next_version(s: Session, key: tuple[Any, ...], names: tuple[str, str, int]) -> int:
    """The next version of `key` (`names`: its cluster, workload and node count), its mark raised to
    it: above every version the key ever had (`ConfigVersionMark`: one deleted, by hand or with its
    cluster's row, is never handed out again), and above every row it has (one an older version of
    this code or a hand wrote, which raised no mark). Called after the generation bump: writers of
    configs take turns, so the mark and the rows read are the last."""
    mark = s.get(ConfigVersionMark, names)
    latest = s.scalar(select(func.max(Config.version)).where(*key)) or 0
    version = max(int(latest), mark.version if mark is not None else 0) + 1
    if mark is None:
        cluster, workload, nodes = names
        s.add(ConfigVersionMark(cluster=cluster, workload=workload, nodes=nodes, version=version))
    else:
        mark.version = version
    s.flush()  # before the row: its trigger (0014) raises the mark too, for writers other than this
    return version


def _make_generation_row(s: Session) -> None:
    """The generation's row at 0, with a stamp of its own, unless it is there: one statement that
    two sessions may run at once (PostgreSQL makes the second wait for the first's commit, then do
    nothing; SQLite lets one writer at a time)."""
    values = {"id": 1, "generation": 0, "stamp": secrets.token_hex(8)}
    dialect = s.get_bind().dialect.name
    # each dialect's insert spelled out: their union has no on_conflict_do_nothing to the type checker
    if dialect == "postgresql":
        s.execute(
            postgresql.insert(ConfigGeneration).values(values).on_conflict_do_nothing(index_elements=["id"])
        )
        return
    if dialect == "sqlite":
        s.execute(
            sqlite.insert(ConfigGeneration).values(values).on_conflict_do_nothing(index_elements=["id"])
        )
        return
    gone = ~select(ConfigGeneration.id).where(ConfigGeneration.id == 1).exists()
    s.execute(insert(ConfigGeneration).from_select(
        list(values), select(*(literal(v) for v in values.values())).where(gone)))  # fmt: skip


class NotServed(LookupError):
    """The config a publish was to replace is no longer the one its key serves: nothing published."""


def _still_served(s: Session, key: tuple[Any, ...], config_id: int) -> None:
    """NotServed unless `config_id` is what `key` serves, unpinned (`_head_ids`' order: the pinned
    version, else the latest); read after the generation bump, so no writer of configs runs between
    this and the caller's publish."""
    head = s.execute(
        select(Config.id, Config.version, Config.pinned)
        .where(*key)
        .order_by(Config.pinned.desc(), Config.version.desc())
        .limit(1)
    ).first()
    mine = s.scalar(select(Config.version).where(Config.id == config_id))
    name = f"v{mine}" if mine is not None else f"config {config_id}"
    if head is None or head.id != config_id:
        raise NotServed(f"{name} is no longer the served version")
    if head.pinned:
        raise NotServed(f"{name} is pinned by an operator")


def _history(what: Any, cluster: str | None, workload: str | None, nodes: int | None) -> Any:
    """Versions by (cluster, workload, nodes), newest first."""
    query = select(what).join(Config.cluster).join(Config.workload).where(*_of(cluster, workload, nodes))
    return query.order_by(Cluster.name, Workload.name, Config.nodes, Config.version.desc())


def _of(cluster: str | None, workload: str | None, nodes: int | None) -> list[Any]:
    """The WHERE of the configs of a cluster, workload and node count (None: any), names resolved
    inside the statement: no join needed, and a key's rows are changed in one UPDATE."""
    where: list[Any] = []
    if cluster is not None:
        where.append(Config.cluster_id == select(Cluster.id).where(Cluster.name == cluster).scalar_subquery())
    if workload is not None:
        where.append(
            Config.workload_id == select(Workload.id).where(Workload.name == workload).scalar_subquery()
        )
    if nodes is not None:
        where.append(Config.nodes == nodes)
    return where


def pick_served(heads: Sequence[Config], nodes: int | None) -> Config | None:
    """Exact node count if tuned, else the nearest (ties: fewer nodes); no count: the newest."""
    if not heads:
        return None
    if nodes is None:
        return max(heads, key=lambda c: (c.created_at, c.id))
    return min(heads, key=lambda c: (abs(c.nodes - nodes), c.nodes))


def _at(nodes: int) -> str:
    return f"at {nodes} node{'' if nodes == 1 else 's'}"


class ServedHeads(NamedTuple):
    generation: int
    stamp: str | None  # drawn at the generation's bump
    heads: list[tuple[int, bool, int, str]]  # (id, pinned, last re-validation id or 0, stamp)


def _instant(at: datetime | None) -> str:
    """A stored time as one string in UTC, whichever way the backend hands it back ("" for none)."""
    if at is None:
        return ""
    return f"{at.astimezone(UTC) if at.tzinfo else at:%Y-%m-%dT%H:%M:%S.%f}"
