"""The store contract, run against every backend (SQLite always; PostgreSQL where available)."""

from __future__ import annotations

import threading
import time
from datetime import UTC

import pytest
import sqlalchemy as sa

from autotuner.store import NotFound, Store, env_hash

WORKLOAD = {
    "name": "w",
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 32, "pooling_factor": 1}],
}


def make_study(store: Store, name: str = "s1"):
    return store.create_study(name=name, cluster="c", workload_name="w", workload_spec=WORKLOAD,
                              space={"env": {}}, settings={"trials": 1})  # fmt: skip


def publish(store: Store, nodes: int = 2, **overrides):
    fields = dict(env={"NCCL_NSOCKS_PERTHREAD": "4"}, fwd_precision="fp8", bwd_precision="bf16", batch_size=2048,
                  sharding="table_wise", evidence={"speedup": 1.5})  # fmt: skip
    fields.update(overrides)
    return store.publish_config(cluster="c", workload="w", nodes=nodes, **fields)


def test_schema_is_ours_only_and_migrations_are_idempotent(store):
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"at_studies", "at_launches", "at_candidates", "at_configs", "at_alembic_version"} <= tables
    assert not {"studies", "trials", "alembic_version"} & tables  # Optuna's names stay free
    Store(store.url).dispose()  # migrating again is a no-op


def test_study_lifecycle_and_relations(store):
    study = make_study(store)
    assert (study.state, study.cluster.name, study.workload.name) == ("queued", "c", "w")
    assert store.study("s1").id == store.study(study.id).id
    store.update_study(study.id, state="running")
    assert [s.name for s in store.studies(states=["running"])] == ["s1"]
    assert store.count_studies() == 1
    with pytest.raises(NotFound):
        store.update_study(999, state="done")


def test_launch_sequence_and_candidates_sorting(store):
    study = make_study(store)
    a = store.add_launch(study_id=study.id, kind="search", env={"A": "1"}, spec={"candidates": [{}, {}]},
                         executor="local")  # fmt: skip
    b = store.add_launch(
        study_id=study.id, kind="search", env={}, spec={"candidates": [{}]}, executor="local"
    )
    assert (a.seq, b.seq, a.optuna_trials) == (1, 2, [None, None])
    assert a.env_hash == env_hash({"A": "1"})
    rows = [
        dict(study_id=study.id, launch_id=a.id, index=i, kind="search", env={}, fwd_precision="fp32",
             bwd_precision="fp32", batch_size=64, sharding="table_wise", state=state, samples_per_s=v)
        for i, (state, v) in enumerate([("ok", 10.0), ("failed", None), ("ok", 30.0)])
    ]  # fmt: skip
    store.add_candidates(rows)
    best = store.candidates(study.id, order_by="samples_per_s", descending=True)
    assert [c.samples_per_s for c in best] == [30.0, 10.0, None]  # failed rows sort last
    assert store.count_candidates(study.id) == {"ok": 2, "failed": 1}
    assert len(store.candidates(study.id, limit=1, offset=2)) == 1


def test_lease_has_exactly_one_holder_and_expires(store):
    study = make_study(store)
    assert store.acquire_study(study.id, "a", lease_s=30)
    assert not store.acquire_study(study.id, "b", lease_s=30)
    assert store.acquire_study(study.id, "a", lease_s=0.2)  # renew (short)
    time.sleep(0.4)
    assert store.acquire_study(study.id, "b", lease_s=30)  # a stopped renewing: b takes over
    assert not store.acquire_study(study.id, "a", lease_s=30)
    store.release_study(study.id, "b")
    assert store.study(study.id).owner is None


