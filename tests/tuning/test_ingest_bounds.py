"""What a trial's result puts in the store and on the pages stays bounded and its own (found by fuzzing
result.json): a summary of many entries each under the per-entry cap, breakdown keys named as a row's
own figures, a candidate failed without a message."""

from __future__ import annotations

import json
from types import SimpleNamespace

from autotuner.executors.base import LaunchState, Outcome
from autotuner.tuning.ingest import MAX_NAMED, MAX_STORED_ENTRY, MAX_STORED_RECORD, candidate_row, stored
from autotuner.tuning.insights import step_breakdown


def test_a_summary_of_many_entries_each_under_the_cap_is_bounded_whole():
    """950 entries just under MAX_STORED_ENTRY were 62 MB a launch, and every launch listing read them
    (1.2 GB of the service's memory for one page; found by fuzzing)."""
    record = {"world_size": 2, **{f"pad{i:04d}": "x" * (MAX_STORED_ENTRY - 100) for i in range(950)}}
    kept = stored(record)
    assert len(json.dumps(kept)) < MAX_STORED_RECORD + 10_000
    assert kept["world_size"] == 2  # the small facts stay
    assert len(kept["not_stored"]["bytes_over_limit"]) == MAX_NAMED
    assert kept["not_stored"]["more"] == len(record) - (len(kept) - 1) - MAX_NAMED
    long_names = {"k" * 100_000 + str(i): 1 for i in range(40)}  # the names are what is big
    assert len(json.dumps(stored(long_names))) < MAX_STORED_RECORD + 10_000


def test_a_result_s_extra_breakdown_keys_are_never_drawn_as_the_row_s_figures():
    """`breakdown_ms: {"samples_per_s": 9.9e99, "id": 424242}` was spread over the row's own fields in
    /insights: a chart of made-up figures (found by fuzzing)."""
    parts = {"input_dist": 1.0, "sparse_comm": 2.0, "dense_comm": 0.5, "compute": 5.0, "exposed_comm": 1.0}
    row = SimpleNamespace(id=1, kind="baseline", state="ok", fwd_precision="fp32", bwd_precision="fp32",
                          batch_size=64, pipeline=None, samples_per_s=12_000.0, iter_ms=10.5,
                          metrics={"breakdown_ms": {**parts, "samples_per_s": 9.9e99, "step_ms": 0.001,
                                                    "id": 424242, "label": 7, "kind": 0, "other": "text"}})  # fmt: skip
    [drawn] = step_breakdown([row])  # drawn: the key that is no number is not one of its parts
    assert (drawn["id"], drawn["kind"], drawn["samples_per_s"], drawn["step_ms"]) == (
        1,
        "baseline",
        12_000.0,
        10.5,
    )
    assert drawn["label"].startswith("#1 fp32/fp32 b64")
    assert {k: drawn[k] for k in parts} == parts
    assert "other" not in drawn


def test_a_candidate_failed_without_a_message_says_so():
    """It read "launch succeeded: " (found by fuzzing)."""
    ctx = SimpleNamespace(study_id=1, workload=SimpleNamespace(sharding="table_wise", default_pipeline=None))
    launch = SimpleNamespace(id=2, kind="search", env={}, spec={"candidates": []})
    planned = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64}
    done = Outcome(LaunchState.SUCCEEDED, "b1", {})
    row = candidate_row(ctx, launch, 0, planned, {**planned, "index": 0, "status": "failed"}, done)
    assert (row["state"], row["error"]) == ("failed", "the trial reported it failed, with no error message")
    gone = Outcome(LaunchState.FAILED, "b1", None, reason="exit 3")
    assert candidate_row(ctx, launch, 0, planned, None, gone)["error"] == "launch failed: exit 3"
