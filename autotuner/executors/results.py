"""What the tuner takes from a trial's result, checked before any of it is stored or believed.

The result (trials/result.schema.json) is written by a process on a node into a directory anyone who can
run jobs there could write too. A wrong type must not fail the study, an infinite throughput must not win
it, a candidate's figures must not be credited to its neighbour. A result that cannot be used at all
fails its launch with the reason (`parse_result` raises `ResultError`); a candidate that cannot be used
fails alone (`candidate_problem`), the others recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from autotuner.limits import limits
from autotuner.text import cleaned_in_place
from trials.choices import PRECISIONS
from trials.result import BREAKDOWN_PARTS, SCHEMA_VERSION

MAX_TEXT = 4000  # characters of an error, a reason or a log tail that are stored and served
# A name or version a result reports of its stack (GPU model, driver, NCCL, network): the cluster's
# fingerprint copies them into every config published there, which jobs fetch (the hook reads at most
# 1 MiB, and keeps 200 characters of each): one node's megabytes must not break every job's fetch.
MAX_NAME = 200
MAX_VERSIONS = 32  # entries of `versions` (a trial writes up to 6: python, torch, torchrec, ...)
# How far samples/s may stray from batch x world size / median step (the trial computes it so).
RATE_TOLERANCE = 0.01
MULTILINE = frozenset({"error"})  # strings of a result that keep their line breaks (a traceback)


class ResultError(ValueError):
    """The result cannot be used at all: its launch fails with this reason."""


def clip(text: object, limit: int = MAX_TEXT) -> str:
    """Text as stored: a string, at most `limit` characters and a note of what was cut."""
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit:,} more characters]"


def finite(value: Any) -> bool:
    """A number JSON can carry and arithmetic can trust: not a bool, NaN, an infinity or an integer
    too large for a float (JSON's integers have no bound; 1 followed by 400 zeros overflows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return -MAX_NUMBER <= value <= MAX_NUMBER if isinstance(value, int) else math.isfinite(value)


MAX_NUMBER = 1e300  # compared exactly with any int; far above any figure a trial measures
MAX_DEPTH = 32  # levels of nesting a result may have (its schema has 6): deeper, it was not a trial's


# Objects and lists a result may hold: parsed, each takes ~60-100 bytes for the 2-3 bytes of "{}," (24x
# the file's size), where numbers take 8-15x. A trial's result holds one list a call and rank, ~500 bytes
# each (~45,000 at 192 ranks and 15 candidates); a file of 64 MiB of "{}," held 1.5 GiB parsed, enough to
# have a small service killed. One per 64 bytes of the byte cap, at least a million.
MIN_CONTAINERS = 1_000_000


def max_containers() -> int:
    return max(MIN_CONTAINERS, limits().max_result_bytes // 64)


_END = object()


def _depth(value: Any) -> int:
    """How deeply `value` nests (iteratively: a deep one must not overflow the stack it is checked on;
    one iterator a level, not one entry an item: a list of 20 million items made 20 million)."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest, stack = 1, [iter(_items(value))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, (dict, list)):
            deepest = max(deepest, len(stack) + 1)
            if len(stack) < MAX_DEPTH:
                stack.append(iter(_items(item)))
    return deepest


def _items(value: dict[str, Any] | list[Any]) -> Any:
    return value.values() if isinstance(value, dict) else value


def _containers(data: bytes | str) -> int:
    """At least the objects and lists `data` holds (a brace inside a string counts too)."""
    return (
        data.count(b"{") + data.count(b"[") if isinstance(data, bytes) else data.count("{") + data.count("[")
    )


# ------------------------------------------------------------------------------ value checks
# Each says what a value should be ("" when it is that), in words for the reason a launch fails with.


def _number(minimum: float = 0.0, *, above: bool = False) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        ok = finite(v) and (v > minimum if above else v >= minimum)
        return "" if ok else f"a finite number {'>' if above else '>='} {minimum:g}"

    return check


def _count(v: Any) -> str:
    return "" if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2**53 else "an integer >= 1"


def _text(v: Any) -> str:
    return "" if isinstance(v, str) else "a string"


def _name(v: Any) -> str:
    return "" if isinstance(v, str) and len(v) <= MAX_NAME else f"a string of at most {MAX_NAME} characters"


def _versions(v: Any) -> str:
    ok = (
        isinstance(v, dict)
        and len(v) <= MAX_VERSIONS
        and all(len(k) <= MAX_NAME and (x is None or not _name(x)) for k, x in v.items())
    )
    want = (
        f"an object of at most {MAX_VERSIONS} names to strings (or null), each at most {MAX_NAME} characters"
    )
    return "" if ok else want


def _texts(v: Any) -> str:
    return "" if isinstance(v, list) and all(isinstance(x, str) for x in v) else "a list of strings"


def _text_map(v: Any) -> str:
    ok = isinstance(v, dict) and all(isinstance(x, (str, type(None))) for x in v.values())
    return "" if ok else "an object of strings"


def _precision(v: Any) -> str:
    # stored in a column of 8 characters, shown and published as what ran: one of the trial's own
    return "" if isinstance(v, str) and v in PRECISIONS else f"one of {', '.join(PRECISIONS)}"


def _fraction(v: Any) -> str:
    return "" if finite(v) and 0 <= v <= 1 else "a number from 0 to 1"


def _seed(v: Any) -> str:
    return "" if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**53 else "an integer >= 0"


def _object(v: Any) -> str:
    return "" if isinstance(v, dict) else "an object"


def _curve(v: Any) -> str:
    pair = _number()
    ok = isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and not pair(p[0]) and not pair(p[1]) for p in v
    )
    return "" if ok else "a list of [samples, log loss] pairs of finite numbers"


def _optional(check: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "" if v is None else check(v) and f"{check(v)} or null"


def _problems(data: Mapping[str, Any], fields: Mapping[str, Callable[[Any], str]], where: str) -> str | None:
    """The first field of `data` that is not what it should be (a missing one reads as null)."""
    for name, check in fields.items():
        want = check(data.get(name))
        if want:
            return f"{where}{name} is {_shown(data.get(name))}, expected {want}"
    return None


def _shown(value: Any) -> str:
    return "missing" if value is None else clip(json.dumps(value, default=str), 60)


# What the tuner reads of a result's own facts (the cluster's fingerprint, where NCCL ran, the cost). What
# goes into the fingerprint is bounded (MAX_NAME, MAX_VERSIONS): refused, not clipped, as any value a
# trial would not write (a clipped name would pass for the stack's own).
_TOP = {
    "world_size": _count,
    "nnodes": _optional(_count),
    "local_world_size": _optional(_count),
    "setup_s": _optional(_number()),
    "wall_s": _optional(_number()),
    "backend": _optional(_name),
    "device": _optional(_name),
    "device_name": _optional(_name),
    "driver_version": _optional(_name),
    "hosts": _optional(_texts),
    "versions": _optional(_versions),
    "env": _optional(_text_map),
    "nccl_effective": _optional(_object),
}
_NCCL_EFFECTIVE = {
    "network": _optional(_name),
    "ofi_plugin_version": _optional(_name),
    "ofi_provider": _optional(_name),
    "transport_kinds": _optional(_texts),
    "nnodes": _optional(_count),
}
_STATS = {"median": _number(above=True), "cv": _number()}  # a step takes time: 0 implies any rate
_TIMING = {
    "samples_per_s": _number(above=True),
    "iter_ms": _object,
    "a2a_ms": _object,
    "a2a_bytes_per_iter": _number(),
    "busbw_gbps": _number(),
    "dense_allreduce_bytes": _optional(_number()),
    "effective_fwd_precision": _optional(_precision),
    "effective_bwd_precision": _optional(_precision),
    "quant_error": _optional(_object),
    "breakdown_ms": _optional(_object),
}
_QUANT = {"fwd_rel_l2": _optional(_number()), "bwd_rel_l2": _optional(_number())}
_QUALITY = {
    "logloss": _number(),
    "auc": _fraction,
    "train_samples": _count,
    "eval_samples": _count,
    "budget_samples": _optional(_count),
    "model_seed": _optional(_seed),  # a float seed failed the whole study where the check pairs seeds
    "lr_scale": _optional(_number(above=True)),  # copied into the evidence unchecked, then unreadable
    "curve": _optional(_curve),
}
# A candidate is recorded as what the launch asked for: these must be what it asked.
_IDENTITY = ("fwd_precision", "bwd_precision", "batch_size")
_IDENTITY_IF_GIVEN = ("sharding", "pipeline", "num_threads")


# ------------------------------------------------------------------------------ the result


def parse_result(
    data: bytes | str, spec: Mapping[str, Any] | None = None, world_size: int | None = None
) -> dict[str, Any]:
    """The result as the tuner may use it; ResultError naming what is wrong otherwise. With the launch's
    `spec`, it must hold one result per candidate the launch asked for; with the launch's `world_size`
    (nodes x ranks per node), it must say so (the rate check multiplies by it: 4096 would pass off a
    2-rank launch's step as 2,000x the samples/s)."""
    if (containers := _containers(data)) > (most := max_containers()):
        raise ResultError(f"{containers:,} objects and lists (every {{ and [ counted), more than a trial's "
                          f"result holds (at most {most:,}, one per 64 bytes of AUTOTUNER_MAX_RESULT_BYTES): "
                          "not parsed")  # fmt: skip
    try:
        result = json.loads(data)
    except RecursionError:
        raise ResultError(f"its JSON nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultError(f"not JSON ({clip(exc, 200)})") from None
    if not isinstance(result, dict):
        raise ResultError(f"a JSON {type(result).__name__}, not an object")
    if _depth(result) > MAX_DEPTH:
        raise ResultError(f"its JSON nests deeper than {MAX_DEPTH} levels")
    version = result.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # true and 1.0 compare equal to 1
        raise ResultError(f"schema_version is {_shown(version)}, expected {SCHEMA_VERSION}")
    status = result.get("status")
    if status == "error":  # the launch failed as a whole (trials.run.error_result)
        error = result.get("error")
        if not isinstance(error, str) or not error.strip():
            raise ResultError("status is error, with no error message")
        return cleaned_in_place({**result, "error": clip(error)}, MULTILINE)
    if status not in ("ok", "partial", "failed"):
        raise ResultError(f"status is {_shown(status)}, expected ok, partial, failed or error")
    problem = _problems(result, _TOP, "") or _problems(result.get("nccl_effective") or {}, _NCCL_EFFECTIVE,
                                                       "nccl_effective.")  # fmt: skip
    if problem:
        raise ResultError(problem)
    if world_size is not None and result["world_size"] != world_size:
        raise ResultError(f"world_size is {_shown(result['world_size'])}, the launch ran {world_size} ranks")
    candidates = result.get("candidates")
    if not isinstance(candidates, list):
        raise ResultError(f"candidates is {_shown(candidates)}, expected a list")
    asked = None if spec is None else len(spec.get("candidates") or [])
    if asked is not None and len(candidates) != asked:
        raise ResultError(
            f"{len(candidates)} candidate results for the {asked} candidates the launch asked for"
        )
    return cleaned_in_place(
        result, MULTILINE
    )  # its strings reach terminals, logs and pages: shown, never obeyed


def candidate_problem(
    measured: Any,
    planned: Mapping[str, Any],
    index: int,
    world_size: int | None,
    *,
    quality: bool | None = None,
) -> str | None:
    """Why candidate `index`'s result cannot be recorded for the candidate `planned` (None: it can).
    `world_size`: the result's, which a timing's samples/s must agree with (None: not checked);
    `quality`: whether the launch asked for a convergence check's scores rather than timings (None: not
    checked; scores in a timing launch were an ok row with no figures, "the baseline fastest")."""
    if not isinstance(measured, dict):
        return f"candidate {index}'s result is {_shown(measured)}, expected an object"
    if measured.get("index", index) != index:
        return f"candidate {index}'s result says it is candidate {_shown(measured.get('index'))}"
    for key in (*_IDENTITY, *_IDENTITY_IF_GIVEN):
        want, got = planned.get(key), measured.get(key)
        if got != want and (key in _IDENTITY or (want is not None and got is not None)):
            return (
                f"candidate {index}'s result is for {key} {_shown(got)}, the launch asked for {_shown(want)}"
            )
    status = measured.get("status")
    if status == "failed":
        return None
    if status != "ok":
        return f"candidate {index}: status is {_shown(status)}, expected ok or failed"
    if quality is not None and ("quality" in measured) != quality:
        asked = "a convergence check's scores" if quality else "timings"
        return f"candidate {index}: the launch asked for {asked}, the result {'has none' if quality else 'has scores'}"
    if "quality" in measured:
        quality = measured["quality"]
        if not isinstance(quality, dict):
            return f"candidate {index}: quality is {_shown(quality)}, expected an object"
        return _problems(quality, _QUALITY, f"candidate {index}: quality.")
    return _timing_problem(measured, index, world_size)


def _timing_problem(measured: dict[str, Any], index: int, world_size: int | None) -> str | None:
    where = f"candidate {index}: "
    problem = (
        _problems(measured, _TIMING, where)
        or _problems(measured["iter_ms"], _STATS, f"{where}iter_ms.")
        or _problems(measured["a2a_ms"], {"median": _number()}, f"{where}a2a_ms.")
        or _problems(measured.get("quant_error") or {}, _QUANT, f"{where}quant_error.")
        or _problems(measured.get("breakdown_ms") or {}, dict.fromkeys(BREAKDOWN_PARTS, _optional(_number())),
                     f"{where}breakdown_ms.")
    )  # fmt: skip
    if problem or world_size is None:
        return problem
    step_ms, rate = measured["iter_ms"]["median"], measured["samples_per_s"]
    implied = measured["batch_size"] * world_size * 1000 / step_ms
    if not math.isfinite(implied) or abs(rate - implied) > RATE_TOLERANCE * implied:
        return (f"{where}samples_per_s {rate:.6g} is not batch {measured['batch_size']} x world size "
                f"{world_size} / median step {step_ms:.6g} ms = {implied:.6g}")  # fmt: skip
    return None
