"""Published configs: the hot path (a job start fetches one), history, pin, rollback."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from api.auth import AdminAccess, ReadAccess, WriteAccess, by, require
from api.cache import CATCH_UP_WAIT_S, StoreUnanswered, store_away
from api.deps import CacheDep, SettingsDep, StoreDep
from api.fastpath import note_stale
from api.schemas import (
    ERRORS,
    ConfigPublic,
    FingerprintReportPublic,
    PinRequest,
    RevalidateRequest,
    RollbackRequest,
    ValidationPublic,
    ValidationStatus,
    salvaged,
)
from autotuner.cli.claim_report import evidence_claim
from autotuner.job.exports import MEDIA_TYPES
from autotuner.job.fingerprint import HEADER
from autotuner.names import NAME_MAX_LEN, NAME_PATTERN, NAME_RULE, published_hint
from autotuner.store import ServedChanged, ValidationTrigger
from autotuner.store.validations import brief, report_brief, unshowable
from autotuner.tuning.lease import store_unavailable
from autotuner.tuning.revalidate import CannotRevalidate, config_to_revalidate, measured_on, staleness
from autotuner.tuning.revalidate import request as ask

log = logging.getLogger("autotuner.api")
router = APIRouter(prefix="/v1/configs", tags=["configs"], responses=ERRORS)

# A miss reads the store in a thread, out of a few of its own: a store that stalls (a frozen PostgreSQL
# backend, its kernel still ACKing: no libpq deadline trips) holds these, not the pool that every other
# route runs in. A storm of misses beyond them waits its turn in their queue, holding no thread.
MISS_THREADS = 8

NameParam = Path(min_length=1, max_length=NAME_MAX_LEN, pattern=NAME_PATTERN, description=NAME_RULE)
Cluster = Annotated[str, NameParam]
Workload = Annotated[str, NameParam]
_read = require("read").dependency


@router.get(
    "",
    response_model=list[ConfigPublic],
    responses={503: {"description": "the store has not answered since the service started (Retry-After)"}},
)
def served(cache: CacheDep, _: ReadAccess) -> list[dict]:
    """The config each (cluster, workload, nodes) serves now, with its claim in words."""
    if cache.generation < 0:  # nothing loaded yet: an empty list would read "nothing published"
        try:
            cache.refresh(wait_s=CATCH_UP_WAIT_S)
        except Exception as exc:
            if not store_away(exc):
                raise
            log.warning("config cache: the store did not answer the listing", exc_info=True)
        if cache.generation < 0:
            raise HTTPException(
                503,
                "the store has not answered since the service started, and no config is loaded: try again",
                headers={"Retry-After": str(max(1, math.ceil(cache.refresh_s)))},
            )
    return [{**c, "claim": _claim(c)} for c in cache.all()]


def _claim(config: dict) -> Any:
    """The claim in words, or None where the stored evidence cannot be read (the config is still
    served and listed: one row never hides the rest)."""
    try:
        return evidence_claim(config.get("evidence"))[1]
    except (ValueError, TypeError, AttributeError):
        log.warning(
            "config %s: its evidence cannot be read", config.get("exports", {}).get("AUTOTUNER_CONFIG")
        )
        return None


@router.get(
    "/{cluster}/{workload}",
    response_model=ConfigPublic,
    responses={200: {"content": {"text/plain": {}}, "description": "the config (JSON, or export lines)"},
               404: {"description": "nothing published for this cluster and workload (`detail` says whether the cluster has any config and names the closest published)"},
               503: {"description": "the store did not answer and nothing for this key is loaded (Retry-After)"},
               500: {"description": "the config published for it cannot be served (why, in `detail`)"}},
)  # fmt: skip
async def fetch(
    request: Request,
    cluster: Cluster,
    workload: Workload,
    nodes: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    format: Annotated[Literal["json", "env", "slurm"], Query()] = "json",
    fingerprint: Annotated[str | None, Header(alias=HEADER)] = None,
) -> Response:
    """The tuned config for a job: JSON with its evidence, `format=env` export lines (values quoted),
    `format=slurm` TaskProlog lines. `nodes` picks the nearest tuned node count.

    The job's stack in `X-Autotuner-Fingerprint` (`driver=550.54.15&nccl=2.21.5&gpu=...&nodes=2`, as
    the hook sends it) is compared with the one the version was validated on: the JSON says
    `fingerprint_match` (true, false, "unknown") and `fingerprint_diff`; the export lines carry a
    comment line when they differ. A stack that differs is recorded, and asks for a re-validation.

    Served from memory (no database access, no Optuna, no torch): thousands of jobs start at once.
    A miss asks the store before answering 404: what was just published elsewhere is served.
    """
    _read(request)  # auth inline: this route is the hot path
    cache = request.app.state.cache
    if cache.current():
        served = cache.get(cluster, workload, nodes, catch_up=False)
    else:  # behind another worker: catch up off the event loop, in the request pool (waits at most
        # CATCH_UP_WAIT_S on a load in flight, then answers from memory), not behind misses stuck on the store
        served = await run_in_threadpool(cache.get, cluster, workload, nodes)
    if served is None:  # rare: off the event loop, the store's word
        try:
            served = await asyncio.get_running_loop().run_in_executor(
                request.app.state.miss_threads, cache.find, cluster, workload, nodes
            )
        except StoreUnanswered as exc:  # a 404 would be a guess, and the hook drops its kept config on one
            request.app.state.metrics.config_fetches.labels(format, "unanswered").inc()
            retry = str(max(1, math.ceil(cache.refresh_s)))
            raise HTTPException(
                503, f"the store did not answer ({exc}), and nothing for {cluster}/{workload} is loaded: try again",
                headers={"Retry-After": retry},
            ) from exc  # fmt: skip
    result = "miss" if served is None else "error" if served.error else "hit"
    request.app.state.metrics.config_fetches.labels(format, result).inc()
    if served is None:
        # off the event loop: the hint compares the name with every published one
        raise await run_in_threadpool(_not_published, cluster, workload, cache.published())
    if served.error:  # one row that cannot be rendered: said on its own key, every other is served
        raise HTTPException(500, served.error)
    if fingerprint is None:
        return Response(served.body[format], media_type=MEDIA_TYPES[format])
    header = fingerprint.encode("latin-1", "replace")
    match = served.matched(header)
    if match.stale:
        note_stale(request.app.state, served.id, header, match.diff)
    return Response(match.body[format], media_type=MEDIA_TYPES[format])


def _not_published(cluster: str, workload: str, published: list[tuple[str, str]]) -> HTTPException:
    """The 404 of a key with nothing published, in words that show a typo (whether the cluster has any
    config, the few closest published names: a read token may list them all with GET /v1/configs). The
    hook drops its cached config on these words for the key it asked only, never on a 404 that some other
    server at its address gave."""
    hint = published_hint(cluster, workload, published)
    return HTTPException(
        404, f"no config published for {cluster}/{workload} ({hint}; GET /v1/configs lists them)"
    )


@router.get("/{cluster}/{workload}/history", response_model=list[ConfigPublic])
def history(cluster: Cluster, workload: Workload, store: StoreDep, _: ReadAccess,
            nodes: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
            limit: Annotated[int, Query(ge=1, le=1000)] = 100,
            offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0) -> list[ConfigPublic]:  # fmt: skip
    """Published versions, by node count and newest first, with what their re-validations say: a page
    of `limit` (the next one at `offset` + `limit`). A version whose stored data cannot be shown is
    listed with `error` saying so, and the others as they are."""
    try:
        rows = store.public_configs(
            store.config_history(cluster, workload, nodes, limit=limit, offset=offset)
        )
    except Exception as exc:  # one row an older version (or a hand) wrote: the page row by row
        if store_unavailable(exc):  # no row's fault: the store's (a 503)
            raise
        ids = store.config_history_ids(cluster, workload, nodes, limit=limit, offset=offset)
        rows = [_version(store, i) for i in ids]
    # A row that renders but does not fit the schema (an env value stored as a number, an lr_scale
    # stored as text) failed the response's validation after the route returned: the whole page a 500.
    return [salvaged(ConfigPublic, row) for row in rows]


def _version(store: Any, config_id: int) -> dict:
    """One version as history shows it, or what can be said of it when its data cannot be read."""
    try:
        return store.public_configs(store.configs_by_id([config_id]))[0]  # type: ignore[no-any-return]
    except Exception as exc:
        log.warning("config %s cannot be shown (%s: %s)", config_id, type(exc).__name__, exc)
    (_, cluster, workload, nodes, version, created_at) = store.config_labels([config_id])[0]
    return {"cluster": cluster, "workload": workload, "nodes": nodes, "version": version, "pinned": False,
            "created_at": created_at.isoformat() if created_at else "", "env": {}, "qcomms": {}, "batch_size": None, "sharding": None,
            "num_threads": None, "exports": {}, "evidence": {}, "fingerprint": {}, "study_id": None,
            "error": "its stored data cannot be read (a row an older version or a hand left): not servable"}  # fmt: skip


# A bare POST (no body) asks with the defaults, as `{}` does: the served config, or 1 node to roll back.
NO_BODY_REVALIDATE, NO_BODY_ROLLBACK = RevalidateRequest(), RollbackRequest()


@router.post("/{cluster}/{workload}/revalidate", response_model=ValidationPublic, status_code=202,
             responses={200: {"model": ValidationPublic, "description": "one already queued or running for it"},
                        409: {"description": "the version was not published by a study, or its study's "
                                             "executor is not enabled here"}})  # fmt: skip
def revalidate(cluster: Cluster, workload: Workload, store: StoreDep, settings: SettingsDep, response: Response,
               scope: WriteAccess, body: RevalidateRequest = NO_BODY_REVALIDATE) -> ValidationPublic:  # fmt: skip
    """Re-validate the served config (or `version`): its setting against the study's baseline in
    interleaved launches, the study's rounds and executor settings, run by the scheduler. Answers the
    queued re-validation (202), or the one already queued or running for that version (200). Held:
    the version gains the entry; failed: a new version (the last that still holds, else the
    baseline) unless the version is pinned (then flagged)."""
    config = config_to_revalidate(store, cluster, workload, body.nodes, body.version)
    executor = measured_on(store, config)
    if (
        executor is not None and executor not in settings.allowed_executors
    ):  # the scheduler would never run it
        where = "".join(
            f" --{k} {v}" for k, v in (("nodes", body.nodes), ("version", body.version)) if v is not None
        )
        raise HTTPException(409, f"v{config.version} was measured on executor {executor!r}, which is not enabled here "
                                 f"(enabled: {', '.join(settings.allowed_executors)}): re-validate it with "
                                 f"`autotuner revalidate {cluster} {workload}{where}` where that executor runs")  # fmt: skip
    try:
        row, created = ask(store, config, ValidationTrigger.MANUAL, body.reason or "requested over REST")
    except CannotRevalidate as exc:
        raise HTTPException(409, str(exc)) from exc
    if not created:
        response.status_code = 200
    else:
        log.info(
            "config %s/%s v%s: re-validation %s queued (%s)",
            cluster,
            workload,
            config.version,
            row.id,
            by(scope),
        )
    return _validation(row, {config.id: config.version})


@router.get("/{cluster}/{workload}/validations", response_model=ValidationStatus)
def validations(cluster: Cluster, workload: Workload, store: StoreDep, settings: SettingsDep, _: ReadAccess,
                nodes: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> ValidationStatus:  # fmt: skip
    """The served version's validation: when and on what, stale or not (jobs on another stack since,
    a failed re-validation kept by a pin, older than AUTOTUNER_REVALIDATE_EVERY), every
    re-validation of the versions at its node count, and the stacks jobs reported."""
    served = store.served_config(cluster, workload, nodes)
    if served is None:
        raise _not_published(
            cluster, workload, [(c.cluster.name, c.workload.name) for c in store.served_configs()]
        )
    versions = store.config_versions(cluster, workload, served.nodes)
    # The re-validations first, what they made of the version after: the reads are separate, and one
    # that ended in between must not read "held" in the list beside the old `validated_on`.
    entries = [_validation(v, versions) for v in store.validations(config_ids=list(versions))]
    try:
        public = store.public_config(served)
    except Exception as exc:  # a row an older version (or a hand) wrote: said, as the fetch says it
        if store_unavailable(exc):
            raise
        why = unshowable(served, exc)
        log.warning("%s", why)
        raise HTTPException(500, why) from None
    reports = store.fingerprint_reports([served.id])[served.id]
    every = settings.revalidate_every_s
    stale = staleness(public, reports, every)
    # Each entry, and the status itself, as history shows its rows: what does not fit the schema (a row
    # written by hand) is named in its own `error`; it failed the response's validation, a bare 500.
    return salvaged(ValidationStatus, {
        "cluster": cluster, "workload": workload, "nodes": served.nodes, "version": served.version,
        "validated_at": public["validated_at"], "validated_on": public["validated_on"], "age_s": stale["age_s"],
        "stale": stale["stale"], "stale_reasons": stale["reasons"], "revalidate_every_s": every,
        "validations": entries, "reports": [salvaged(FingerprintReportPublic, report_brief(r)) for r in reports],
    })  # fmt: skip


def _validation(row: Any, versions: dict[int, int | None]) -> ValidationPublic:
    return salvaged(ValidationPublic, {
        **brief(row),
        "version": versions.get(row.config_id),
        "new_version": versions.get(row.new_config_id),
    })  # fmt: skip


@router.post("/{cluster}/{workload}/pin", response_model=ConfigPublic)
def pin(cluster: Cluster, workload: Workload, body: PinRequest, store: StoreDep, cache: CacheDep,
        scope: AdminAccess) -> dict:  # fmt: skip
    """Serve one version regardless of newer publishes (`version: null` unpins). A version that
    cannot be served is refused (409), nothing changed."""
    if body.version is not None:
        _check_servable(store, cache, cluster, workload, body.nodes, body.version)
    row = store.pin_config(cluster, workload, body.nodes, body.version)
    cache.refresh()
    assert row is not None
    done = f"pinned to v{body.version}" if body.version is not None else f"unpinned: serves v{row.version}"
    log.info("config %s/%s at %s node(s) %s (%s)", cluster, workload, body.nodes, done, by(scope))
    return store.public_config(row)


@router.post("/{cluster}/{workload}/rollback", response_model=ConfigPublic)
def rollback(cluster: Cluster, workload: Workload, store: StoreDep, cache: CacheDep, scope: AdminAccess,
             body: RollbackRequest = NO_BODY_ROLLBACK) -> dict:  # fmt: skip
    """Serve the version before the current one (pins it). One that cannot be served is refused
    (409), nothing changed."""
    served, older = store.rollback_target(cluster, workload, body.nodes)
    _check_servable(store, cache, cluster, workload, body.nodes, older)
    try:
        row = store.pin_config(cluster, workload, body.nodes, older, served_now=served)
    except ServedChanged as exc:
        raise HTTPException(409, str(exc)) from exc
    cache.refresh()
    assert row is not None
    log.info("config %s/%s at %s node(s) rolled back: v%s to v%s, pinned (%s)", cluster, workload, body.nodes,
             served, older, by(scope))  # fmt: skip
    return store.public_config(row)


def _check_servable(store: Any, cache: Any, cluster: str, workload: str, nodes: int, version: int) -> None:
    """409 for a version that exists but could not be served: making it the served one would break
    serving for the key (answered 500) where it works now."""
    try:
        row = store.config_row(cluster, workload, nodes, version)
        why = None if row is None else cache.why_unservable(row)
    except Exception as exc:  # its stored data cannot even be read
        if store_unavailable(exc):  # not the version's fault: the store's (a 503)
            raise
        why = f"version {version} cannot be read ({type(exc).__name__})"
    if why:
        raise HTTPException(409, f"{why}: not made the served version, nothing changed")
