"""The service: `create_app(settings)` builds everything (no engine or settings at import time)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from itertools import accumulate
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from api import docs, errors, links
from api.cache import ConfigCache, SharedGeneration, store_away
from api.fastpath import ConfigFastPath
from api.fingerprints import FingerprintReports
from api.metrics import Metrics
from api.routes import configs, studies, system
from api.scheduler import RunningScheduler, SchedulerProcess, die_with_parent, scheduler_env
from api.settings import Settings, log_to_stderr
from autotuner import __version__
from autotuner.store import Store

log = logging.getLogger("autotuner.api")


# 20 digits is 10**20 bytes: a longer Content-Length is no body's length, even padded with zeros.
MAX_LENGTH_DIGITS = 20
NOT_A_LENGTH = b'{"detail":"the Content-Length header is not a byte count"}'
# The router matches the decoded path: /v1/configs/c%2Fw was c/w's config, and .../c%2Fw/rollback rolled
# back a key the request never named. No name of the API holds '/', so no such path names anything.
ENCODED_SLASH = (
    b'{"detail":[{"type":"value_error","loc":["path"],'
    b'"msg":"an encoded / (%2F) in the path: no cluster, workload or study name holds /"}]}'
)


class Guard:
    """Pure ASGI (cheap on the hot path): request latency per route, 413 for bodies over the limit,
    whether announced (Content-Length) or streamed (chunked), 400 for bodies nested deeper than
    MAX_JSON_DEPTH, and 422 for an API path with an encoded '/'."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        try:
            await self._limited(scope, receive, send)
        finally:
            route = getattr(scope.get("route"), "path", "other")
            scope["app"].state.metrics.observe_latency(route, time.perf_counter() - started)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") or b""
        if raw.startswith(b"/v1/") and b"%2f" in raw.lower():
            return await self._answer(send, 422, ENCODED_SLASH)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or len(declared) > MAX_LENGTH_DIGITS):
            # Not a length (int() of over 4,300 digits raises: a 500, zeros or not): not "too large" either.
            return await self._answer(send, 400, NOT_A_LENGTH)
        if declared is not None and int(declared) > self.max_bytes:
            return await self._answer(send, 413, self._too_large())
        seen = 0
        nesting = JSONNesting()
        refusal: list[tuple[int, bytes]] = []  # the answer the body earned instead of the app's
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            chunk = message.get("body", b"")
            seen += len(chunk)
            if not refusal and seen > self.max_bytes:
                refusal.append((413, self._too_large()))
            elif not refusal and nesting.feed(chunk) > MAX_JSON_DEPTH:
                refusal.append((400, TOO_DEEP))
            if refusal:  # and every read after it
                raise _Refused
            return message

        async def answer(message: Message) -> None:
            # The app may catch the exception above (FastAPI turns any error while reading a body into
            # "400 There was an error parsing the body"): once the body was refused, the answer is ours.
            nonlocal started
            if refusal:
                if not started:
                    started = True
                    await self._answer(send, *refusal[0])
                return
            started = True
            await send(message)

        try:
            await self.app(scope, limited, answer)
        except _Refused:
            if not started:
                await self._answer(send, *refusal[0])

    def _too_large(self) -> bytes:
        return (
            b'{"detail":"request body too large (limit %d bytes; raise it with AUTOTUNER_MAX_BODY_BYTES)"}'
            % self.max_bytes
        )

    @staticmethod
    async def _answer(send: Send, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})


class _Refused(Exception):
    pass


# No body of this API nests past a few levels (a space's env map of lists). Python's JSON parser reads
# nearly 1,000, and what handles the parsed body after it (pydantic's errors, FastAPI's encoder echoing
# a 422's `input`, the space's checks) recurses too: a body of under 2 KB nested 500 to 990 deep was a
# 500 and a traceback of 150 KB in the log. Refused as it streams in, before anything parses it.
MAX_JSON_DEPTH = 64
TOO_DEEP = (
    b'{"detail":"the body cannot be read as JSON: arrays or objects are nested too deep (over %d levels)"}'
    % MAX_JSON_DEPTH
)
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and what it escapes (valid JSON: in a string)
_NOT_QUOTES_OR_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')  # what translate deletes
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


