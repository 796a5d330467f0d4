"""A store whose generation goes back under a running service (restored from an older dump, a failover
to a replica that lost commits): the workers serve the store as it is now, and what it publishes
afterwards, instead of what they loaded before. Two workers sharing one generation file, as
tests/api/test_cache.py sets them up."""

from __future__ import annotations

import logging
import sqlite3
import time

import pytest
from sqlalchemy import text

from api.cache import ConfigCache, SharedGeneration
from autotuner.store import Store
from tests.api.test_cache import FIELDS, workers, workload  # noqa: F401 (a fixture)


def rewind(store: Store, last_id: int, generation: int) -> None:
    """What a restore of a dump taken at `generation` (when `last_id` was the newest config) leaves: the
    later configs gone, the counter back where it was, and the ids and versions after the dump's handed
    out again (the dump holds the id sequence and the versions' marks as they were)."""
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM at_configs WHERE id > :id"), {"id": last_id})
        conn.execute(text("UPDATE at_config_generation SET generation = :g WHERE id = 1"), {"g": generation})
        conn.execute(text("DELETE FROM at_config_versions"))  # then made from the rows the dump had
        conn.execute(text("INSERT INTO at_config_versions (cluster, workload, nodes, version) "
                          "SELECT c.name, w.name, k.nodes, MAX(k.version) FROM at_configs k JOIN at_clusters c "
                          "ON c.id = k.cluster_id JOIN at_workloads w ON w.id = k.workload_id "
                          "GROUP BY c.name, w.name, k.nodes"))  # fmt: skip
        if conn.dialect.name == "postgresql":
            conn.execute(
                text("SELECT setval(pg_get_serial_sequence('at_configs', 'id'), MAX(id)) FROM at_configs")
            )
        else:
            conn.execute(
                text("UPDATE sqlite_sequence SET seq = :id WHERE name = 'at_configs'"), {"id": last_id}
            )


def publish(store: Store, name: str = "w") -> None:
    store.publish_config(cluster="c", workload=name, nodes=1, **FIELDS)


def version(cache: ConfigCache, name: str = "w") -> int | None:
    served = cache.get("c", name, 1)
    return None if served is None else served.config["version"]


@pytest.mark.usefixtures("workload")
def test_every_worker_follows_a_store_that_went_back(store, tmp_path, caplog):
    a, b = workers(store, tmp_path)
    for _ in range(5):
        publish(store)
    a.refresh()
    assert (version(a), version(b)) == (5, 5)
    rewind(store, 1, 1)
    with caplog.at_level(logging.WARNING, logger="autotuner.api.cache"):
        a.refresh()  # a's poll
        assert (version(a), version(b)) == (1, 1)  # b never polled: the shared counter told it
        b.refresh()
        a.refresh()
    said = [r.getMessage() for r in caplog.records if "went back" in r.getMessage()]
    assert len(said) == 1, said  # once
    assert "went back from 5 to 1" in said[0]

    # What the store publishes after the restore is served, though its generation is below 5 still.
    publish(store)
    store.upsert_workload("w2", {"name": "w2", "tables": []})
    publish(store, "w2")
    b.refresh()
    assert (version(a), version(b)) == (2, 2)
    assert a.find("c", "w2", 1) is not None  # a new key: no 404
    assert version(b, "w2") == 1
    store.pin_config("c", "w", 1, 1)
    a.refresh()  # as the pin route does before it returns
    served = b.get("c", "w", 1)
    assert served is not None
    assert (served.config["version"], served.config["pinned"]) == (1, True)


@pytest.mark.usefixtures("workload")
def test_ids_the_store_hands_out_again_after_it_went_back_are_rendered_anew(store, tmp_path):
    a, b = workers(store, tmp_path)
    store.upsert_workload("w2", {"name": "w2", "tables": []})
    publish(store)  # id 1: c/w v1, then the dump
    publish(store, "w2")  # id 2: c/w2 v1
    publish(store)  # id 3: c/w v2
    a.refresh()  # serving ids 2 and 3
    rewind(store, 1, 1)
    publish(store)  # id 2 again, another row: c/w v2
    b.refresh()  # before any worker saw the store at generation 1
    for worker in (a, b):
        served = worker.get("c", "w", 1)
        assert served is not None
        assert (served.id, served.config["version"]) == (2, 2)
        assert worker.get("c", "w2", 1) is None  # gone with the restore


