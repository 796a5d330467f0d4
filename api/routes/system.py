"""Health, readiness, metrics, and the env lint."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from api.auth import ReadAccess, require
from api.deps import MetricsDep
from api.schemas import ERRORS, LintPublic, LintRequest, ProblemPublic
from autotuner.envvars import lint_env
from autotuner.store import Store

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process answers."""
    # Async: answered on the event loop, never behind the request thread pool, which requests stuck on
    # a frozen store may fill; a liveness probe that waited there had a pod restarted for its database.
    return {"status": "ok"}


class DatabaseProbe:
    """The store's `SELECT 1`, answered within `timeout_s` whatever the server does. A frozen server (SIGSTOP,
    a hung backend, a paused VM) whose kernel still ACKs trips none of libpq's deadlines: the query waits
    for good. So it runs in a thread of its own, awaited with a deadline, and one at a time: a probe that
    comes while one is in flight waits on that one (a frozen server holds one thread per worker, not one
    per probe). Not the request thread pool: requests stuck on the same store may fill it."""

    def __init__(self, timeout_s: float, check: Callable[[Store], None] | None = None) -> None:
        self.timeout_s = timeout_s
        self.check = check or select_one
        self._lock = threading.Lock()
        self._running: Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None  # `_running` seen from the event loop

    async def answer(self, store: Store) -> str:
        """`ok`, or `error: ` and why (the exception's type, or no answer within the deadline)."""
        waiter = self._start(store)
        done, _ = await asyncio.wait([waiter], timeout=self.timeout_s)  # the waiter is not cancelled
        if not done:
            return f"error: no answer within {self.timeout_s:g} s"
        exc = waiter.exception()
        return "ok" if exc is None else f"error: {type(exc).__name__}"

    def _start(self, store: Store) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._running is None or self._running.done():
                self._running, self._waiter = Future(), None
                self._running.set_running_or_notify_cancel()  # a waiter's cancel cannot cancel it
                threading.Thread(target=self._run, args=(store, self._running), name="readyz-database",
                                 daemon=True).start()  # fmt: skip
            if self._waiter is None or self._waiter.get_loop() is not loop:
                # one per probe thread and loop: a waiter per request would stay on a frozen one's callbacks
                self._waiter = asyncio.wrap_future(self._running, loop=loop)
                # read, whoever awaits it: a check that fails after every probe gave up on it is no error
                # of asyncio's ("Future exception was never retrieved", logged with its traceback)
                self._waiter.add_done_callback(_retrieved)
            return self._waiter

    def _run(self, store: Store, future: Future[None]) -> None:
        try:
            self.check(store)
        except BaseException as exc:  # said in the answer
            future.set_exception(exc)
        else:
            future.set_result(None)


def _retrieved(waiter: asyncio.Future[None]) -> None:
    if not waiter.cancelled():
        waiter.exception()


def select_one(store: Store) -> None:
    with store.engine.connect() as conn:
        conn.execute(text("SELECT 1"))


@router.get("/readyz", responses={503: {"description": "not ready"}})
async def readyz(request: Request, response: Response) -> dict[str, object]:
    """The database answers (within AUTOTUNER_READY_TIMEOUT_S) and, where enabled, the scheduler runs."""
    # Async, the store read from the app's state (not StoreDep, a sync dependency): nothing here waits
    # for the request thread pool, which stuck requests may hold.
    state = request.app.state
    checks: dict[str, object] = {"database": await state.database_probe.answer(state.store)}
    scheduler = state.scheduler
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
