"""A trial's result is checked before the tuner stores or believes any of it (autotuner.executors.results).

Real results pass whole: every result recorded in the replay landscape and a real trial's result. Each
hostile variant of one is refused with a reason that names the field: the whole result when it cannot be
used at all, one candidate when only that candidate's figures are wrong."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest

from autotuner.executors.results import (
    MAX_TEXT,
    MULTILINE,
    ResultError,
    candidate_problem,
    clip,
    parse_result,
)
from autotuner.text import cleaned, cleaned_in_place
from tests.helpers import DATA, LANDSCAPE, REPO

REAL = json.loads((DATA / "trial-result-dlrm.json").read_text())
SPEC = {
    "candidates": [
        {k: c[k] for k in ("fwd_precision", "bwd_precision", "batch_size")} for c in REAL["candidates"]
    ]
}


def text(result: object) -> str:
    return json.dumps(result)


def test_real_results_pass_whole():
    assert parse_result(text(REAL), SPEC) == REAL
    for index, (planned, measured) in enumerate(zip(SPEC["candidates"], REAL["candidates"], strict=True)):
        assert candidate_problem(measured, planned, index, REAL["world_size"]) is None


def test_every_recorded_landscape_result_passes():
    landscape = json.loads(LANDSCAPE.read_text())
    checked = 0
    for point in landscape["points"]:
        for measured in point["results"]:
            problem = candidate_problem(
                measured, point["candidate"], measured["index"], landscape["world_size"]
            )
            assert problem is None, (point["candidate"], problem)
            checked += 1
    assert checked >= 32  # the whole grid, every repeat


def but(**changes) -> dict:
    result = copy.deepcopy(REAL)
    result.update(changes)
    return result


# A result no part of which can be used: the launch fails with this reason.
WHOLE = {
    "not JSON": (b'{"schema_version": 1, "status": "ok"', "not JSON"),
    "not UTF-8": (text(REAL).encode()[:-3] + b'\xff\xfe"}', "not JSON"),
    "nested 100,000 deep": ('{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests deeper than 32 levels"),
    # 3 MiB that parse into ~80 MiB (64 MiB of it, the file cap, held 1.5 GiB): refused before parsing
    "1.1 million objects": ('{"schema_version": 1, "x": [' + "{}," * 1_100_000 + "{}]}",
                            "1,100,003 objects and lists (every { and [ counted), more than a trial's result holds (at "
                            "most 1,048,576, one per 64 bytes of AUTOTUNER_MAX_RESULT_BYTES): not parsed"),
    "a list": ("[1, 2]", "a JSON list, not an object"),
    "another schema": (text(but(schema_version=2)), "schema_version is 2, expected 1"),
    "a schema version true": (text(but(schema_version=True)), "schema_version is true, expected 1"),
    "a schema version 1.0": (text(but(schema_version=1.0)), "schema_version is 1.0, expected 1"),
    "an unknown status": (text(but(status="great")), 'status is "great"'),
    "an error without a message": (text({"schema_version": 1, "status": "error", "error": {"a": 1}}),
                                   "status is error, with no error message"),
    "no candidates": (text({k: v for k, v in REAL.items() if k != "candidates"}), "candidates is missing"),
    "candidates not a list": (text(but(candidates=5)), "candidates is 5, expected a list"),
    "one candidate short": (text(but(candidates=REAL["candidates"][:1])),
                            "1 candidate results for the 3 candidates the launch asked for"),
    "world size a string": (text(but(world_size="2")), 'world_size is "2", expected an integer >= 1'),
    "world size true": (text(but(world_size=True)), "world_size is true, expected an integer >= 1"),
    "setup_s a string": (text(but(setup_s="soon")), 'setup_s is "soon", expected a finite number >= 0 or null'),
    "wall_s infinite": (text(but(wall_s=math.inf)), "wall_s is Infinity"),
    "env of numbers": (text(but(env={"NCCL_NSOCKS_PERTHREAD": 4})), "env is"),
    "nccl_effective a list": (text(but(nccl_effective=[1])), "nccl_effective is [1], expected an object"),
    "a network that is not a name": (text(but(nccl_effective={"network": ["Socket"]})), "nccl_effective.network"),
    # what the cluster's fingerprint copies into every published config: one node's megabytes broke every
    # job's config fetch there
    "a 2 MiB device name": (text(but(device_name="H100" + "x" * (2 << 20))),
                            'device_name is "H100' + "x" * 55 + ' [... 2,097,098 more characters], expected a string '
                            "of at most 200 characters or null"),
    "a driver of 201 characters": (text(but(driver_version="5" * 201)), 'driver_version is "5555'),
    "a backend of 201 characters": (text(but(backend="n" * 201)), "backend is"),
    "a version of 201 characters": (text(but(versions={"nccl": "2." + "9" * 199})), "versions is"),
    "a version name of 201 characters": (text(but(versions={"n" * 201: "2.21.5"})), "versions is"),
    "33 versions": (text(but(versions={f"lib{i}": "1.0" for i in range(33)})),
                    "expected an object of at most 32 names to strings (or null), each at most 200 characters"),
    "a plugin version of 201 characters": (text(but(nccl_effective={"ofi_plugin_version": "1" * 201})),
                                           "nccl_effective.ofi_plugin_version is"),
    "a network of 201 characters": (text(but(nccl_effective={"network": "S" * 201})), "nccl_effective.network is"),
}  # fmt: skip


@pytest.mark.parametrize(("data", "why"), list(WHOLE.values()), ids=list(WHOLE))
def test_a_result_that_cannot_be_used_is_refused_with_the_reason(data, why):
    with pytest.raises(ResultError, match=re.escape(why)):
        parse_result(data, SPEC)


def test_an_error_result_keeps_a_bounded_message():
    result = parse_result(text({"schema_version": 1, "status": "error", "error": "E" * 100_000}), SPEC)
    assert result["error"].startswith("E" * MAX_TEXT)
    assert len(result["error"]) < MAX_TEXT + 100


def first(**changes) -> dict:
    measured = copy.deepcopy(REAL["candidates"][0])
    measured.update(changes)
    return measured


# One candidate's figures that cannot be its measurement: it fails alone.
CANDIDATE = {
    "not an object": ("x", "candidate 0's result is \"x\", expected an object"),
    "another index": (first(index=1), "candidate 0's result says it is candidate 1"),
    "another precision": (first(fwd_precision="int8"), 'fwd_precision "int8", the launch asked for "fp32"'),
    "another batch": (first(batch_size=999_999), "batch_size 999999, the launch asked for"),
    "an unknown status": (first(status=None), "status is missing, expected ok or failed"),
    "NaN samples/s": (first(samples_per_s=math.nan), "samples_per_s is NaN, expected a finite number > 0"),
    "infinite samples/s": (first(samples_per_s=math.inf), "samples_per_s is Infinity"),
    "negative samples/s": (first(samples_per_s=-5.0), "samples_per_s is -5.0, expected a finite number > 0"),
    "samples/s a string": (first(samples_per_s="fast"), 'samples_per_s is "fast"'),
    "samples/s true": (first(samples_per_s=True), "samples_per_s is true"),
    "1e308 samples/s": (first(samples_per_s=1e308), "samples_per_s 1e+308 is not batch"),
    "no step times": ({k: v for k, v in first().items() if k != "iter_ms"}, "iter_ms is missing, expected an object"),
    "a NaN median step": (first(iter_ms={**REAL["candidates"][0]["iter_ms"], "median": math.nan}),
                          "iter_ms.median is NaN"),
    "a string cv": (first(iter_ms={**REAL["candidates"][0]["iter_ms"], "cv": "x"}), 'iter_ms.cv is "x"'),
    "a string busbw": (first(busbw_gbps="x"), 'busbw_gbps is "x"'),
    "a string quant error": (first(quant_error={"fwd_rel_l2": "0.1", "bwd_rel_l2": None}),
                             'quant_error.fwd_rel_l2 is "0.1"'),
    "a NaN quant error": (first(quant_error={"fwd_rel_l2": math.nan, "bwd_rel_l2": None}),
                          "quant_error.fwd_rel_l2 is NaN"),
    "a breakdown that is a list": (first(breakdown_ms=[1, 2]), "breakdown_ms is [1, 2], expected an object"),
    "a string in the breakdown": (first(breakdown_ms={"compute": "slow"}), 'breakdown_ms.compute is "slow"'),
    "an object as precision": (first(effective_fwd_precision={"x": 1}), "effective_fwd_precision is"),
    # over the column's 8 characters (the whole launch failed on PostgreSQL), or shown as what ran
    "a precision no trial runs": (first(effective_fwd_precision="fp8-e4m3fn"),
                                  'effective_fwd_precision is "fp8-e4m3fn", expected one of fp32, fp16'),
}  # fmt: skip


@pytest.mark.parametrize(("measured", "why"), list(CANDIDATE.values()), ids=list(CANDIDATE))
def test_a_candidate_whose_figures_cannot_be_its_measurement_fails_alone(measured, why):
    problem = candidate_problem(measured, SPEC["candidates"][0], 0, REAL["world_size"])
    assert problem is not None
    assert why in problem


def test_a_failed_candidate_needs_no_figures():
    failed = {**SPEC["candidates"][0], "index": 0, "status": "failed", "error": "rank 1: OOM"}
    assert candidate_problem(failed, SPEC["candidates"][0], 0, 2) is None


QUALITY = {"logloss": 0.58, "auc": 0.76, "train_samples": 65536, "eval_samples": 8192, "model_seed": 1,
           "budget_samples": 65536, "curve": [[16384, 0.6], [65536, 0.58]]}  # fmt: skip


@pytest.mark.parametrize(
    ("quality", "why"),
    [
        ({**QUALITY, "logloss": math.nan}, "quality.logloss is NaN"),
        ({**QUALITY, "auc": "0.7"}, 'quality.auc is "0.7"'),
        ({**QUALITY, "train_samples": 0}, "quality.train_samples is 0, expected an integer >= 1"),
        ({**QUALITY, "curve": [[1, "x"]]}, "quality.curve is"),
        ("scores", 'quality is "scores", expected an object'),
        # a float seed failed the whole study (the check pairs seeds); a text factor made its outcome unreadable
        ({**QUALITY, "model_seed": 1.5}, "quality.model_seed is 1.5, expected an integer >= 0"),
        ({**QUALITY, "lr_scale": "fast"}, 'quality.lr_scale is "fast"'),
        ({**QUALITY, "lr_scale": -3}, "quality.lr_scale is -3"),
        ({**QUALITY, "auc": 5.0}, "quality.auc is 5.0, expected a number from 0 to 1"),
    ],
    ids=[
        "nan-logloss",
        "string-auc",
        "no-samples",
        "bad-curve",
        "not-an-object",
        "float-seed",
        "text-lr-scale",
        "negative-lr-scale",
        "auc-over-1",
    ],
)
def test_a_convergence_score_must_be_finite_numbers(quality, why):
    planned = SPEC["candidates"][0]
    assert candidate_problem({**planned, "status": "ok", "quality": QUALITY}, planned, 0, 2) is None
    problem = candidate_problem({**planned, "status": "ok", "quality": quality}, planned, 0, 2)
    assert problem is not None
    assert why in problem


def test_clip_keeps_short_text_and_says_what_it_cut():
    assert clip("short") == "short"
    assert clip({"a": 1}) == "{'a': 1}"
    assert clip("x" * 50, 10) == "x" * 10 + " [... 40 more characters]"


def test_what_the_tuner_requires_the_trial_promises():
    """Every figure the tuner refuses to do without is one the result schema requires of the trial
    (trials/result.schema.json): the two sides of the contract cannot drift apart unnoticed."""
    from autotuner.executors import results

    schema = json.loads((REPO / "trials" / "result.schema.json").read_text())
    launch = schema["$defs"]["launch_result"]  # a result that is not status error
    timing = launch["properties"]["candidates"]["items"]["then"]["required"]
    required = [k for k, check in results._TIMING.items() if check(None)]  # a check that refuses null
    assert required == ["samples_per_s", "iter_ms", "a2a_ms", "a2a_bytes_per_iter", "busbw_gbps"]
    assert set(required) <= set(timing)
    assert [k for k, check in results._TOP.items() if check(None)] == ["world_size"]
    assert "world_size" in launch["required"]


def test_a_large_result_of_real_shape_parses_and_is_cleaned_in_place():
    """192 ranks, 5 all-to-all calls each, their splits: the call log that grows with the square of the
    ranks stays far below the cap on objects and lists; its strings are cleaned as a copy would be."""
    ranks = 192
    calls = [{"dtype": "float32", "in_numel": 4096, "out_numel": 4096, "in_splits": [16] * ranks,
              "out_splits": [16] * ranks} for _ in range(5)]  # fmt: skip
    result = but(candidates=[{**c, "a2a_calls_by_rank": [calls] * ranks} for c in REAL["candidates"]])
    result["hosts"] = ["node\x1b[2J-0", "node-1"]  # a terminal's escape, where a host name goes
    result["env"] = {**result["env"], "NCCL_DEBUG_FILE": "a\u202eb"}
    parsed = parse_result(text(result), SPEC)
    assert parsed == cleaned(json.loads(text(result)), MULTILINE)
    assert parsed["hosts"][0] == "node\\x1b[2J-0"
    assert len(parsed["candidates"][0]["a2a_calls_by_rank"]) == ranks


def test_cleaning_in_place_is_cleaning_a_copy():
    hostile = {"a\x1bb": ["x\ny", {"error": "line 1\nline 2\x07", "k\u202e": [1, "z\r"]}], "n": 1.5}
    assert cleaned_in_place(copy.deepcopy(hostile), frozenset({"error"})) == cleaned(
        hostile, frozenset({"error"})
    )


def test_a_higher_byte_cap_lets_a_result_hold_more_objects_and_lists(monkeypatch):
    """The cap on objects and lists follows AUTOTUNER_MAX_RESULT_BYTES (one per 64 bytes): a real result
    has one per ~500 bytes, and an operator who raised the byte cap for a larger cluster must not find it
    refused for its shape."""
    many = '{"schema_version": 1, "status": "ok", "x": [' + "{}," * 1_100_000 + "{}]}"
    monkeypatch.setenv("AUTOTUNER_MAX_RESULT_BYTES", str(128 << 20))
    with pytest.raises(ResultError, match="world_size is missing"):  # parsed: refused for what it lacks
        parse_result(many)


def test_scores_are_taken_only_from_a_launch_that_asked_for_them():
    """A timing launch's candidate with a convergence score and no figures was an ok row with none: the
    study published "the baseline fastest" at a speedup of 0.0 (found by fuzzing)."""
    planned = SPEC["candidates"][0]
    scores = {**planned, "status": "ok", "quality": QUALITY}
    assert "asked for timings, the result has scores" in candidate_problem(
        scores, planned, 0, 2, quality=False
    )
    assert candidate_problem(scores, planned, 0, 2, quality=True) is None
    timing = copy.deepcopy(REAL["candidates"][0])
    assert "asked for a convergence check's scores, the result has none" in candidate_problem(
        timing, planned, 0, REAL["world_size"], quality=True
    )
    assert candidate_problem(timing, planned, 0, REAL["world_size"], quality=False) is None


def test_the_breakdown_parts_are_the_trial_s_and_the_schema_s():
    from trials.probe import COMM_KINDS
    from trials.result import BREAKDOWN_PARTS

    schema = json.loads((REPO / "trials" / "result.schema.json").read_text())
    items = schema["$defs"]["launch_result"]["properties"]["candidates"]["items"]
    assert tuple(items["then"]["properties"]["breakdown_ms"]["required"]) == BREAKDOWN_PARTS
    assert BREAKDOWN_PARTS == (*COMM_KINDS, "compute", "exposed_comm")
    assert set(REAL["candidates"][0]["breakdown_ms"]) == set(BREAKDOWN_PARTS)
