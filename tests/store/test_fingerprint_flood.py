"""Stacks jobs report against a version: a few per cluster are real; made-up ones (any read token can
send a header) stop at MAX_STACKS, so they neither grow the store without end nor ask for one
re-validation after another (each new stack asked for one)."""

from __future__ import annotations

from autotuner.store.validations import MAX_STACKS


def test_made_up_stacks_stop_at_the_cap_and_real_ones_are_still_counted(store, caplog):
    store.upsert_workload("w", {"name": "w", "tables": []})
    config = store.publish_config(cluster="c", workload="w", nodes=1, env={}, fwd_precision="fp32",
                                  bwd_precision="fp32", batch_size=64, sharding="table_wise")  # fmt: skip

    def report(i: int, jobs: int = 1) -> dict:
        return {"config_id": config.id, "fingerprint": {"driver": f"999.{i}"}, "diff": {}, "jobs": jobs}

    first = store.record_reports([report(i) for i in range(MAX_STACKS - 2)])
    assert len(first) == MAX_STACKS - 2
    flood = store.record_reports([report(i) for i in range(MAX_STACKS - 2, MAX_STACKS + 40)])
    assert len(flood) == 2  # new rows (each may ask for a re-validation) up to the cap, and no more
    assert store.record_reports([report(5000)]) == []
    assert caplog.text.count(f"config {config.id}: {MAX_STACKS} stacks reported already") == 1  # said once
    store.record_reports([report(0, jobs=7)])  # a stack already recorded is still counted
    rows = store.fingerprint_reports([config.id])[config.id]
    assert len(rows) == MAX_STACKS
    assert next(r.jobs for r in rows if r.fingerprint == {"driver": "999.0"}) == 8
