"""Our tables. All prefixed `at_`: Optuna keeps its search state in the same database and owns
`studies`, `trials` and `alembic_version`."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

PENDING_SQL = "state IN ('queued', 'running')"  # store.states.VALIDATION_PENDING


def utcnow() -> datetime:
    return datetime.now(UTC)


class Unreadable(str):
    """What a JSON column reads as when its stored text is not JSON at all (only a hand on an SQLite file
    writes one): a string that says why. Never a dict or a list, so every reader that checks a value's
    shape refuses the row with the reason, and the rest are read."""


def _tolerant(parse: Any, unreadable: Any) -> Any:
    """A result processor that reads a value `parse` cannot as `unreadable(error)`: one row's bad text
    would otherwise raise out of the query that loads every row (a listing, a queue tick)."""
    if parse is None:
        return None

    def process(value: Any) -> Any:
        try:
            return parse(value)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a date that is no date
            return unreadable(exc)

    return process


class StoredJSON(TypeDecorator[Any]):
    """JSON whose unreadable text reads as `Unreadable`. Wraps the inner processor (not only
    `process_result_value`) because the inner one is what raises."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _tolerant(
            super().result_processor(dialect, coltype), lambda exc: Unreadable(f"not JSON: {exc}")
        )


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, whatever the backend stores (SQLite keeps naive strings). A
    stored text that is no date reads as None: unknown, never a made-up time."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _tolerant(super().result_processor(dialect, coltype), lambda exc: None)

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: use autotuner.store.models.utcnow()")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def unreadable_columns(row: Any) -> str:
    """The columns of a loaded row whose stored text could not be read, and why ("" when none): a JSON
    column that read as `Unreadable`, a date that read as None where a row always has one."""
    bad = []
    for column in row.__table__.columns:
        value = row.__dict__.get(column.key)
        if isinstance(value, Unreadable):
            bad.append(f"{column.key} ({value})")
        elif value is None and column.key in row.__dict__ and not column.nullable:
            bad.append(f"{column.key} (not a date)" if isinstance(column.type, UTCDateTime) else column.key)
    return ", ".join(bad)


def name_of(related: Any) -> str | None:
    """The name of a study's cluster or workload row; None where that row is gone (the sqlite3 shell
    checks no foreign key: a hand's UPDATE or DELETE there leaves the study pointing at nothing)."""
    return None if related is None else str(related.name)


class Label(TypeDecorator[str]):
    """A state or kind: written as its plain string value, whatever enum carries it (a driver may
    dump an enum by its name otherwise)."""

    impl = String(16)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return value.value if isinstance(value, Enum) else value


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: StoredJSON, list[Any]: StoredJSON, datetime: UTCDateTime}


class Named:
    """A row looked up by its unique name, that remembers when it was made and changed."""

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Cluster(Named, Base):
    __tablename__ = "at_clusters"

    # GPU type, node count, NCCL / aws-ofi-nccl / torch versions, EFA present: from trial results.
    fingerprint: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Workload(Named, Base):
    __tablename__ = "at_workloads"

    spec: Mapped[dict[str, Any]]  # the trial spec's `workload` object, as its latest study gave it


class Study(Base):
    __tablename__ = "at_studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("at_clusters.id"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("at_workloads.id"), index=True)
    # The workload as this study was created with it (the workload row holds the latest study's):
    # what it measures, resumed or re-validated. NULL: created by a version before schema 0013.
    workload_spec: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    state: Mapped[str] = mapped_column(Label, index=True)
    space: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any]]
    launches_done: Mapped[int] = mapped_column(default=0)
    best_candidate_id: Mapped[int | None] = mapped_column(Integer)
    baseline_candidate_id: Mapped[int | None] = mapped_column(Integer)
    # Confirmation: speedup with its confidence interval, the published config version.
    outcome: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    # Variables of the space that cannot act where the study measures: {name: why}.
    inert: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    error: Mapped[str | None] = mapped_column(Text)
    # Who runs it: a lease that a killed holder loses when it stops renewing it.
    owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    cluster: Mapped[Cluster] = relationship(lazy="joined")
    workload: Mapped[Workload] = relationship(lazy="joined")


