"""Re-validations of published configs (the queue and each version's history) and the jobs that
report running on another stack than a config was validated on.

A version's own row never changes for this (configs are immutable but for their pin): what it was
last validated on and when, and whether its last re-validation failed, are read from its finished
re-validations (`validation_view`). Finishing one bumps the config generation, so every service
re-renders what it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from autotuner.job.exports import config_to_dict
from autotuner.job.fingerprint import comparable, digest
from autotuner.store.base import NotFound
from autotuner.store.configs import ConfigRecords
from autotuner.store.models import Cluster, Config, ConfigValidation, FingerprintReport, Workload, utcnow
from autotuner.store.states import VALIDATION_DONE, VALIDATION_PENDING, ValidationState

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

    def finish_validation(self, validation_id: int, state: str, **fields: Any) -> ConfigValidation:
        """A re-validation's end: its evidence entry, and a generation bump (what it says of its
        version is part of what is served)."""
        if state not in VALIDATION_DONE:
            raise ValueError(f"{state!r} is not a finished state")
        with self.session() as s:
            row = s.get(ConfigValidation, validation_id)
            if row is None:
                raise NotFound(f"validation {validation_id}")
            for key, value in {**fields, "state": state, "finished_at": utcnow()}.items():
                setattr(row, key, value)
            self._bump_generation(s)
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
        finished = self.finished_validations(r.id for r in rows)
        return {r.id: validation_view(r, finished[r.id], store=self.url) for r in rows}

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
                key = digest(report["fingerprint"])
                query = select(FingerprintReport).where(
                    FingerprintReport.config_id == report["config_id"], FingerprintReport.digest == key
                )
                row = s.scalar(query)
                if row is None and self._stacks(s, stacks, report["config_id"]) >= MAX_STACKS:
                    _say_full(self.url, report["config_id"])
                    continue  # a flood of made-up stacks (any read token can send one) ends here
                if row is None:
                    stacks[report["config_id"]] += 1
                    row = FingerprintReport(config_id=report["config_id"], digest=key, fingerprint=report["fingerprint"],
                                            diff=report["diff"], jobs=0, first_seen=now, last_seen=now)  # fmt: skip
                    try:
                        with s.begin_nested():
                            s.add(row)
                        new.append(row)
                    except IntegrityError:  # another worker recorded it meanwhile
                        row = s.scalars(query).one()
                row.jobs = (row.jobs or 0) + int(report.get("jobs", 1))
                row.last_seen = now
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
    if concluded and concluded[-1].state == ValidationState.FAILED:
        failed = concluded[-1]  # flagged even when why it failed cannot be read
        view["flagged"] = (
            f"re-validation {failed.id} failed: {_why(failed, store) or ''}; {failed.action or ''}".rstrip(
                "; "
            )
        )
    return view


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
        "requested_at": row.created_at.isoformat(),
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
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
