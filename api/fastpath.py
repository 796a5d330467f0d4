"""The config fetch, served before FastAPI's router: thousands of jobs start at once.

`GET /v1/configs/{cluster}/{workload}` is the one route on every job's start-up path. Routing,
dependency injection and parameter validation cost more than the answer itself (a dict lookup of a
pre-rendered body), and with 64 connections a p99 of 20 ms needs well over 3,000 answers a second on
two cores. This middleware answers the plain, valid, authorised, cached case itself and hands
everything else (bad names, odd parameters, missing token, not published) to the FastAPI route,
which validates, documents and produces the errors. Both read the same cache.

A job's fingerprint (the X-Autotuner-Fingerprint header) picks the body that says whether it matches
what the version was validated on: a second dict lookup (api.cache.Served.matched); a stack that
differs is counted for the store (api.fingerprints) and in /metrics.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import Receive, Scope, Send

from api.auth import may, token_scope
from autotuner.job.exports import MEDIA_TYPES
from autotuner.job.fingerprint import HEADER
from autotuner.names import is_name

PREFIX = "/v1/configs/"
FINGERPRINT = HEADER.lower().encode()
ROUTE_PATH = "/v1/configs/{cluster}/{workload}"
MEDIA = {fmt: media.encode() for fmt, media in MEDIA_TYPES.items()}
MAX_NODES = 1_000_000
MAX_NODES_DIGITS = len(str(MAX_NODES))

_ROUTE = SimpleNamespace(path=ROUTE_PATH)


class ConfigFastPath:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        state = scope["app"].state
        request = self._parse(scope, state)
        if request is None:
            return await self.app(scope, receive, send)
        if not state.cache.current():  # behind the store: the route catches up off the event loop
            return await self.app(scope, receive, send)
        cluster, workload, nodes, fmt, fingerprint = request
        served = state.cache.get(cluster, workload, nodes, catch_up=False)
        if served is None or served.error:  # the route answers the 404 or 500 (and counts it)
            return await self.app(scope, receive, send)
        state.metrics.hits[fmt].inc()
        scope["route"] = _ROUTE  # the latency metric is labelled by route, as for routed requests
        if fingerprint is None:
            body = served.body[fmt]
        else:
            match = served.matched(fingerprint)
            body = match.body[fmt]
            if match.stale:
                note_stale(state, served.id, fingerprint, match.diff)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", MEDIA[fmt]), (b"content-length", str(len(body)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _parse(scope: Scope, state: Any) -> tuple[str, str, int | None, str, bytes | None] | None:
        """(cluster, workload, nodes, format, fingerprint header) of a plain, valid, authorised
        request; else None."""
        parts = scope["path"][len(PREFIX) :].split("/")
        if len(parts) != 2 or not all(is_name(p) for p in parts):
            return None
        nodes: int | None = None
        fmt = "json"
        for key, value in _query(scope["query_string"]):
            if key == "nodes" and _is_nodes(value):
                nodes = int(value)
            elif key == "format" and value in MEDIA:
                fmt = value
            else:
                return None
        authorization: bytes | None = None
        fingerprint: bytes | None = None
        # One pass over the headers, the first of each kept: the route reads them with Starlette's
        # Headers.get, which gives the first, so a repeated header gets the same answer from both (the
        # last was used here: a bad token then a good one was served here and refused by the route).
        for header, raw in scope["headers"]:
            if header == b"authorization" and authorization is None:
                authorization = raw
            elif header == FINGERPRINT and fingerprint is None:
                fingerprint = raw
        if not state.settings.public_read and not _may_read(authorization, state.settings.token_scopes):
            return None
        return parts[0], parts[1], nodes, fmt, fingerprint


def note_stale(state: Any, config_id: int, header: bytes, diff: dict[str, list[str]]) -> None:
    """A job on another stack than the one its version was validated on: counted, and told to the
    store off the request path (the route does the same)."""
    state.metrics.fingerprint_mismatches.inc()
    if state.cache.reports is not None:
        state.cache.reports.note(config_id, header, diff)


def _is_nodes(value: str) -> bool:
    # ASCII digits only: str.isdigit() also takes "²" (int() fails) and "٣" (the route refuses it). No more
    # digits than MAX_NODES has: int() of over 4,300 raises (a 500); the route answers such a value's 422.
    return (
        value.isascii()
        and value.isdigit()
        and len(value) <= MAX_NODES_DIGITS
        and 1 <= int(value) <= MAX_NODES
    )


def _query(raw: bytes) -> list[tuple[str, str]]:
    """The query's (name, value) pairs as `parse_qsl(..., keep_blank_values=True)` reads them. A query
    with no escapes (what jobs send) is split directly, in a fifth of parse_qsl's time."""
    text = raw.decode("latin-1")
    if "%" in text or "+" in text:
        return parse_qsl(text, keep_blank_values=True)
    return [(name, value) for name, _, value in (part.partition("=") for part in text.split("&") if part)]


def _may_read(header: bytes | None, tokens: dict[str, str]) -> bool:
    return may(token_scope((header or b"").decode("latin-1"), tokens), "read")