def test_concurrent_contenders_get_one_winner(store):
    study = make_study(store)
    wins = []

    def contend(owner: str) -> None:
        if store.acquire_study(study.id, owner, lease_s=30):
            wins.append(owner)

    threads = [threading.Thread(target=contend, args=(f"o{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_configs_version_pin_rollback_and_nearest_nodes(store):
    make_study(store)
    v1 = publish(store, nodes=2)
    v2 = publish(store, nodes=2, batch_size=1024)
    publish(store, nodes=8, batch_size=4096)
    assert (v1.version, v2.version) == (1, 2)
    assert store.served_config("c", "w", 2).version == 2
    assert store.served_config("c", "w", 3).nodes == 2  # nearest tuned count
    assert store.served_config("c", "w", 6).nodes == 8
    assert store.served_config("c", "w", 5).nodes == 2  # tie: fewer nodes
    assert store.rollback_config("c", "w", 2).version == 1
    assert store.served_config("c", "w", 2).batch_size == 2048
    publish(store, nodes=2, batch_size=512)  # a new publish does not override a pin
    assert store.served_config("c", "w", 2).version == 1
    assert store.pin_config("c", "w", 2, None).version == 3
    with pytest.raises(NotFound):
        store.pin_config("c", "w", 2, 42)
    with pytest.raises(NotFound):  # beyond the column's range: no such version, not a driver error
        store.pin_config("c", "w", 2, 348067992130902586032128)
    with pytest.raises(NotFound):
        store.rollback_config("c", "w", 99)
    assert store.served_config("c", "nope") is None


def test_history_comes_a_page_at_a_time_and_a_pin_changes_only_the_rows_whose_flag_changes(store):
    make_study(store)
    for batch in range(1, 8):
        publish(store, nodes=2, batch_size=batch)
    publish(store, nodes=4)
    pages = [store.config_history("c", "w", 2, limit=3, offset=o) for o in (0, 3, 6)]
    assert [[c.version for c in page] for page in pages] == [[7, 6, 5], [4, 3, 2], [1]]
    assert len(store.config_history("c", "w")) == 8  # every node count without a limit
    assert sorted(store.config_versions("c", "w", 2).values()) == list(range(1, 8))
    touched: list[int] = []

    def rows_updated(conn, cursor, statement, *args) -> None:
        if statement.startswith("UPDATE at_configs"):
            touched.append(cursor.rowcount)

    sa.event.listen(store.engine, "after_cursor_execute", rows_updated)
    assert store.pin_config("c", "w", 2, 3).version == 3
    assert store.pin_config("c", "w", 2, 5).version == 5
    sa.event.remove(store.engine, "after_cursor_execute", rows_updated)
    assert touched == [1, 2]  # the row to pin, then it and the one pinned before: never all seven
    assert store.pin_config("c", "w", 2, 3).version == 3
    assert [c.version for c in store.config_history("c", "w", 2) if c.pinned] == [3]
    assert store.rollback_config("c", "w", 2).version == 2  # below the served (pinned) one
    assert [c.version for c in store.config_history("c", "w", 2) if c.pinned] == [2]
    assert store.pin_config("c", "w", 2, None).version == 7
    assert not any(c.pinned for c in store.config_history("c", "w"))
    assert store.served_config("c", "w", 4).version == 1  # the other node count untouched


def test_quarantine_is_per_cluster_and_deduplicated(store):
    study = make_study(store)
    store.quarantine(study.cluster_id, {"NCCL_BUFFSIZE": "1"}, "timeout", None)
    store.quarantine(study.cluster_id, {"NCCL_BUFFSIZE": "1"}, "again", None)
    assert store.quarantined(study.cluster_id) == {env_hash({"NCCL_BUFFSIZE": "1"}): "timeout"}
    other = store.cluster("other", create=True)
    assert store.quarantined(other.id) == {}


def test_every_change_to_what_is_served_bumps_the_generation_in_its_transaction(store):
    make_study(store)
    assert store.served_heads()[::2] == (0, [])
    v1 = publish(store)
    v2 = publish(store)
    stamp = {
        v.id: f"{v.created_at.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}|" for v in (v1, v2)
    }  # made, not re-validated
    assert store.config_generation() == 2
    assert store.served_heads()[::2] == (2, [(v2.id, False, 0, stamp[v2.id])])
    store.rollback_config("c", "w", 2)
    store.served_config("c", "w", 2)  # reads change nothing
    assert store.served_heads()[::2] == (3, [(v1.id, True, 0, stamp[v1.id])])
    store.pin_config("c", "w", 2, None)
    assert store.served_heads()[::2] == (4, [(v2.id, False, 0, stamp[v2.id])])
    with pytest.raises(NotFound):
        store.pin_config("c", "w", 2, 42)  # refused: nothing changed, no generation spent
    assert store.config_generation() == 4
    assert store.config_generation_stamp() == (4, store.served_heads().stamp)


def test_every_bump_draws_a_new_stamp_a_delete_by_hand_too(store):
    """Two states of one generation (a store restored from an older dump that took as many changes as
    it lost) differ in their stamp: each bump draws one, in the store and in the trigger a row
    deleted by hand fires."""
    make_study(store)
    stamps = [store.config_generation_stamp()[1]]
    publish(store)
    stamps.append(store.config_generation_stamp()[1])
    publish(store)
    stamps.append(store.config_generation_stamp()[1])
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM at_configs WHERE version = 2"))
    generation, stamp = store.config_generation_stamp()
    stamps.append(stamp)
    assert generation == 3
    assert stamps[0] is None  # a fresh store: nothing drawn yet
    assert all(stamps[1:])
    assert len(set(stamps)) == 4