class Launch(Base):
    """One trial process environment: torchrun (or sbatch / a k8s Job) measuring several candidates."""

    __tablename__ = "at_launches"
    __table_args__ = (UniqueConstraint("study_id", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("at_studies.id"), index=True)
    seq: Mapped[int]
    kind: Mapped[str] = mapped_column(Label)  # store.states.LaunchKind
    attempt: Mapped[int] = mapped_column(default=1)
    nnodes: Mapped[int | None] = mapped_column(Integer)  # None: the study's node count
    env: Mapped[dict[str, Any]]
    env_hash: Mapped[str] = mapped_column(String(64), index=True)
    spec: Mapped[dict[str, Any]]
    # Optuna trial numbers that this launch's candidates answer (None where not an Optuna trial).
    optuna_trials: Mapped[list[Any]] = mapped_column(default=list)
    state: Mapped[str] = mapped_column(Label, index=True)  # executors.LaunchState
    executor: Mapped[str] = mapped_column(String(32))
    backend_id: Mapped[str | None] = mapped_column(String(200))
    request: Mapped[str | None] = mapped_column(Text)  # the dryrun: command line / sbatch script / manifest
    workdir: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    result_path: Mapped[str | None] = mapped_column(Text)
    # The trial result's launch-level facts (versions, env seen, NCCL effective, setup and wall time).
    summary: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    error: Mapped[str | None] = mapped_column(Text)
    # Ended, but its cancel was not confirmed: what may still run (the study queue cancels it again
    # until the backend says it ended, then clears this).
    left_running: Mapped[str | None] = mapped_column(Text)
    log_tail: Mapped[str | None] = mapped_column(Text)
    waiting_on: Mapped[str | None] = mapped_column(Text)  # while queued: why, in the scheduler's words
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]


