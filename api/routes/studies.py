"""Tuning studies: create, list, show, cancel; their trials, launches and the charts' data."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from api.auth import ReadAccess, WriteAccess, by
from api.deps import SettingsDep, StoreDep
from api.errors import invalid
from api.schemas import (
    ERRORS,
    LaunchPublic,
    StudiesPublic,
    StudyCreate,
    StudyPublic,
    TrialsPublic,
    launch_public,
    study_public,
    trial_public,
)
from autotuner.executors.base import LaunchState
from autotuner.limits import limits, over
from autotuner.space import load_space
from autotuner.store import CANDIDATE_SORT_KEYS, CandidateState, Store, Study, StudyState
from autotuner.tuning import best_and_baseline, create_study, study_settings
from autotuner.tuning.insights import ImportanceCache, study_insights
from autotuner.tuning.settings import default_workdir

log = logging.getLogger("autotuner.api")
router = APIRouter(prefix="/v1/studies", tags=["studies"], responses=ERRORS)
StudyId = Annotated[int, Path(ge=1, le=2**31)]


def public_studies(store: Store, studies: Sequence[Study]) -> list[StudyPublic]:
    """Studies as REST shows them, in a few queries whatever their number (a listing's page)."""
    counts = store.count_candidates_of([s.id for s in studies])
    chosen = best_and_baseline(store, studies, counts)
    published = {s.id: row_id for s in studies if (row_id := _published_row(s)) is not None}
    rows = store.candidates_by_id(set(published.values())) if published else {}
    lost = store.runnerless([s.id for s in studies])
    return [study_public(s, counts[s.id], *chosen[s.id], rows.get(published.get(s.id, 0)), s.id in lost)
            for s in studies]  # fmt: skip


def _published_row(study: Study) -> int | None:
    """The row that measured what the study published (its outcome's chosen_candidate), if readable."""
    outcome = study.outcome if isinstance(study.outcome, dict) else {}
    row_id = outcome.get("chosen_candidate")
    return row_id if isinstance(row_id, int) and not isinstance(row_id, bool) and 0 < row_id < 2**63 else None


def to_public(store: Store, study: Study) -> StudyPublic:
    return public_studies(store, [study])[0]


def get_study(store: Store, study_id: int) -> Study:
    study = store.study(study_id)
    if study is None:
        raise HTTPException(404, f"study {study_id} not found")
    return study


QUEUE_FULL_RETRY_S = 60  # a study runs for minutes: sooner, the queue is as full


@router.post(
    "",
    status_code=201,
    response_model=StudyPublic,
    responses={429: {"description": "the queue is full (AUTOTUNER_MAX_QUEUED): retry after Retry-After"}},
)
def create(body: StudyCreate, store: StoreDep, settings: SettingsDep, scope: WriteAccess) -> StudyPublic:
    """Queue a tuning study; the service's scheduler runs it."""
    queued, cap = store.count_studies(states=[StudyState.QUEUED]), limits().max_queued
    if queued >= cap:  # a client in a loop must not grow the store and the queue without end
        raise HTTPException(429, over("the queue with this study", queued + 1, cap, "AUTOTUNER_MAX_QUEUED",
                                      " studies") + "; retry when one has started or been cancelled",
                            headers={"Retry-After": str(QUEUE_FULL_RETRY_S)})  # fmt: skip
    executor = body.settings.executor
    if executor not in settings.allowed_executors:
        enabled = ", ".join(settings.allowed_executors)
        raise HTTPException(422, [invalid(["body", "settings", "executor"],
                                          f"{executor!r} is not enabled here (enabled: {enabled})")])  # fmt: skip
    if executor == "replay" and "landscape" not in settings.options_for(executor):
        # the engine's own words name executor_options.landscape, which a request cannot give
        raise HTTPException(422, [invalid(["body", "settings", "executor"],
                                          "the replay executor has no landscape here: executor options are the "
                                          'operator\'s, set in AUTOTUNER_EXECUTOR_OPTIONS (e.g. {"replay": '
                                          '{"landscape": "/path/to/landscape.json"}}), not a request\'s')])  # fmt: skip
    study_settings_ = study_settings(body.settings, workdir=str(default_workdir(settings.url, settings.data_dir)),
                                     executor_options=settings.options_for(executor))  # fmt: skip
    space = load_space(body.space)  # a preset's name or an object (StudyCreate): never a file
    if space.quality_data is not None and space.quality_data not in settings.allowed_quality_data:
        allowed = ", ".join(settings.allowed_quality_data) or "none"
        raise HTTPException(422, [invalid(["body", "space", "quality_data"],
                                          f"{space.quality_data!r} is not allowed here: the scheduler imports and calls "
                                          "it on the service host, so the operator lists the module:function names a "
                                          f"request may give in AUTOTUNER_QUALITY_DATA (allowed: {allowed})")])  # fmt: skip
    workload = body.workload.model_dump(mode="json", exclude_unset=True)  # stored as the request gave it
    study = create_study(store, cluster=body.cluster, workload=workload, space=space,
                         settings=study_settings_, name=body.name)  # fmt: skip
    log.info("study %s (%s) queued: %s/%s on executor %s (%s)", study.id, study.name, body.cluster,
             study.workload.name, executor, by(scope))  # fmt: skip
    return to_public(store, study)


@router.get("", response_model=StudiesPublic)
def list_studies(
    store: StoreDep,
    _: ReadAccess,
    state: Annotated[StudyState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> StudiesPublic:
    states = [state] if state else None
    rows = store.studies(states=states, limit=limit, offset=offset)
    return StudiesPublic(data=public_studies(store, rows), count=store.count_studies(states=states))


@router.get("/{study_id}", response_model=StudyPublic)
def show(study_id: StudyId, store: StoreDep, _: ReadAccess) -> StudyPublic:
    return to_public(store, get_study(store, study_id))


@router.post("/{study_id}/cancel", response_model=StudyPublic)
def cancel(study_id: StudyId, store: StoreDep, scope: WriteAccess) -> StudyPublic:
    """Stop a queued or running study; its running launch is killed at the next heartbeat, and it
    publishes nothing. 409 if it ended first. A cancel in the instant after it published leaves that
    version published (roll it back if unwanted)."""
    get_study(store, study_id)  # 404 for no such study
    cancelled = store.move_study(study_id, StudyState.CANCELLED)  # only one that has not ended: atomic
    if cancelled is None:  # it ended (or was cancelled) first, perhaps a moment ago
        raise HTTPException(409, f"study {study_id} is already {get_study(store, study_id).state}")
    log.info("study %s (%s) cancelled (%s)", study_id, cancelled.name, by(scope))
    return to_public(store, cancelled)


@router.get("/{study_id}/trials", response_model=TrialsPublic)
def trials(
    study_id: StudyId,
    store: StoreDep,
    _: ReadAccess,
    sort: Annotated[Literal[tuple(CANDIDATE_SORT_KEYS)], Query()] = "id",  # type: ignore[valid-type]
    order: Annotated[Literal["asc", "desc"], Query()] = "asc",
    state: Annotated[CandidateState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> TrialsPublic:
    """Measured candidates, paged and sortable."""
    get_study(store, study_id)
    states = [state] if state else None
    rows = store.candidates(study_id, states=states, order_by=sort, descending=order == "desc",
                            limit=limit, offset=offset)  # fmt: skip
    counts = store.count_candidates(study_id, states=states)
    return TrialsPublic(data=[trial_public(r) for r in rows], count=sum(counts.values()))


LaunchId = Annotated[int, Path(ge=1, le=2**31 - 1)]
LAUNCH_TOTAL = "X-Total-Count"
# A listed launch's id is what its own route takes (an OpenAPI link, as api/links.py writes the others).
LAUNCH_LINK = {
    "operationRef": "#/paths/~1v1~1studies~1{study_id}~1launches~1{launch_id}/get",
    "parameters": {"path.study_id": "$request.path.study_id", "path.launch_id": "$response.body#/0/id"},
}


class LaunchListed(LaunchPublic):
    """A launch as the listing shows it: its log tail (up to 16 KB each) is read one launch at a time."""

    log_tail: SkipJsonSchema[str | None] = Field(None, exclude=True)
    log_tail_chars: int = Field(
        0, description="length of its log tail (0: none); GET .../launches/{launch_id} returns it"
    )


@router.get(
    "/{study_id}/launches",
    response_model=list[LaunchListed],
    responses={200: {"headers": {LAUNCH_TOTAL: {"description": "launches that match the filters, all pages",
                                                "schema": {"type": "integer"}}},
                     "links": {"GetStudyLaunch": LAUNCH_LINK}}},
)  # fmt: skip
def launches(
    study_id: StudyId,
    store: StoreDep,
    response: Response,
    _: ReadAccess,
    state: Annotated[
        list[LaunchState] | None, Query(max_length=len(LaunchState), description="repeatable: any of them")
    ] = None,
    launch_id: Annotated[
        list[LaunchId] | None,
        Query(alias="id", max_length=1000, description="repeatable: these launches only"),
    ] = None,
    order: Annotated[Literal["asc", "desc"], Query()] = "asc",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> list[LaunchListed]:
    """Launches in seq order (`order=desc`: newest first), a page at a time, without their log tails
    (`GET .../launches/{launch_id}` has it). `state` and `id` may repeat (any of them); the header
    X-Total-Count counts what matches, all pages."""
    get_study(store, study_id)
    found, total = store.launch_page(study_id, states=[str(s) for s in state or ()], ids=launch_id or (),
                                     newest_first=order == "desc", limit=limit, offset=offset)  # fmt: skip
    response.headers[LAUNCH_TOTAL] = str(total)
    return [
        LaunchListed.model_validate({**launch_public(row).model_dump(), "log_tail_chars": n})
        for row, n in found
    ]


@router.get("/{study_id}/launches/{launch_id}", response_model=LaunchPublic)
def launch(study_id: StudyId, launch_id: LaunchId, store: StoreDep, _: ReadAccess) -> LaunchPublic:
    """One launch of the study with its state, reason and whole log tail."""
    get_study(store, study_id)
    row = store.launch(launch_id)
    if row is None or row.study_id != study_id:  # another study's launch is not found here either
        raise HTTPException(404, f"launch {launch_id} of study {study_id} not found")
    return launch_public(row)


@router.get("/{study_id}/insights")
def insights(study_id: StudyId, request: Request, store: StoreDep, _: ReadAccess) -> dict[str, Any]:
    """Chart data for the dashboard: optimization history, parameter importance (Optuna) with its
    noise floor, the best throughput of each precision x batch size, and where the step's time goes."""
    study = get_study(store, study_id)
    cache: ImportanceCache | None = getattr(request.app.state, "importance_cache", None)
    if cache is None or cache.url != store.url:  # one per app: it holds an Optuna storage
        cache = request.app.state.importance_cache = ImportanceCache(store.url)
    return study_insights(store, study, cache)
