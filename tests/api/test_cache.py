"""The config cache of two workers sharing one generation file (as `autotuner serve` sets them up),
in one process so every step is deterministic; tests/api/test_served_consistency.py does it for real."""

from __future__ import annotations

import pytest

from api.cache import ConfigCache, SharedGeneration
from autotuner.store import Store

FIELDS = dict(env={}, fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise")


@pytest.fixture
def workload(store):
    """Workload "w" in the store: a config is published for one."""
    store.upsert_workload("w", {"name": "w", "tables": []})


def workers(store: Store, tmp_path) -> tuple[ConfigCache, ConfigCache]:
    SharedGeneration.create(tmp_path / "generation")
    a, b = (ConfigCache(store, 3600, SharedGeneration(tmp_path / "generation")) for _ in range(2))
    for worker in (a, b):
        worker.start()  # loads; its poller never ticks (an hour)
    return a, b


@pytest.mark.usefixtures("workload")
def test_once_one_worker_loaded_a_change_the_other_serves_it_too(store, tmp_path):
    a, b = workers(store, tmp_path)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a.refresh()  # a's poll (or a pin through a's API) saw it
    assert b.get("c", "w", 1).config["version"] == 1  # b never polled: the shared counter told it
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    store.rollback_config("c", "w", 1)
    b.refresh()
    assert a.get("c", "w", 1).config["version"] == 1
    assert a.get("c", "w", 1).config["pinned"]


@pytest.mark.usefixtures("workload")
def test_a_miss_asks_the_store_and_a_hit_does_not(store, tmp_path):
    a, _ = workers(store, tmp_path)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    assert a.get("c", "w", None) is None  # the hit path reads memory only
    assert a.find("c", "w", None).config["version"] == 1  # a miss asks the store first
    assert a.find("c", "nope", None) is None


def test_a_generation_file_that_is_not_one_is_refused(tmp_path):
    (tmp_path / "short").write_bytes(b"1")
    with pytest.raises(ValueError, match="not a generation file"):
        SharedGeneration(tmp_path / "short")
