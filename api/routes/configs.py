"""Published configs: the hot path (a job start fetches one), history, pin, rollback."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from api.auth import AdminAccess, ReadAccess, require
from api.deps import CacheDep, StoreDep
from api.schemas import ERRORS, ConfigPublic, PinRequest, RollbackRequest
from autotuner.configs import MEDIA_TYPES, config_to_dict
from autotuner.names import NAME_MAX_LEN, NAME_PATTERN, NAME_RULE

router = APIRouter(prefix="/v1/configs", tags=["configs"], responses=ERRORS)
NameParam = Path(min_length=1, max_length=NAME_MAX_LEN, pattern=NAME_PATTERN, description=NAME_RULE)
Cluster = Annotated[str, NameParam]
Workload = Annotated[str, NameParam]
_read = require("read").dependency


@router.get("", response_model=list[ConfigPublic])
def served(cache: CacheDep, _: ReadAccess) -> list[dict]:
    """The config each (cluster, workload, nodes) serves now."""
    return cache.all()


@router.get(
    "/{cluster}/{workload}",
    response_model=ConfigPublic,
    responses={200: {"content": {"text/plain": {}}, "description": "the config (JSON, or export lines)"},
               404: {"description": "nothing published for this cluster and workload"},
               500: {"description": "the config published for it cannot be served (why, in `detail`)"}},
)  # fmt: skip
async def fetch(
    request: Request,
    cluster: Cluster,
    workload: Workload,
    nodes: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    format: Annotated[Literal["json", "env", "slurm"], Query()] = "json",
) -> Response:
    """The tuned config for a job: JSON with its evidence, `format=env` export lines (values quoted),
    `format=slurm` TaskProlog lines. `nodes` picks the nearest tuned node count.

    Served from memory (no database access, no Optuna, no torch): thousands of jobs start at once.
    A miss asks the store before answering 404: what was just published elsewhere is served.
    """
    _read(request)  # auth inline: this route is the hot path
    cache = request.app.state.cache
    served = cache.get(cluster, workload, nodes)
    if served is None:  # rare: off the event loop, the store's word
        served = await run_in_threadpool(cache.find, cluster, workload, nodes)
    result = "miss" if served is None else "error" if served.error else "hit"
    request.app.state.metrics.config_fetches.labels(format, result).inc()
    if served is None:
        raise HTTPException(404, f"no config published for {cluster}/{workload}")
    if served.error:  # one row that cannot be rendered: said on its own key, every other is served
        raise HTTPException(500, served.error)
    return Response(served.body[format], media_type=MEDIA_TYPES[format])


@router.get("/{cluster}/{workload}/history", response_model=list[ConfigPublic])
def history(cluster: Cluster, workload: Workload, store: StoreDep, _: ReadAccess) -> list[dict]:
    """Every published version, newest first."""
    return [config_to_dict(row) for row in store.config_history(cluster, workload)]


@router.post("/{cluster}/{workload}/pin", response_model=ConfigPublic)
def pin(cluster: Cluster, workload: Workload, body: PinRequest, store: StoreDep, cache: CacheDep,
        _: AdminAccess) -> dict:  # fmt: skip
    """Serve one version regardless of newer publishes (`version: null` unpins)."""
    row = store.pin_config(cluster, workload, body.nodes, body.version)
    cache.refresh()
    assert row is not None
    return config_to_dict(row)


@router.post("/{cluster}/{workload}/rollback", response_model=ConfigPublic)
def rollback(cluster: Cluster, workload: Workload, body: RollbackRequest, store: StoreDep, cache: CacheDep,
             _: AdminAccess) -> dict:  # fmt: skip
    """Serve the version before the current one (pins it)."""
    row = store.rollback_config(cluster, workload, body.nodes)
    cache.refresh()
    return config_to_dict(row)
