"""Launches, the candidates they measured, and the env configs quarantined on a cluster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.orm import defer
from sqlalchemy.orm.attributes import set_committed_value

from autotuner.store.base import NotFound, StoreBase, env_hash
from autotuner.store.models import Candidate, Launch, Quarantine, Study

# The larger of the two codec errors, as the trials table shows it (sorting on the forward one alone put
# a row whose backward error was over the limit among the clean ones); null when neither was measured.
_FWD, _BWD = Candidate.quant_error_fwd, Candidate.quant_error_bwd
QUANT_ERROR = case(
    (_FWD.is_(None), _BWD),
    (_BWD.is_(None), _FWD),
    (_FWD >= _BWD, _FWD),
    else_=_BWD,
)

CANDIDATE_SORT_KEYS = {
    "id": Candidate.id,
    "samples_per_s": Candidate.samples_per_s,
    "iter_ms": Candidate.iter_ms,
    "a2a_ms": Candidate.a2a_ms,
    "batch_size": Candidate.batch_size,
    "quant_error": QUANT_ERROR,
    "state": Candidate.state,
    "launch": Candidate.launch_id,
}


FOLLOWED_STATES = ("pending", "running")  # a launch not yet ended


OPEN = ("pending", "running", "unknown")  # executors.LaunchState values of a launch not yet recorded


def _waiting_cleared(fields: dict[str, Any]) -> dict[str, Any]:
    """A launch set to any state but pending waits on nothing (a launch cancelled at its queue timeout
    kept "Slurm PENDING: ..." beside "cancelled")."""
    if "state" in fields and fields["state"] != "pending":
        return {"waiting_on": None, **fields}
    return fields


class LaunchRecords(StoreBase):
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
        return self._update(Launch, launch_id, _waiting_cleared(fields))

    def mark_waiting(self, launch_id: int, waiting_on: str | None) -> bool:
        """Queued, with what it waits on, or running again (None); only while the launch has not ended
        (a runner whose lease was taken must not reopen a launch the new holder finished)."""
        with self.session() as s:
            done = s.execute(
                update(Launch)
                .where(Launch.id == launch_id, Launch.state.in_(FOLLOWED_STATES))
                .values(state="pending" if waiting_on else "running", waiting_on=waiting_on)
            )
            return bool(getattr(done, "rowcount", 0))

    def launch(self, launch_id: int) -> Launch | None:
        with self.session() as s:
            return s.get(Launch, launch_id)

    def launches(self, study_id: int, *, states: Sequence[str] | None = None) -> list[Launch]:
        with self.session() as s:
            query = select(Launch).where(Launch.study_id == study_id).order_by(Launch.seq)
            if states:
                query = query.where(Launch.state.in_(states))
            return list(s.scalars(query))

    def left_running(self, *, after_id: int = 0, limit: int = 100) -> list[Launch]:
        """Ended launches whose cancel was not confirmed (`Launch.left_running`), by id from `after_id`:
        the study queue cancels each again until its backend says it ended."""
        with self.session() as s:
            query = (
                select(Launch)
                .options(defer(Launch.log_tail))
                .where(Launch.left_running.is_not(None), Launch.backend_id.is_not(None), Launch.id > after_id)
                .order_by(Launch.id)
                .limit(limit)
            )
            rows = list(s.scalars(query))
            for row in rows:  # deferred, and never to be loaded from a closed session
                set_committed_value(row, "log_tail", None)
            return rows

    def count_left_running(self) -> int:
        with self.session() as s:
            return (
                s.scalar(select(func.count()).select_from(Launch).where(Launch.left_running.is_not(None)))
                or 0
            )

    def launch_page(
        self, study_id: int, *, states: Sequence[str] = (), ids: Sequence[int] = (), newest_first: bool = False,
        limit: int = 100, offset: int = 0,
    ) -> tuple[list[tuple[Launch, int]], int]:  # fmt: skip
        """A page of the study's launches in seq order (of `states`, of `ids`, when given), each with the
        length of its log tail, which is not loaded (16 KB a failed launch: read one at a time); and how
        many match, all pages."""
        where = [Launch.study_id == study_id]
        if states:
            where.append(Launch.state.in_(states))
        if ids:
            where.append(Launch.id.in_(ids))
        chars = func.coalesce(func.length(Launch.log_tail), 0)
        with self.session() as s:
            total = s.scalar(select(func.count()).select_from(Launch).where(*where)) or 0
            rows = s.execute(select(Launch, chars).options(defer(Launch.log_tail)).where(*where)
                             .order_by(Launch.seq.desc() if newest_first else Launch.seq)
                             .limit(limit).offset(offset)).all()  # fmt: skip
            for row, _ in rows:  # deferred, and never to be loaded from a closed session
                set_committed_value(row, "log_tail", None)
            return [(row, n) for row, n in rows], total

    def ended_launch_dirs(
        self, before: datetime, *, launch_states: Sequence[str], study_states: Sequence[str]
    ) -> list[tuple[int, int, str]]:
        """(study id, launch seq, workdir) of the launches in `launch_states` that ended before `before`
        (or began then, if their end was not recorded), of studies in `study_states`, oldest first."""
        ended = func.coalesce(Launch.finished_at, Launch.started_at, Launch.created_at)
        with self.session() as s:
            rows = s.execute(
                select(Launch.study_id, Launch.seq, Launch.workdir)
                .join(Study, Study.id == Launch.study_id)
                .where(Launch.state.in_(launch_states), Study.state.in_(study_states),
                       Launch.workdir.is_not(None), ended < before)
                .order_by(Launch.study_id, Launch.seq)
            )  # fmt: skip
            return [(study_id, seq, str(workdir)) for study_id, seq, workdir in rows]

    # ------------------------------------------------------------------ candidates

    def finish_launch(
        self, launch_id: int, rows: Sequence[dict[str, Any]], **fields: Any
    ) -> list[Candidate] | None:
        """A launch's candidates and its end (state, finished_at, ...) in one transaction: a runner
        stopped between the two left a launch still "running" with its candidates stored, which the
        next runner's recovery ingested again (every measurement twice). None, and nothing written,
        when the launch has ended already: a runner that lost its lease (paused past it) recorded a
        launch its successor had recorded, and every measurement of it counted twice."""
        unknown = sorted(set(fields) - set(Launch.__table__.columns.keys()))
        if unknown:
            raise TypeError(f"Launch has no column {unknown[0]!r}")
        with self.session() as s:
            if s.get(Launch, launch_id) is None:
                raise NotFound(f"launch {launch_id}")
            ended = s.execute(
                update(Launch)
                .where(Launch.id == launch_id, Launch.state.in_(OPEN))
                .values(**_waiting_cleared(fields))
            )
            if not ended.rowcount:  # type: ignore[attr-defined]
                return None
            objs = [Candidate(**row) for row in rows]
            s.add_all(objs)
            s.flush()
            return objs

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

    def count_candidates_of(self, study_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """count_candidates of several studies in one grouped query (a listing's page)."""
        out: dict[int, dict[str, int]] = {i: {} for i in study_ids}
        query = (
            select(Candidate.study_id, Candidate.state, func.count(Candidate.id))
            .where(Candidate.study_id.in_(list(study_ids)))
            .group_by(Candidate.study_id, Candidate.state)
        )
        with self.session() as s:
            for study_id, state, n in s.execute(query):
                out[study_id][state] = int(n)
        return out

    def candidates_by_id(self, ids: Iterable[int]) -> dict[int, Candidate]:
        with self.session() as s:
            return {c.id: c for c in s.scalars(select(Candidate).where(Candidate.id.in_(list(ids))))}

    def update_candidate(self, candidate_id: int, **fields: Any) -> Candidate:
        return self._update(Candidate, candidate_id, fields)

    def candidate(self, candidate_id: int) -> Candidate | None:
        with self.session() as s:
            return s.get(Candidate, candidate_id)

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

    def release_quarantine(self, cluster_id: int, env: dict[str, str]) -> None:
        """The env config is no longer quarantined on the cluster (a launch of it ran there)."""
        with self.session() as s:
            s.execute(
                delete(Quarantine).where(
                    Quarantine.cluster_id == cluster_id, Quarantine.env_hash == env_hash(env)
                )
            )

    def quarantined(self, cluster_id: int) -> dict[str, str]:
        """env hash -> reason for every quarantined env config of the cluster."""
        with self.session() as s:
            rows = s.execute(
                select(Quarantine.env_hash, Quarantine.reason).where(Quarantine.cluster_id == cluster_id)
            )
            return {h: r for h, r in rows}
