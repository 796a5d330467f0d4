"""Health, readiness, metrics, and the env lint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from api.auth import ReadAccess, require
from api.deps import MetricsDep, StoreDep
from api.schemas import ERRORS, LintPublic, LintRequest, ProblemPublic
from autotuner.envvars import lint_env

router = APIRouter(tags=["system"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready"}})
def readyz(request: Request, store: StoreDep, response: Response) -> dict[str, object]:
    """The database answers and, where enabled, the scheduler runs."""
    checks: dict[str, object] = {}
    try:
        with store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    scheduler = request.app.state.scheduler
    checks["scheduler"] = "off" if scheduler is None else ("ok" if scheduler.alive else "stopped")
    ready = checks["database"] == "ok" and checks["scheduler"] != "stopped"
    if not ready:
        response.status_code = 503
    return {"ready": ready, **checks}


# HEAD too (405 before): health checkers and proxies probe with it. Not in the schema: one operation
# of two methods would share its id (and which one named it changed with the hash seed).
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


@router.get("/metrics", response_class=Response, responses={401: ERRORS[401], 403: ERRORS[403]})
def metrics(request: Request, metrics: MetricsDep) -> Response:
    """Prometheus text format. Open to scrapers, unless AUTOTUNER_METRICS_TOKEN=1: then a read token
    (the scrape config's `authorization: {credentials: SECRET}`), whatever AUTOTUNER_PUBLIC_READ says."""
    if request.app.state.settings.metrics_token:
        _token_read(request)
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


_token_read = require("read", public=False).dependency


@router.post("/v1/lint", response_model=LintPublic, tags=["lint"], responses=ERRORS)
def lint(body: LintRequest, _: ReadAccess) -> LintPublic:
    """Check a job's (or a config's) NCCL / EFA variables: unknown, unsafe, out-of-domain, conflicting."""
    problems = lint_env(body.env, allow_risky=body.allow_risky)
    return LintPublic(
        ok=not any(p.severity == "error" for p in problems),
        problems=[ProblemPublic(variable=p.variable, rule=p.rule, message=p.message, severity=p.severity)
                  for p in problems],
    )  # fmt: skip
