"""The engine's errors as HTTP answers, in one place: routes raise what the engine raises.

422 bodies keep FastAPI's own shape (`detail: [{loc, msg, type}]`), so a client parses every 422
alike; locations point into the request body of `POST /v1/studies`, where these arise.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from autotuner.space import FIELDS as SPACE_FIELDS
from autotuner.space import SpaceError
from autotuner.store import NotFound
from autotuner.tuning import StudyError, StudyExists
from trials.spec import SpecError, problem_of


class JSONAnswer(JSONResponse):
    """Every JSON answer (the app's default too): non-ASCII characters escaped. A lone surrogate in a
    request (valid JSON text, not valid Unicode) echoed back in a 422, or stored and listed later,
    could not be encoded as UTF-8, and the answer became a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def invalid(loc: list[str | int], msg: str, type_: str = "value_error") -> dict[str, Any]:
    """One entry of a 422 body, in FastAPI's own shape."""
    return {"loc": loc, "msg": msg, "type": type_}


def _unprocessable(entries: list[dict[str, Any]]) -> JSONResponse:
    return JSONAnswer({"detail": entries}, status_code=422)


async def _space(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SpaceError)
    return _unprocessable([invalid(_space_loc(p.variable, p.rule), p.message, p.rule)
                           for p in exc.problems if p.severity == "error"])  # fmt: skip


_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[[0-9]+\])+)")


def _space_loc(variable: str, rule: str = "") -> list[str | int]:
    """Where a space problem is in the body: a field of the space (an item of it: `batch_sizes[0]`
    is ["batch_sizes", 0]; a field it does not have, the schema's problem, is the space's), or a
    variable of its env."""
    if not variable or variable == "space":
        return ["body", "space"]
    indexed = _INDEXED.fullmatch(variable)
    if indexed and indexed.group(1) in SPACE_FIELDS:
        return ["body", "space", indexed.group(1), *map(int, re.findall(r"[0-9]+", indexed.group(2)))]
    if variable in SPACE_FIELDS or rule == "schema":
        return ["body", "space", variable]
    return ["body", "space", "env", variable]


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
    them) was echoed back as `input`, which no JSON can carry, and the answer became a 500."""
    assert isinstance(exc, RequestValidationError)
    return _unprocessable(_finite(jsonable_encoder([_in_spec_words(e) for e in exc.errors()])))


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


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _request)
    app.add_exception_handler(SpaceError, _space)
    app.add_exception_handler(SpecError, _spec)
    app.add_exception_handler(StudyError, _study)
    app.add_exception_handler(NotFound, _not_found)
