"""Re-validations of published configs (the queue and each version's history) and the jobs that
report running on another stack than a config was validated on.

A version's own row never changes for this (configs are immutable but for their pin): what it was
last validated on and when, and whether its last re-validation failed, are read from its finished
re-validations (`validation_view`). Finishing one bumps the config generation, so every service
re-renders what it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from autotuner.job.exports import check_exports, config_to_dict
from autotuner.job.fingerprint import comparable, digest
from autotuner.store.base import NotFound
from autotuner.store.configs import ConfigRecords
from autotuner.store.models import (
    Cluster,
    Config,
    ConfigValidation,
    FingerprintReport,
    Workload,
    unreadable_columns,
    utcnow,
)
from autotuner.store.states import VALIDATION_DONE, VALIDATION_PENDING, ValidationState
from autotuner.store.studies import _matched
from autotuner.text import printable

# Stacks (driver, NCCL, aws-ofi-nccl, GPU, node count) recorded per version: a cluster runs a few;
# past this a report is not recorded, nor does it ask for a re-validation (each new stack asked for
# one: a read token sending made-up ones ran re-validations back to back, and grew the store without
# end). Said once per version and process: a real upgrade past it needs `autotuner revalidate`.
MAX_STACKS = 64
log = logging.getLogger("autotuner.store")
_said_full: set[tuple[str, int]] = set()  # (store, config id)
_said_unreadable: set[tuple[str, int, str]] = set()  # (store, validation id, column)


class ValidationRecords(ConfigRecords):
    # ------------------------------------------------------------------ the queue

    def request_validation(
        self,
        config_id: int,
        trigger: str,
        reason: str,
        requested_fingerprint: dict[str, Any] | None = None,
    ) -> tuple[ConfigValidation, bool]:
        """A queued re-validation of a version, or the one already queued or running for it (then
        False): one at a time per version, across processes (a unique index on pending rows)."""
        with self.session() as s:
            config = s.get(Config, config_id)
            if config is None:
                raise NotFound(f"config {config_id}")
            if config.study_id is None:
                raise ValueError(
                    f"config {config_id} was not published by a study: nothing records how it was measured"
                )
            pending = self._pending_of(s, config_id)
            if pending is not None:
                return pending, False
            row = ConfigValidation(config_id=config_id, study_id=config.study_id, trigger=trigger, reason=reason,
                                   state=ValidationState.QUEUED, requested_fingerprint=requested_fingerprint)  # fmt: skip
            try:
                with s.begin_nested():
                    s.add(row)
            except IntegrityError:  # another process queued one a moment ago
                pending = self._pending_of(s, config_id)
                assert pending is not None
                return pending, False
            return row, True

    @staticmethod
    def _pending_of(s: Any, config_id: int) -> ConfigValidation | None:
        return s.scalar(select(ConfigValidation).where(
            ConfigValidation.config_id == config_id, ConfigValidation.state.in_(VALIDATION_PENDING)))  # fmt: skip

    def pending_validations(self) -> list[ConfigValidation]:
        with self.session() as s:
            query = select(ConfigValidation).where(ConfigValidation.state.in_(VALIDATION_PENDING))
            return list(s.scalars(query.order_by(ConfigValidation.id)))

    def validation(self, validation_id: int) -> ConfigValidation | None:
        with self.session() as s:
            return s.get(ConfigValidation, validation_id)

    def update_validation(self, validation_id: int, **fields: Any) -> ConfigValidation:
        return self._update(ConfigValidation, validation_id, fields)

    def start_validation(self, validation_id: int, started_at: datetime) -> bool:
        """Move a queued (or interrupted, running) re-validation to running; False when it is no
        longer pending: another runner finished it (its verdict stands). One conditional UPDATE, so
        two runners never both see it pending."""
        with self.session() as s:
            done = s.execute(
                update(ConfigValidation)
                .where(ConfigValidation.id == validation_id, ConfigValidation.state.in_(VALIDATION_PENDING))
                .values(state=ValidationState.RUNNING, started_at=started_at)
                .execution_options(synchronize_session=False)
            )
            return bool(_matched(done))

    def finish_validation(
        self, validation_id: int, state: str, *, only_from: Iterable[str] = VALIDATION_PENDING, **fields: Any
    ) -> ConfigValidation:
        """A re-validation's end: its evidence entry, and a generation bump (what it says of its
        version is part of what is served). Written only to a row still in one of `only_from`
        (pending, unless said): a verdict once recorded is never overwritten by a second runner,
        whose finish is logged and dropped (the row as recorded is returned)."""
        if state not in VALIDATION_DONE:
            raise ValueError(f"{state!r} is not a finished state")
        with self.session() as s:
            done = s.execute(
                update(ConfigValidation)
                .where(ConfigValidation.id == validation_id, ConfigValidation.state.in_(list(only_from)))
                .values(**fields, state=state, finished_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if _matched(done):
                self._bump_generation(s)
            row = s.get(ConfigValidation, validation_id)
            if row is None:
                raise NotFound(f"validation {validation_id}")
            if not _matched(done):
                log.warning("re-validation %s is %s already: its end as %s is not recorded over it",
                            validation_id, row.state, state)  # fmt: skip
            return row

    def validations(
        self,
        cluster: str | None = None,
        workload: str | None = None,
        nodes: int | None = None,
        *,
        config_ids: Sequence[int] | None = None,
        limit: int = 200,
    ) -> list[ConfigValidation]:
        """Re-validations, newest first."""
        query = select(ConfigValidation).join(Config, Config.id == ConfigValidation.config_id)
        if cluster is not None:
            query = query.join(Config.cluster).where(Cluster.name == cluster)
        if workload is not None:
            query = query.join(Config.workload).where(Workload.name == workload)
        if nodes is not None:
            query = query.where(Config.nodes == nodes)
        if config_ids is not None:
            query = query.where(ConfigValidation.config_id.in_(list(config_ids)))
        with self.session() as s:
            return list(s.scalars(query.order_by(ConfigValidation.id.desc()).limit(limit)))

    def finished_validations(self, config_ids: Iterable[int]) -> dict[int, list[ConfigValidation]]:
        """Each version's finished re-validations, oldest first."""
        ids = list(config_ids)
        found: dict[int, list[ConfigValidation]] = {i: [] for i in ids}
        if not ids:
            return found
        query = (
            select(ConfigValidation)
            .where(ConfigValidation.config_id.in_(ids), ConfigValidation.state.in_(VALIDATION_DONE))
            .order_by(ConfigValidation.id)
        )
        with self.session() as s:
            for row in s.scalars(query):
                found[row.config_id].append(row)
        return found

    # ------------------------------------------------------------------ what a version says

    def validation_views(self, rows: Sequence[Config]) -> dict[int, dict[str, Any]]:
        """`validation_view` of each row, row by row: one whose re-validations cannot be read is
        logged and given what can be (`fallback_view`), never taking the others' views with it."""
        finished = self.finished_validations(r.id for r in rows)
        views = {}
        for r in rows:
            try:
                views[r.id] = validation_view(r, finished[r.id], store=self.url)
            except Exception:
                log.exception("config %s: its re-validations cannot all be read: read what can be", r.id)
                views[r.id] = fallback_view(r, finished[r.id], store=self.url)
        return views

    def public_config(self, row: Config) -> dict[str, Any]:
        """A version as REST and the hook's `--db` see it: with what it was last validated on."""
        return config_to_dict(row, self.validation_views([row])[row.id])

    def public_configs(self, rows: Sequence[Config]) -> list[dict[str, Any]]:
        views = self.validation_views(rows)
        return [config_to_dict(r, views[r.id]) for r in rows]

    # ------------------------------------------------------------------ what jobs report

    def record_reports(
        self, reports: Sequence[dict[str, Any]], now: datetime | None = None
    ) -> list[FingerprintReport]:
        """Count jobs served a config from another stack: `reports` of {config_id, fingerprint, diff,
        jobs}; the rows seen for the first time are returned (what may ask for a re-validation)."""
        now = now or utcnow()
        new = []
        stacks: dict[int, int] = {}  # config id -> stacks recorded for it
        with self.session() as s:
            for report in reports:
                key, jobs = digest(report["fingerprint"]), int(report.get("jobs", 1))
                # Counted in SQL (jobs = jobs + n): replicas flushing one stack at once all count.
                bump = (
                    update(FingerprintReport)
                    .where(
                        FingerprintReport.config_id == report["config_id"], FingerprintReport.digest == key
                    )
                    .values(jobs=func.coalesce(FingerprintReport.jobs, 0) + jobs, last_seen=now)
                    .execution_options(synchronize_session=False)
                )
                if _matched(s.execute(bump)):
                    continue
                if self._stacks(s, stacks, report["config_id"]) >= MAX_STACKS:
                    _say_full(self.url, report["config_id"])
                    continue  # a flood of made-up stacks (any read token can send one) ends here
                stacks[report["config_id"]] += 1
                row = FingerprintReport(config_id=report["config_id"], digest=key, fingerprint=report["fingerprint"],
                                        diff=report["diff"], jobs=jobs, first_seen=now, last_seen=now)  # fmt: skip
                try:
                    with s.begin_nested():
                        s.add(row)
                    new.append(row)
                except IntegrityError:  # another worker recorded it meanwhile: counted on its row
                    s.execute(bump)
        return new

    @staticmethod
    def _stacks(s: Any, counted: dict[int, int], config_id: int) -> int:
        if config_id not in counted:
            counted[config_id] = s.scalar(
                select(func.count(FingerprintReport.id)).where(FingerprintReport.config_id == config_id)
            )
        return counted[config_id]

    def last_requested(self, config_id: int, trigger: str) -> datetime | None:
        """When a re-validation of this version was last asked for by `trigger` (None: never)."""
        with self.session() as s:
            return s.scalar(select(func.max(ConfigValidation.created_at))
                            .where(ConfigValidation.config_id == config_id, ConfigValidation.trigger == trigger))  # fmt: skip

    def link_report(self, report_id: int, validation_id: int) -> None:
        self._update(FingerprintReport, report_id, {"validation_id": validation_id})

    def fingerprint_reports(self, config_ids: Iterable[int]) -> dict[int, list[FingerprintReport]]:
        """The stacks jobs reported against each version, most recently seen first."""
        ids = list(config_ids)
        found: dict[int, list[FingerprintReport]] = {i: [] for i in ids}
        if not ids:
            return found
        query = select(FingerprintReport).where(FingerprintReport.config_id.in_(ids))
        with self.session() as s:
            for row in s.scalars(
                query.order_by(FingerprintReport.last_seen.desc(), FingerprintReport.id.desc())
            ):
                found[row.config_id].append(row)
        return found


