"""The generation's row (`at_config_generation`, id 1) deleted by a hand: readers serve on and make it
again, a bump makes it again and counts (atomically: writers still take turns), and so does the
trigger that counts a config deleted by hand. SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing

from sqlalchemy.exc import OperationalError

from autotuner.store import Store
from tests.helpers import by_hand
from tests.store.test_config_races import PUBLISHES, _publish
from tests.store.test_names_never_reused import publish

GONE = "DELETE FROM at_config_generation"


def test_the_generation_row_deleted_by_hand_is_made_again_and_readers_serve_meanwhile(store):
    """Readers found nothing: `served_heads` joined the served configs to that row, so every cache
    loaded no config at all (404 for every key), and bumps counted nothing until a hand made it."""
    store.upsert_workload("w", {"name": "w", "tables": []})
    v1 = publish(store)
    by_hand(store, GONE)
    generation, stamp, heads = store.served_heads()
    assert [head[0] for head in heads] == [v1.id]
    assert (generation, bool(stamp)) == (0, True)  # made again (at 0, with a stamp of its own)
    assert store.config_generation_stamp() == (0, stamp)
    by_hand(store, GONE)
    assert store.config_generation_stamp()[0] == 0
    by_hand(store, GONE)
    v2 = publish(store)  # the bump makes it, then counts
    generation, stamp, heads = store.served_heads()
    assert ([head[0] for head in heads], generation) == ([v2.id], 1)
    assert store.config_generation_stamp() == (1, stamp)
    by_hand(store, GONE, "DELETE FROM at_configs WHERE version = 2")  # the trigger makes it, then counts
    generation, stamp, heads = store.served_heads()
    assert ([head[0] for head in heads], generation) == ([v1.id], 1)


def test_a_store_that_cannot_make_it_again_serves_at_generation_0(store, monkeypatch):
    """A read-only store (a replica, a read-only mount): read as 0, no stamp, its heads all there."""

    def refused(s):
        raise OperationalError("INSERT", {}, Exception("attempt to write a readonly database"))

    store.upsert_workload("w", {"name": "w", "tables": []})
    v1 = publish(store)
    by_hand(store, GONE)
    monkeypatch.setattr("autotuner.store.configs._make_generation_row", refused, raising=False)
    generation, stamp, heads = store.served_heads()
    assert (generation, stamp, [head[0] for head in heads]) == (0, None, [v1.id])  # was: no heads
    assert store.config_generation_stamp() == (0, None)


def test_publishes_at_once_on_a_store_whose_generation_row_is_gone_each_get_their_own_version(store_url):
    """The generation's row is what makes writers of configs take turns: a bump that found none
    locked nothing, and PostgreSQL's publishers read one max version (a unique violation, or two
    configs under one name had the key allowed it)."""
    store = Store(store_url)
    store.upsert_workload("w", {"name": "w", "tables": []})
    store.cluster("c", create=True)
    by_hand(store, GONE)
    spawn = multiprocessing.get_context("spawn")
    errors = spawn.Queue()
    writers = [spawn.Process(target=_publish, args=(store_url, errors)) for _ in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0, 0, 0]
    assert errors.empty(), errors.get()
    assert sorted(store.config_versions("c", "w", 1).values()) == list(range(1, 3 * PUBLISHES + 1))
    generation, stamp = store.config_generation_stamp()
    assert (generation, bool(stamp)) == (3 * PUBLISHES, True)  # made once, then counted: none lost
    store.dispose()
