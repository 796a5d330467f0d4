"""The engine's errors as HTTP answers, in one place: routes raise what the engine raises.

422 bodies keep FastAPI's own shape (`detail: [{loc, msg, type}]`), so a client parses every 422
alike; locations point into the request body of `POST /v1/studies`, where these arise.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import reprlib
import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import Match

from autotuner.envvars import Problem
from autotuner.space import FIELDS as SPACE_FIELDS
from autotuner.space import SpaceError
from autotuner.store import NotFound
from autotuner.store.db import finite_or_null
from autotuner.tuning import StudyError, StudyExists
from autotuner.tuning.lease import store_unavailable
from trials.spec import SpecError, problem_of

log = logging.getLogger("autotuner.api")


class JSONAnswer(JSONResponse):
    """Every JSON answer (the app's default too): non-ASCII characters escaped. A lone surrogate in a
    request (valid JSON text, not valid Unicode) echoed back in a 422, or stored and listed later,
    could not be encoded as UTF-8, and the answer became a 500; so did one study's NaN or infinite
    figure, for the whole listing (said as null: an unknown figure)."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()
        except ValueError:  # NaN or an infinity in a row written by hand or by an older version: null
            return json.dumps(finite_or_null(content), ensure_ascii=True, separators=(",", ":")).encode()


def invalid(loc: list[str | int], msg: str, type_: str = "value_error") -> dict[str, Any]:
    """One entry of a 422 body, in FastAPI's own shape."""
    return {"loc": loc, "msg": msg, "type": type_}


def _unprocessable(entries: list[dict[str, Any]]) -> JSONResponse:
    return JSONAnswer({"detail": entries}, status_code=422)


async def _space(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SpaceError)
    return _unprocessable([invalid(_space_loc(p), p.message, p.rule)
                           for p in exc.problems if p.severity == "error"])  # fmt: skip


# A field of the space and the path inside it: `batch_sizes[0]`, `ladder[1].step`, `env.NCCL_X`.
_FIELD_PATH = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[[0-9]+\]|\.[^.\[]+)*)")
_PATH_PART = re.compile(r"\[([0-9]+)\]|\.([^.\[]+)")
UNKNOWN_FIELD = "unknown field"  # autotuner.space.schema_problems: a field the space does not have


def _space_loc(problem: Problem) -> list[str | int]:
    """Where a space problem is in the body: the entry it names (`fixed_env`'s key, `allow_risky`'s
    item), a field of the space (an item of it: `batch_sizes[0]` is ["batch_sizes", 0]), a field it
    does not have (the space's), or else a variable of its env (a schema problem of an env value was
    put at the space, as if the variable were a field)."""
    variable = problem.variable
    if problem.where:  # an entry of fixed_env or allow_risky
        return ["body", "space", *problem.where]
    if not variable or variable == "space":
        return ["body", "space"]
    path = _FIELD_PATH.fullmatch(variable)
    if path and path.group(1) in SPACE_FIELDS:
        parts = _PATH_PART.findall(path.group(2))
        return ["body", "space", path.group(1), *(int(i) if i else key for i, key in parts)]
    if problem.rule == "schema" and problem.message.startswith(UNKNOWN_FIELD):
        return ["body", "space", variable]
    return ["body", "space", "env", _unquoted(variable)]


def _unquoted(variable: str) -> str:
    """The body's key for a name that is no variable name: the space's checks name it repr'd
    (`'BAD-NAME'`, control characters escaped), which no client finds in its body. One cut short
    (`'XXX...`) loses its closing quote and is given cut, without the opening one."""
    if variable[:1] not in ("'", '"'):
        return variable
    try:
        name = ast.literal_eval(variable)
    except (ValueError, SyntaxError):
        return variable[1:]
    return name if isinstance(name, str) else variable


async def _spec(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SpecError)
    return _unprocessable([invalid(["body", *exc.where.split(".")], exc.problem)])


async def _study(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, StudyExists):
        return JSONAnswer({"detail": str(exc)}, status_code=409)
    assert isinstance(exc, StudyError)
    return _unprocessable([invalid(["body", *filter(None, exc.where.split("."))], str(exc))])


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return JSONAnswer({"detail": str(exc)}, status_code=404)