def _say_full(store: str, config_id: int) -> None:
    if (store, config_id) not in _said_full:
        _said_full.add((store, config_id))
        log.warning("config %s: %d stacks reported already; reports of further stacks are not recorded and ask "
                    "for no re-validation (made up?); after an upgrade, `autotuner revalidate` it", config_id, MAX_STACKS)  # fmt: skip


def validation_view(row: Config, finished: Sequence[ConfigValidation], *, store: str = "") -> dict[str, Any]:
    """When and on what a version was last shown to hold, its last re-validation, and why it is
    flagged (its last re-validation failed and it was kept: pinned, or no longer served).

    Published is validated: until a re-validation holds, a version stands on its study's
    confirmation, on the fingerprint recorded when it was published. A re-validation whose stored
    result or fingerprint cannot be read counts with what can (its state, its dates): one row
    written by hand must not stop the schedule, nor the listing, of every version."""
    held = [v for v in finished if v.state == ValidationState.HELD and v.finished_at is not None]
    concluded = [v for v in finished if v.state in (ValidationState.HELD, ValidationState.FAILED)]
    last = finished[-1] if finished else None
    view: dict[str, Any] = {
        "validated_at": held[-1].finished_at if held else row.created_at,
        "validated_on": {**readable(held[-1], "fingerprint", store), "nodes": str(row.nodes)}
        if held
        else comparable(row.fingerprint, row.nodes),
        "last_validation": brief(last, store=store) if last is not None else None,
        "flagged": None,
    }
    view["flagged"] = _flag(concluded, store)
    return view


