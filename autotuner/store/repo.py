"""The store: every read and write of our tables goes through here, one short transaction each."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from autotuner.store.db import make_engine, migrate
from autotuner.store.models import (
    Candidate,
    Cluster,
    Config,
    ConfigGeneration,
    Launch,
    Quarantine,
    Study,
    Workload,
    utcnow,
)
from autotuner.store.states import ACTIVE, StudyState

CANDIDATE_SORT_KEYS = {
    "id": Candidate.id,
    "samples_per_s": Candidate.samples_per_s,
    "iter_ms": Candidate.iter_ms,
    "a2a_ms": Candidate.a2a_ms,
    "batch_size": Candidate.batch_size,
    "quant_error": Candidate.quant_error_fwd,
    "state": Candidate.state,
    "launch": Candidate.launch_id,
}


def env_hash(env: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()


class NotFound(LookupError):
    pass


def _assign(row: Any, fields: dict[str, Any]) -> None:
    """Set columns of a row by name; a name that is not a column is an error, not a silent no-op."""
    columns = set(row.__table__.columns.keys())
    unknown = sorted(set(fields) - columns)
    if unknown:
        raise TypeError(f"{type(row).__name__} has no column {unknown[0]!r}")
    for key, value in fields.items():
        setattr(row, key, value)


class Store:
    def __init__(self, url: str, *, migrate_schema: bool = True) -> None:
        self.url = url
        self.engine = make_engine(url)
        if migrate_schema:
            migrate(self.engine)
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

    # ------------------------------------------------------------------ clusters and workloads

    @staticmethod
    def _named(s: Session, model: type[Any], name: str, create: dict[str, Any] | None) -> Any:
        """The row called `name`; created from `create` if missing (and not created meanwhile by a
        concurrent process: the unique name decides, the loser reads the winner's row)."""
        row = s.scalar(select(model).where(model.name == name))
        if row is None and create is not None:
            row = model(name=name, **create)
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
    ) -> Study:
        cluster_row = self.cluster(cluster, create=True)
        workload_row = self.upsert_workload(workload_name, workload_spec)
        assert cluster_row is not None
        with self.session() as s:
            study = Study(
                name=name,
                cluster_id=cluster_row.id,
                workload_id=workload_row.id,
                state=state,
                space=space,
                settings=settings,
            )
            s.add(study)
            s.flush()
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
        with self.session() as s:
            study = s.get(Study, study_id)
            if study is None:
                raise NotFound(f"study {study_id}")
            _assign(study, fields)
            return study

    def acquire_study(self, study_id: int, owner: str, lease_s: float) -> bool:
        """Take (or renew) the lease on a study. Atomic: of two contenders exactly one wins, and a
        holder that stopped renewing (killed) loses it once the lease expires."""
        now = utcnow()
        with self.session() as s:
            result = s.execute(
                update(Study)
                .where(Study.id == study_id)
                .where(or_(Study.owner.is_(None), Study.owner == owner, Study.lease_expires_at < now))
                .values(owner=owner, lease_expires_at=now + timedelta(seconds=lease_s), heartbeat_at=now)
            )
            return result.rowcount == 1

    def take_over_study(self, study_id: int, dead_owner: str, owner: str, lease_s: float) -> bool:
        """Take a lease from a holder known to be dead (atomic: only if it still holds it)."""
        now = utcnow()
        with self.session() as s:
            result = s.execute(
                update(Study)
                .where(Study.id == study_id, Study.owner == dead_owner)
                .values(owner=owner, lease_expires_at=now + timedelta(seconds=lease_s), heartbeat_at=now)
            )
            return result.rowcount == 1

    def release_study(self, study_id: int, owner: str) -> None:
        with self.session() as s:
            s.execute(
                update(Study)
                .where(Study.id == study_id, Study.owner == owner)
                .values(owner=None, lease_expires_at=None)
            )

    def claimable_studies(self, now: datetime | None = None) -> list[Study]:
        """Active studies whose lease is free or expired (what a scheduler may pick up)."""
        now = now or utcnow()
        with self.session() as s:
            query = (
                select(Study)
                .where(Study.state.in_(ACTIVE))
                .where(or_(Study.owner.is_(None), Study.lease_expires_at < now))
                .order_by(Study.id)
            )
            return list(s.scalars(query))

    # ------------------------------------------------------------------ launches

    def add_launch(
        self,
        *,
        study_id: int,
        kind: str,
        env: dict[str, str],
        spec: dict[str, Any],
        executor: str,
        optuna_trials: list[int | None] | None = None,
        attempt: int = 1,
        nnodes: int | None = None,
    ) -> Launch:
        with self.session() as s:
            seq = (s.scalar(select(func.max(Launch.seq)).where(Launch.study_id == study_id)) or 0) + 1
            launch = Launch(
                study_id=study_id,
                seq=seq,
                kind=kind,
                attempt=attempt,
                env=env,
                env_hash=env_hash(env),
                spec=spec,
                optuna_trials=optuna_trials or [None] * len(spec.get("candidates", [])),
                state="pending",
                executor=executor,
                nnodes=nnodes,
            )
            s.add(launch)
            s.flush()
            return launch

    def update_launch(self, launch_id: int, **fields: Any) -> Launch:
        with self.session() as s:
            launch = s.get(Launch, launch_id)
            if launch is None:
                raise NotFound(f"launch {launch_id}")
            _assign(launch, fields)
            return launch

    def launch(self, launch_id: int) -> Launch | None:
        with self.session() as s:
            return s.get(Launch, launch_id)

    def launches(self, study_id: int, *, states: Sequence[str] | None = None) -> list[Launch]:
        with self.session() as s:
            query = select(Launch).where(Launch.study_id == study_id).order_by(Launch.seq)
            if states:
                query = query.where(Launch.state.in_(states))
            return list(s.scalars(query))

    # ------------------------------------------------------------------ candidates

    def add_candidates(self, rows: Sequence[dict[str, Any]]) -> list[Candidate]:
        with self.session() as s:
            objs = [Candidate(**row) for row in rows]
            s.add_all(objs)
            s.flush()
            return objs

    def candidates(
        self,
        study_id: int,
        *,
        kinds: Sequence[str] | None = None,
        states: Sequence[str] | None = None,
        launch_id: int | None = None,
        order_by: str = "id",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Candidate]:
        column = CANDIDATE_SORT_KEYS[order_by]
        with self.session() as s:
            query = select(Candidate).where(Candidate.study_id == study_id)
            if kinds:
                query = query.where(Candidate.kind.in_(kinds))
            if states:
                query = query.where(Candidate.state.in_(states))
            if launch_id is not None:
                query = query.where(Candidate.launch_id == launch_id)
            order = column.desc().nulls_last() if descending else column.asc().nulls_last()
            query = query.order_by(order, Candidate.id).offset(offset)
            if limit is not None:
                query = query.limit(limit)
            return list(s.scalars(query))

    def count_candidates(self, study_id: int, *, states: Sequence[str] | None = None) -> dict[str, int]:
        with self.session() as s:
            query = (
                select(Candidate.state, func.count(Candidate.id))
                .where(Candidate.study_id == study_id)
                .group_by(Candidate.state)
            )
            if states:
                query = query.where(Candidate.state.in_(states))
            return {state: int(n) for state, n in s.execute(query)}

    def candidate(self, candidate_id: int) -> Candidate | None:
        with self.session() as s:
            return s.get(Candidate, candidate_id)

    # ------------------------------------------------------------------ configs

    def publish_config(self, *, cluster: str, workload: str, nodes: int, **fields: Any) -> Config:
        cluster_row = self.cluster(cluster, create=True)
        workload_row = self.workload(workload)
        if workload_row is None:
            raise NotFound(f"workload {workload!r}")
        assert cluster_row is not None
        with self.session() as s:
            latest = s.scalar(
                select(func.max(Config.version)).where(
                    Config.cluster_id == cluster_row.id,
                    Config.workload_id == workload_row.id,
                    Config.nodes == nodes,
                )
            )
            config = Config(
                cluster_id=cluster_row.id,
                workload_id=workload_row.id,
                nodes=nodes,
                version=(latest or 0) + 1,
                fingerprint=cluster_row.fingerprint,
                **fields,
            )
            s.add(config)
            s.flush()
            self._bump_generation(s)
            return s.scalars(select(Config).where(Config.id == config.id)).one()

    def config_history(
        self, cluster: str | None = None, workload: str | None = None, nodes: int | None = None
    ) -> list[Config]:
        with self.session() as s:
            query = select(Config).join(Config.cluster).join(Config.workload)
            if cluster is not None:
                query = query.where(Cluster.name == cluster)
            if workload is not None:
                query = query.where(Workload.name == workload)
            if nodes is not None:
                query = query.where(Config.nodes == nodes)
            query = query.order_by(Cluster.name, Workload.name, Config.nodes, Config.version.desc())
            return list(s.scalars(query).unique())

    @staticmethod
    def _head_ids(*filters: Any) -> Any:
        """Ids of the served version of each (cluster, workload, nodes): pinned, else the latest."""
        rank = (
            func.row_number()
            .over(
                partition_by=(Config.cluster_id, Config.workload_id, Config.nodes),
                order_by=(Config.pinned.desc(), Config.version.desc()),
            )  # fmt: skip
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
        also orders concurrent changes: generations are never reused or skipped by a commit)."""
        s.execute(update(ConfigGeneration).where(ConfigGeneration.id == 1)
                  .values(generation=ConfigGeneration.generation + 1))  # fmt: skip

    def config_generation(self) -> int:
        """How many changes to what is served were committed: a primary-key read, cheap to poll."""
        with self.session() as s:
            return int(s.scalar(select(ConfigGeneration.generation).where(ConfigGeneration.id == 1)) or 0)

    def served_heads(self) -> tuple[int, list[tuple[int, bool]]]:
        """The generation and (id, pinned) of every served config at that generation, without loading
        rows: what a cache diffs against. One statement, so one snapshot on SQLite and PostgreSQL alike
        (two statements could straddle a commit and label a state with the wrong generation)."""
        query = (
            select(ConfigGeneration.generation, Config.id, Config.pinned)
            .select_from(ConfigGeneration)
            .outerjoin(Config, Config.id.in_(self._head_ids()))
            .where(ConfigGeneration.id == 1)
        )
        with self.session() as s:
            rows = s.execute(query).all()
        generation = int(rows[0][0]) if rows else 0
        return generation, [(i, bool(p)) for _, i, p in rows if i is not None]

    def configs_by_id(self, ids: Sequence[int]) -> list[Config]:
        with self.session() as s:
            return list(s.scalars(select(Config).where(Config.id.in_(list(ids)))).unique())

    def served_config(self, cluster: str, workload: str, nodes: int | None = None) -> Config | None:
        return pick_served(self.served_configs(cluster, workload), nodes)

    def pin_config(self, cluster: str, workload: str, nodes: int, version: int | None) -> Config | None:
        """Serve `version` regardless of newer publishes (None: unpin, serve the latest again)."""
        rows = self.config_history(cluster, workload, nodes)
        if not rows:
            raise NotFound(f"no config for {cluster}/{workload} at {nodes} nodes")
        if version is not None and version not in {r.version for r in rows}:
            raise NotFound(f"{cluster}/{workload} at {nodes} nodes has no version {version}")
        with self.session() as s:
            for row in rows:
                obj = s.get(Config, row.id)
                assert obj is not None
                obj.pinned = row.version == version
            self._bump_generation(s)
        return self.served_config(cluster, workload, nodes)

    def rollback_config(self, cluster: str, workload: str, nodes: int) -> Config:
        """Pin the version just below the one served now."""
        served = self.served_config(cluster, workload, nodes)
        if served is None or served.nodes != nodes:
            raise NotFound(f"no config for {cluster}/{workload} at {nodes} nodes")
        older = [
            r.version for r in self.config_history(cluster, workload, nodes) if r.version < served.version
        ]
        if not older:
            raise NotFound(f"{cluster}/{workload} at {nodes} nodes: version {served.version} is the oldest")
        result = self.pin_config(cluster, workload, nodes, max(older))
        assert result is not None
        return result

    # ------------------------------------------------------------------ quarantine

    def quarantine(self, cluster_id: int, env: dict[str, str], reason: str, launch_id: int | None) -> None:
        with self.session() as s:
            key = env_hash(env)
            exists = s.scalar(
                select(Quarantine.id).where(Quarantine.cluster_id == cluster_id, Quarantine.env_hash == key)
            )
            if exists is None:
                s.add(
                    Quarantine(
                        cluster_id=cluster_id, env_hash=key, env=env, reason=reason, launch_id=launch_id
                    )
                )

    def quarantined(self, cluster_id: int) -> dict[str, str]:
        """env hash -> reason for every quarantined env config of the cluster."""
        with self.session() as s:
            rows = s.execute(
                select(Quarantine.env_hash, Quarantine.reason).where(Quarantine.cluster_id == cluster_id)
            )
            return {h: r for h, r in rows}


def pick_served(heads: Sequence[Config], nodes: int | None) -> Config | None:
    """Exact node count if tuned, else the nearest (ties: fewer nodes); no count: the newest."""
    if not heads:
        return None
    if nodes is None:
        return max(heads, key=lambda c: (c.created_at, c.id))
    return min(heads, key=lambda c: (abs(c.nodes - nodes), c.nodes))
