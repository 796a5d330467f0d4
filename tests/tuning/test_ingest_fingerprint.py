"""The cluster's fingerprint (autotuner.tuning.ingest.fingerprint) is copied into every config published on
the cluster, and served with it to every job's fetch (the hook reads at most 1 MiB): it stays small
whatever the row it is read from holds. parse_result now refuses a result whose names are longer
(tests/executors/test_results.py); a launch's summary stored before it did is read back by re-validation."""

from __future__ import annotations

import json

from autotuner.executors.results import MAX_NAME, MAX_VERSIONS
from autotuner.job.fingerprint import comparable
from autotuner.tuning.ingest import fingerprint, stored

BIG = 30_000  # characters: two of them fit the store's cap on one entry of a summary (64 KiB)


def test_a_summary_stored_with_long_names_makes_a_bounded_fingerprint():
    summary = stored({
        "device": "cuda", "backend": "nccl", "nnodes": 2, "world_size": 16,
        "device_name": "H100" + "x" * BIG, "driver_version": "5" * BIG,
        "versions": {"nccl": "2." + "9" * 9_000, **{f"lib{i}": "1" * 1_000 for i in range(50)}},
        "nccl_effective": {"network": "S" * BIG, "ofi_plugin_version": "1" * BIG, "ofi_provider": "efa"},
    })  # fmt: skip
    assert "not_stored" not in summary  # each entry under MAX_STORED_ENTRY: all of it kept

    fp = fingerprint(summary)
    for key in ("device_name", "driver", "network", "ofi_plugin"):
        assert len(fp[key]) == MAX_NAME, key  # cut as the hook cuts a job's: the two compare alike
    assert fp["driver"] == "5" * MAX_NAME  # what is kept is the start
    assert fp["device_name"] == "H100" + "x" * (MAX_NAME - 4)
    assert len(fp["versions"]) == MAX_VERSIONS
    assert all(len(k) <= MAX_NAME and len(v) <= MAX_NAME for k, v in fp["versions"].items())
    assert len(json.dumps(fp)) < 20_000  # was ~180,000: every version published carried it
    # the short facts as they were
    assert (fp["device"], fp["backend"], fp["nnodes"], fp["world_size"], fp["efa"]) == ("cuda", "nccl", 2, 16, True)  # fmt: skip
    assert len(json.dumps(comparable(fp, 2))) < 1_000  # what a job's fetch is served as validated_on