def _flag(concluded: Sequence[ConfigValidation], store: str) -> str | None:
    """Why a version is flagged: its last concluded re-validation failed (None: it did not)."""
    if not concluded or concluded[-1].state != ValidationState.FAILED:
        return None
    failed = concluded[-1]  # flagged even when why it failed cannot be read
    return f"re-validation {failed.id} failed: {_why(failed, store) or ''}; {failed.action or ''}".rstrip(
        "; "
    )


def fallback_view(row: Config, finished: Sequence[ConfigValidation], *, store: str = "") -> dict[str, Any]:
    """What can be said of a version whose `validation_view` could not be made: validated when
    published, no last re-validation shown, and flagged as its last concluded re-validation says (or,
    when even that cannot be read, as unknown: a failed version is never served unflagged)."""
    try:
        flagged = _flag(
            [v for v in finished if v.state in (ValidationState.HELD, ValidationState.FAILED)], store
        )
    except Exception:
        log.exception("config %s: whether its last re-validation failed cannot be read", row.id)
        flagged = "its re-validations cannot be read: whether the last one failed is not known"
    return {"validated_at": row.created_at, "validated_on": {"nodes": str(row.nodes)}, "last_validation": None,
            "flagged": flagged}  # fmt: skip


def readable(row: ConfigValidation, column: str, store: str = "") -> dict[str, Any]:
    """A JSON column of a re-validation as a dict ({}: none recorded); stored text that is not a dict
    (not JSON at all reads as `Unreadable`) reads as {} and is logged, once per store and row."""
    value = getattr(row, column)
    if value is None or isinstance(value, dict):
        return value or {}
    if (store, row.id, column) not in _said_unreadable:
        _said_unreadable.add((store, row.id, column))
        log.warning("re-validation %s (config %s): its stored %s cannot be read (%s): read as empty",
                    row.id, row.config_id, column, value)  # fmt: skip
    return {}