class JSONNesting:
    """How deep a JSON text nests, read chunk by chunk as it streams in, without parsing it (no
    recursion, nothing kept but the state): the brackets outside strings. Escapes dropped, every
    quote left opens or closes a string; all in C (re.sub, translate, split, accumulate): a megabyte
    in milliseconds, at worst a tenth of a second. What is not valid JSON may be counted wrong (a
    backslash outside a string): the parser refuses it after, at whatever depth."""

    def __init__(self) -> None:
        self.depth = 0
        self.deepest = 0
        self.in_string = False
        self.escaped = False  # the last chunk ended on a backslash: the next one's first byte is escaped

    def feed(self, chunk: bytes) -> int:
        """The deepest level seen so far."""
        if self.escaped and chunk:
            chunk, self.escaped = chunk[1:], False
        plain = _ESCAPE.sub(b"", chunk)
        if plain.endswith(b"\\"):  # unpaired: the chunk's last byte
            plain, self.escaped = plain[:-1], True
        parts = plain.translate(None, _NOT_QUOTES_OR_BRACKETS).split(b'"')
        brackets = b"".join(parts[1 if self.in_string else 0 :: 2])
        self.in_string ^= len(parts) % 2 == 0  # an odd number of quotes
        steps = list(map(_STEP.__getitem__, brackets))
        if self.depth + brackets.count(b"[") + brackets.count(b"{") > self.deepest:  # it may go deeper
            self.deepest = max(self.deepest, max(accumulate(steps, initial=self.depth)))
        self.depth += sum(steps)
        return self.deepest


def open_store(url: str) -> Store:
    """The service's store, opened without a connection if need be: a worker (re)started while the
    database does not answer serves what it can (503 for what it has not loaded, api/cache.py) and
    loads when it answers, rather than crash-looping. A worker of `autotuner serve` never migrates
    (the parent made the schema before starting it: api/cli.py); a service started on its own does,
    when the database answers."""
    if os.environ.get("AUTOTUNER_GENERATION_FILE"):  # set by `autotuner serve` once the schema is made
        return Store(url, migrate_schema=False)
    try:
        return Store(url)
    except Exception as exc:
        if not store_away(exc):  # a store this code cannot use (newer, not a database): said at once
            raise
        log.warning("the store did not answer at start: its schema is not checked; serving from memory "
                    "until it answers", exc_info=True)  # fmt: skip
        return Store(url, migrate_schema=False)


def create_app(settings: Settings | None = None, *, store: Store | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = store or open_store(settings.url)
        # `autotuner serve` gives its workers one generation file: what one has served, all serve.
        shared = os.environ.get("AUTOTUNER_GENERATION_FILE")
        reports = FingerprintReports(app.state.store, trigger=settings.revalidate_on_mismatch,
                                     executors=settings.allowed_executors)  # fmt: skip
        app.state.cache = ConfigCache(app.state.store, settings.config_refresh_s,
                                      SharedGeneration(Path(shared)) if shared else None, reports)  # fmt: skip
        app.state.cache.start()
        app.state.miss_threads = ThreadPoolExecutor(configs.MISS_THREADS, thread_name_prefix="config-miss")
        app.state.metrics = Metrics(app.state.store, app.state.cache, settings.revalidate_every_s)
        scheduler: RunningScheduler | SchedulerProcess | None = None
        if settings.scheduler:
            # `autotuner serve` starts one scheduler beside its workers and names it; an app run on its
            # own (`uvicorn --factory api.app:app_from_env`) starts its own.
            pid_file = os.environ.get("AUTOTUNER_SCHEDULER_PID_FILE")
            if pid_file:
                scheduler = RunningScheduler(Path(pid_file))
            else:
                scheduler = SchedulerProcess(scheduler_env(settings))
            scheduler.start()
        app.state.scheduler = app.state.metrics.scheduler = scheduler
        yield
        if scheduler is not None:
            scheduler.stop()
        app.state.cache.stop()
        app.state.miss_threads.shutdown(wait=False, cancel_futures=True)  # one may wait on a frozen store

    app = FastAPI(
        title="nccl-autotuner",
        version=__version__,
        summary="Tunes NCCL env, comm precision and batch size for TorchRec all-to-all; serves the result to jobs.",
        lifespan=lifespan,
        docs_url=None,  # api/docs.py serves both from local assets: FastAPI's load them from a CDN
        redoc_url=None,
        default_response_class=errors.JSONAnswer,
    )
    app.state.settings = settings
    app.state.database_probe = system.DatabaseProbe(settings.ready_timeout_s)
    errors.install(app)
    docs.install(app)
    app.include_router(system.router)
    app.include_router(studies.router)
    app.include_router(configs.router)
    try:
        from api import dashboard
    except ImportError:  # the dashboard is optional for an API-only deployment
        dashboard = None  # type: ignore[assignment]
    if dashboard is not None:
        dashboard.mount(app)
    links.install(app)

    app.add_middleware(ConfigFastPath)  # inner: runs after the Guard below
    app.add_middleware(Guard, max_bytes=settings.max_body_bytes)

    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn workers: settings from the AUTOTUNER_* environment `autotuner serve` set."""
    # the service's own lines (a study queued, a config pinned) at INFO, as the supervisor's: uvicorn's
    # log level (warning) sets its own loggers only, and a worker's root logger had no handler
    log_to_stderr()
    supervisor = os.environ.get("AUTOTUNER_SUPERVISOR_PID")
    if supervisor:  # a worker must not outlive a SIGKILLed supervisor (it would hold the port)
        die_with_parent(parent=int(supervisor))
    return create_app(Settings())