@pytest.mark.usefixtures("workload")
def test_a_restore_that_climbed_past_what_was_loaded_is_served_as_it_is(store, tmp_path):
    """No poll in between: the store's generation is above what the workers loaded, as after a change,
    and its ids 2 and 3 name other rows than the ones rendered under them."""
    a, b = workers(store, tmp_path)
    store.upsert_workload("w2", {"name": "w2", "tables": []})
    publish(store)  # id 1: c/w v1, then the dump
    publish(store, "w2")  # id 2: c/w2 v1
    publish(store)  # id 3: c/w v2
    a.refresh()  # serving ids 2 and 3, at generation 3
    rewind(store, 1, 1)
    publish(store)  # id 2: c/w v2
    publish(store, "w2")  # id 3: c/w2 v1
    publish(store)  # id 4: c/w v3, at generation 4
    b.refresh()
    for worker in (a, b):
        served, other = worker.get("c", "w", 1), worker.get("c", "w2", 1)
        assert served is not None
        assert other is not None
        assert (served.id, served.config["version"]) == (4, 3)
        assert (other.id, other.config["workload"], other.config["version"]) == (3, "w2", 1)
        assert len(worker.entries()) == 2


@pytest.mark.usefixtures("workload")
def test_a_restore_back_at_the_same_generation_in_another_state_is_served_as_it_is(store, tmp_path, caplog):
    """The restore took exactly as many changes as it lost before any poll: the generation is what
    the workers loaded, the configs are not (their ids handed out again, to other rows). Before, the
    workers served a config the store no longer had, and 404 for the one it had, until the next change."""
    a, b = workers(store, tmp_path)
    store.upsert_workload("w2", {"name": "w2", "tables": []})
    publish(store)  # id 1: c/w v1, then the dump
    publish(store)  # id 2: c/w v2, at generation 2
    a.refresh()
    rewind(store, 1, 1)
    publish(store, "w2")  # id 2 again: c/w2 v1, at generation 2 again
    with caplog.at_level(logging.WARNING, logger="autotuner.api.cache"):
        a.refresh()  # a poll: the number alone says nothing changed
        b.refresh()
    for worker in (a, b):
        assert version(worker) == 1  # c/w v2 is gone with the restore
        served = worker.find("c", "w2", 1)
        assert served is not None  # was: None (a 404), the store saying otherwise
        assert (served.id, served.config["workload"]) == (2, "w2")
    said = [r.getMessage() for r in caplog.records if "again, in another state" in r.getMessage()]
    assert len(said) == 1, said  # once, by the worker that saw it


@pytest.mark.usefixtures("workload")
def test_the_poller_follows_a_store_that_went_back_within_refresh_s(store, tmp_path):
    SharedGeneration.create(tmp_path / "generation")
    cache = ConfigCache(store, 0.05, SharedGeneration(tmp_path / "generation"))
    for _ in range(3):
        publish(store)
    cache.start()
    try:
        assert version(cache) == 3
        rewind(store, 1, 1)
        deadline = time.monotonic() + 5
        while version(cache) != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert version(cache) == 1
        publish(store)
        deadline = time.monotonic() + 5
        while version(cache) != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert version(cache) == 2
    finally:
        cache.stop()


def test_a_sqlite_store_restored_from_a_backup_is_served(tmp_path):
    """The real thing on SQLite: `.backup`, more publishes, the backup copied back over the live file."""
    db = tmp_path / "autotuner.db"
    store = Store(f"sqlite:///{db}")
    try:
        store.upsert_workload("w", {"name": "w", "tables": []})
        publish(store)
        with sqlite3.connect(db) as live, sqlite3.connect(tmp_path / "backup.db") as backup:
            live.backup(backup)
        a, b = workers(store, tmp_path)
        for _ in range(3):
            publish(store)
        a.refresh()
        assert version(b) == 4
        with sqlite3.connect(tmp_path / "backup.db") as backup, sqlite3.connect(db) as live:
            backup.backup(live)
        publish(store)  # v2 again, at generation 2
        b.refresh()
        assert (version(a), version(b)) == (2, 2)
    finally:
        store.dispose()


def test_labels_order_a_rewind_above_what_came_before():
    from api.cache import EPOCH_SHIFT, labelled

    newest = labelled(0, 7)
    assert labelled(newest, 9) > newest
    assert labelled(newest, 9) >> EPOCH_SHIFT == 0  # forward: the same epoch
    back = labelled(newest, 2)
    assert back > labelled(newest, 7)
    assert back >> EPOCH_SHIFT == 1  # back: the next epoch, above every label of the one before
    assert labelled(back, 3) > back
    assert labelled(back, 3) >> EPOCH_SHIFT == 1