def _why(row: ConfigValidation, store: str = "") -> Any:
    """What a re-validation's result says of why; that it cannot say, when its result is unreadable."""
    if row.result is not None and not isinstance(row.result, dict):
        readable(row, "result", store)
        return "its stored result cannot be read"
    return readable(row, "result", store).get("why")


def brief(row: ConfigValidation, *, store: str = "") -> dict[str, Any]:
    """A re-validation as the config's JSON and the dashboard show it."""
    result = readable(row, "result", store)
    fingerprints = {
        column: readable(row, column, store) if getattr(row, column) is not None else None
        for column in ("fingerprint", "requested_fingerprint")
    }
    return {
        "id": row.id,
        "config_id": row.config_id,
        "state": row.state,
        "trigger": row.trigger,
        "reason": row.reason,
        "requested_at": _iso(row.created_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        **fingerprints,
        "speedup": result.get("speedup"),
        "ci_low": result.get("ci_low"),
        "ci_high": result.get("ci_high"),
        "rounds": result.get("rounds"),
        "why": _why(row, store),
        "wall_s": result.get("wall_s"),
        "action": row.action,
        "new_config_id": row.new_config_id,
        "error": row.error,
    }


def report_brief(row: FingerprintReport) -> dict[str, Any]:
    """What jobs reported against a version, as REST shows it (a date stored as no date: None)."""
    return {"fingerprint": row.fingerprint, "diff": row.diff, "jobs": row.jobs, "first_seen": _iso(row.first_seen),
            "last_seen": _iso(row.last_seen), "validation_id": row.validation_id}  # fmt: skip


def _iso(at: datetime | None) -> str | None:
    """A stored date as ISO text; None where none is stored, or its stored text is no date."""
    return at.isoformat() if isinstance(at, datetime) else None


def servable(row: Config, validation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A version's public config, or ValueError saying why it cannot be served (stored columns that
    cannot be read, exports the job side's check drops): what the service renders, and what a pin or a
    rollback, by REST or the CLI, refuses to make the served version."""
    if bad := unreadable_columns(row):
        raise ValueError(f"its stored {bad} cannot be read")
    # The version's own fields set AUTOTUNER_*, and publishing refuses them in env: one there (a hand's)
    # was exported wherever its field was empty, beside the fields of another setting.
    if own := sorted(name for name in row.env if str(name).startswith("AUTOTUNER_")):
        raise ValueError(f"its stored env sets {', '.join(own)}, which only the version's own fields set")
    config = config_to_dict(row, validation)
    _, dropped = check_exports(config["exports"])
    if dropped:
        raise ValueError("; ".join(f"{name}: {why}" for name, why in dropped.items()))
    return config


def unshowable(row: Config, exc: BaseException) -> str:
    """Why a version's public config could not be made (`exc`, from public_config), naming the version:
    its stored columns that cannot be read, else the error. One printable line."""
    bad = unreadable_columns(row)
    why = f"its stored {bad} cannot be read" if bad else f"{type(exc).__name__}: {exc}"
    return printable(f"config {row.id} (v{row.version}, {row.nodes} node(s)) cannot be shown: {why}")[:400]