async def _request(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own 422, made JSON-safe: a NaN or an infinity in the request (Python's JSON reads
    them) was echoed back as `input`, which no JSON can carry, and the answer became a 500; so was a
    value nested hundreds deep (the encoders recurse), which is echoed as a short repr."""
    assert isinstance(exc, RequestValidationError)
    said = [_not_json(request, e) or _in_spec_words(e) for e in exc.errors()]
    return _unprocessable([{k: _echo(v) for k, v in e.items()} for e in said])


def _not_json(request: Request, error: dict[str, Any]) -> dict[str, Any] | None:
    """A body that was not sent as JSON (`curl -d` sends a form's type) is read as text, which is no
    object: the error said "Input should be a valid dictionary", echoing the JSON it was given."""
    if tuple(error.get("loc", ())) != ("body",) or error.get("type") == "missing":
        return None
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    sent = f"Content-Type {media!r}" if media else "no Content-Type"
    return {"loc": ["body"], "type": "content_type", "input": None,
            "msg": f"the body is read as JSON only: send it with Content-Type: application/json ({sent} was sent)"}  # fmt: skip


def _in_spec_words(error: dict[str, Any]) -> dict[str, Any]:
    """A workload's error as the trial and the CLI say it (trials.spec.problem_of): one line, at the
    field at fault (a rule between fields points at the field it names)."""
    loc = tuple(error.get("loc", ()))
    if loc[:2] != ("body", "workload"):
        return error
    at, problem = problem_of({**error, "loc": loc[2:]})
    return {
        "loc": ["body", "workload", *at],
        "msg": problem,
        "type": error.get("type"),
        "input": error.get("input"),
    }


PARSE_FAILED = "There was an error parsing the body"  # FastAPI's 400 when json.loads raised, not a JSON error


async def _http(request: Request, exc: Exception) -> Response:
    """FastAPI's own answer to an HTTPException, except its 400 for a body Python's JSON parser gave up
    on, which said only that the body could not be parsed: it says why."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405 and (allowed := _allowed(request)):  # inside a mount: its own answer stands
        exc = HTTPException(405, exc.detail, headers={"Allow": allowed})
    why = _unparsed(exc.__cause__) if exc.status_code == 400 and exc.detail == PARSE_FAILED else None
    if why is None:
        return await http_exception_handler(request, exc)
    return JSONAnswer({"detail": f"the body cannot be read as JSON: {why}"}, status_code=400)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> str:
    """Every method the path takes. Starlette's 405 names only the first route on the path (`OPTIONS
    /v1/studies` said `Allow: POST`, though GET lists studies): each method is a route of its own. Asked
    of the router per method, as routing itself does (FastAPI nests included routers from 0.1xx on)."""
    return ", ".join(
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    )


def _unparsed(cause: BaseException | None) -> str | None:
    if isinstance(cause, UnicodeDecodeError):
        return f"it is not UTF-8 text (byte {cause.start} is 0x{cause.object[cause.start]:02x})"
    if isinstance(cause, RecursionError):
        return f"arrays or objects are nested too deep (the parser reads fewer than {sys.getrecursionlimit()} levels)"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return f"an integer has more than {sys.get_int_max_str_digits()} digits"
    return None


ECHO_DEPTH = 16  # a 422 echoes a value as given to this depth; deeper, as a short repr
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60


def _echo(value: Any) -> Any:
    """`value` as a 422 may echo it: JSON-safe (NaN as "nan"), or, where it nests deeper than
    ECHO_DEPTH, a short repr (reprlib's depth is bounded): jsonable_encoder and _finite recurse, and
    a value ~900 deep (a body under 2 KB) was a 500 and a traceback of 150 KB in the log."""
    if _nests_deeper(value, ECHO_DEPTH):
        return _SHORT.repr(value)[:200]
    return _finite(jsonable_encoder(value), ECHO_DEPTH + 1)


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether lists, tuples or dicts in `value` nest more than `limit` deep; iterative."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else ()
        )
        if children and depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _finite(value: Any, depth: int) -> Any:
    """`value` with NaN and the infinities as text; `depth` more levels at most, then a short repr."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, (dict, list)) and depth <= 0:
        return _SHORT.repr(value)[:200]
    if isinstance(value, dict):
        return {k: _finite(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v, depth - 1) for v in value]
    return value


STORE_RETRY_S = 5  # Retry-After of a 503 for a store that did not answer: a restart or failover


async def _store_error(request: Request, exc: Exception) -> Response:
    """A database error: the store away (gone, restarting, locked, full) is a 503 that names it, with
    Retry-After; it was a bare 500 and a traceback for every route but the config fetch. Any other is
    the 500 it was (a bug, logged as one)."""
    if not store_unavailable(exc):  # SQLite's "no such column" is an OperationalError too: a 500
        raise exc
    # The driver's words name the database's host: the log has them, a client gets the kind alone.
    log.warning("%s %r: the store did not answer: %s", request.method, request.url.path, exc)
    kind = type(getattr(exc, "orig", None) or exc).__name__
    return JSONAnswer({"detail": f"the store did not answer ({kind}): try again"},
                      status_code=503, headers={"Retry-After": str(STORE_RETRY_S)})  # fmt: skip


def install(app: FastAPI) -> None:
    app.add_exception_handler(DBAPIError, _store_error)
    app.add_exception_handler(PoolTimeout, _store_error)
    app.add_exception_handler(RequestValidationError, _request)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(SpaceError, _space)
    app.add_exception_handler(SpecError, _spec)
    app.add_exception_handler(StudyError, _study)
    app.add_exception_handler(NotFound, _not_found)