class Candidate(Base):
    """One measured point (env x precision x batch x ...): a row of the trial table."""

    __tablename__ = "at_candidates"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("at_studies.id"), index=True)
    launch_id: Mapped[int] = mapped_column(ForeignKey("at_launches.id"), index=True)
    index: Mapped[int]
    kind: Mapped[str] = mapped_column(Label)  # store.states.LaunchKind
    optuna_number: Mapped[int | None] = mapped_column(Integer)
    env: Mapped[dict[str, Any]]
    fwd_precision: Mapped[str] = mapped_column(String(8))
    bwd_precision: Mapped[str] = mapped_column(String(8))
    effective_fwd_precision: Mapped[str | None] = mapped_column(String(8))
    effective_bwd_precision: Mapped[str | None] = mapped_column(String(8))
    batch_size: Mapped[int]
    sharding: Mapped[str] = mapped_column(String(32))
    num_threads: Mapped[int | None] = mapped_column(Integer)
    pipeline: Mapped[str | None] = mapped_column(String(32))  # what drove the step (None: before 0003)
    state: Mapped[str] = mapped_column(Label, index=True)  # store.states.CandidateState
    samples_per_s: Mapped[float | None] = mapped_column(Float, index=True)
    iter_ms: Mapped[float | None] = mapped_column(Float)
    iter_cv: Mapped[float | None] = mapped_column(Float)
    a2a_ms: Mapped[float | None] = mapped_column(Float)
    a2a_bytes: Mapped[float | None] = mapped_column(Float)
    busbw_gbps: Mapped[float | None] = mapped_column(Float)
    quant_error_fwd: Mapped[float | None] = mapped_column(Float)
    quant_error_bwd: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Config(Base):
    """A published, versioned config for (cluster, workload, nodes)."""

    __tablename__ = "at_configs"
    # AUTOINCREMENT: SQLite would hand a deleted row's id out again (PostgreSQL's sequence never does).
    __table_args__ = (
        UniqueConstraint("cluster_id", "workload_id", "nodes", "version"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("at_clusters.id"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("at_workloads.id"), index=True)
    nodes: Mapped[int]
    version: Mapped[int]
    env: Mapped[dict[str, Any]]
    fwd_precision: Mapped[str] = mapped_column(String(8))
    bwd_precision: Mapped[str] = mapped_column(String(8))
    batch_size: Mapped[int]
    sharding: Mapped[str] = mapped_column(String(32))
    num_threads: Mapped[int | None] = mapped_column(Integer)
    pipeline: Mapped[str | None] = mapped_column(String(32))
    # A batch change's factor on the job's learning rate, as the convergence check trained it (None: the
    # job's own rate). Travels with the batch: a bigger batch at the old rate is not what was validated.
    lr_scale: Mapped[float | None] = mapped_column(Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(default=dict)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("at_studies.id"))
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    cluster: Mapped[Cluster] = relationship(lazy="joined")
    workload: Mapped[Workload] = relationship(lazy="joined")


class ConfigValidation(Base):
    """A re-validation of one published version: its setting against the study's baseline in
    interleaved launches (recorded in that study, tagged `revalidate-<id>`), what it found on which
    stack, and what it did. Requested rows are the queue the scheduler runs (queued -> running ->
    held | failed | unresolved | error); every finished one is an evidence entry of its version."""

    __tablename__ = "at_config_validations"
    # One queued or running re-validation per version, whoever asks (a job storm, two replicas).
    __table_args__ = (
        Index("uq_at_config_validations_pending", "config_id", unique=True,
              sqlite_where=text(PENDING_SQL), postgresql_where=text(PENDING_SQL)),
    )  # fmt: skip

    id: Mapped[int] = mapped_column(primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("at_configs.id"), index=True)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("at_studies.id"))
    trigger: Mapped[str] = mapped_column(Label)  # store.states.ValidationTrigger
    reason: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Label, index=True)  # store.states.ValidationState
    # What the jobs that asked for it run on (a fingerprint trigger), and what it ran on.
    requested_fingerprint: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    fingerprint: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)  # speedup, interval, rounds, why
    action: Mapped[str | None] = mapped_column(Text)  # kept, replaced by vN, flagged (pinned), recorded
    new_config_id: Mapped[int | None] = mapped_column(ForeignKey("at_configs.id"))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class FingerprintReport(Base):
    """Jobs served a config from a stack other than the one it was validated on: one row per
    (config, job fingerprint), counted, and the re-validation it asked for."""

    __tablename__ = "at_fingerprint_reports"
    __table_args__ = (UniqueConstraint("config_id", "digest"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("at_configs.id"), index=True)
    digest: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[dict[str, Any]]  # the jobs' (autotuner.job.fingerprint keys)
    diff: Mapped[dict[str, Any]]  # key -> [validated on, jobs']
    jobs: Mapped[int] = mapped_column(BigInteger, default=0)
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)
    validation_id: Mapped[int | None] = mapped_column(ForeignKey("at_config_validations.id"))


class ConfigGeneration(Base):
    """One row counting every change to what is served (publish, pin, unpin, rollback), bumped in the
    change's own transaction: a config cache compares one integer to know whether it is current."""

    __tablename__ = "at_config_generation"

    id: Mapped[int] = mapped_column(primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    # Drawn anew at every bump: tells two states of one generation apart (a store restored from an
    # older dump that took as many changes as it lost).
    stamp: Mapped[str | None] = mapped_column(String(32))


class ConfigVersionMark(Base):
    """The highest version a (cluster, workload, nodes) ever had, by name, raised in the publishing
    transaction: a version is a name (jobs, pins, rollbacks, reports say it), so one deleted is never
    handed out again, to another config. By name, not by row id: a cluster or workload row deleted and
    made again under its name still names the same versions."""

    __tablename__ = "at_config_versions"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    workload: Mapped[str] = mapped_column(String(128), primary_key=True)
    nodes: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    version: Mapped[int]


class StoreIdentity(Base):
    """One row: the store's own id, made with it (a workdir is marked with the store that launches there)."""

    __tablename__ = "at_store"

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))


class Quarantine(Base):
    """Env configs that crashed, hung or failed NCCL init on a cluster: never launched again there."""

    __tablename__ = "at_quarantine"
    __table_args__ = (UniqueConstraint("cluster_id", "env_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("at_clusters.id"), index=True)
    env_hash: Mapped[str] = mapped_column(String(64))
    env: Mapped[dict[str, Any]]
    reason: Mapped[str] = mapped_column(Text)
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("at_launches.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
