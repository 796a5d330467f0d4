"""A config's version is a name (jobs, pins, rollbacks, reports, hooks say it) and its id is named
outside its row (re-validations, fingerprint reports, a replacement's `replaces`): neither is handed
out again after a row is deleted, by hand or with its cluster's row. A store of the schema before
(0013) upgrades with every row kept, and never hands out the names its rows have. SQLite and
PostgreSQL."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from autotuner.store import Store
from autotuner.store.db import alembic_config, make_engine
from tests.helpers import by_hand
from tests.store.test_config_races import FIELDS

AT = "'2026-12-01 00:00:00+00'"


def publish(store: Store, nodes: int = 1):
    return store.publish_config(cluster="c", workload="w", nodes=nodes, **FIELDS)


def test_a_deleted_version_and_its_id_are_never_handed_out_again(store):
    store.upsert_workload("w", {"name": "w", "tables": []})
    made = [publish(store) for _ in range(3)]
    publish(store, nodes=2)  # another key: its own versions
    by_hand(store, "DELETE FROM at_configs WHERE version = 3 AND nodes = 1")
    again = publish(store)
    assert again.version == 4  # was 3: a pin, a rollback or a job's report of v3 named another config
    assert again.id > max(c.id for c in made) + 1  # was made[-1].id on SQLite: max(rowid) + 1
    store.pin_config("c", "w", 1, 4)
    store.rollback_config("c", "w", 1)
    assert store.served_config("c", "w", 1).version == 2  # the version below, v3 being gone

    by_hand(store, "DELETE FROM at_configs WHERE nodes = 1")  # every version of the key
    assert publish(store).version == 5
    assert publish(store, nodes=2).version == 2


def test_a_cluster_row_deleted_and_made_again_keeps_its_versions_names(store):
    store.upsert_workload("w", {"name": "w", "tables": []})
    for _ in range(2):
        publish(store)
    by_hand(store, "DELETE FROM at_configs", "DELETE FROM at_clusters WHERE name = 'c'")
    assert publish(store).version == 3  # c/w/1n/v1 and v2 named other configs


def test_a_version_another_writer_handed_out_is_never_handed_out_again(store):
    """An older replica still running after the upgrade (it raises no mark), or a hand: the row's
    trigger raises its key's mark."""
    store.upsert_workload("w", {"name": "w", "tables": []})
    for _ in range(2):
        publish(store)
    columns = "cluster_id, workload_id, nodes, {}, env, fwd_precision, bwd_precision, batch_size, sharding, evidence, fingerprint, pinned, created_at"  # fmt: skip
    by_hand(
        store,
        f"INSERT INTO at_configs ({columns.format('version')}) SELECT {columns.format(3)} FROM at_configs WHERE version = 2",
        "UPDATE at_configs SET version = 7 WHERE version = 3",
        "DELETE FROM at_configs WHERE version = 7",
    )  # fmt: skip
    assert publish(store).version == 8


def _store_of_0013(url: str) -> None:
    """A store as 0013 left it: c/w at 2 nodes v1..v3 (ids 1..3), v3 re-validated (naming v2 as its
    new config) and reported on by jobs, v4 deleted before the upgrade (unknown to it), and the
    generation's row deleted by a hand."""
    engine = make_engine(url)
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO at_clusters (id, name, fingerprint, created_at, updated_at) VALUES (1, 'c', '{{}}', {AT}, {AT})"))  # fmt: skip
        conn.execute(text(f"INSERT INTO at_workloads (id, name, spec, created_at, updated_at) VALUES (1, 'w', '{{}}', {AT}, {AT})"))  # fmt: skip
        for i in (1, 2, 3, 4):
            conn.execute(text("INSERT INTO at_configs (id, cluster_id, workload_id, nodes, version, env, fwd_precision, "
                              "bwd_precision, batch_size, sharding, evidence, fingerprint, pinned, created_at) VALUES "
                              f"({i}, 1, 1, 2, {i}, '{{}}', 'fp32', 'fp32', {i}, 'table_wise', '{{}}', '{{}}', false, {AT})"))  # fmt: skip
        conn.execute(text("INSERT INTO at_config_validations (id, config_id, \"trigger\", reason, state, new_config_id, "
                          f"created_at) VALUES (1, 3, 'manual', 'r', 'held', 2, {AT})"))  # fmt: skip
        conn.execute(text("INSERT INTO at_fingerprint_reports (id, config_id, digest, fingerprint, diff, jobs, first_seen, "
                          f"last_seen, validation_id) VALUES (1, 3, 'd', '{{}}', '{{}}', 7, {AT}, {AT}, 1)"))  # fmt: skip
        if conn.dialect.name == "postgresql":  # the ids came from its sequence
            conn.execute(text("SELECT setval(pg_get_serial_sequence('at_configs', 'id'), 4)"))
        conn.execute(text("DELETE FROM at_configs WHERE id = 4"))
        conn.execute(text("DELETE FROM at_config_generation"))
    engine.dispose()


def test_a_store_of_0013_upgrades_with_its_rows_and_never_hands_their_names_out_again(store_url):
    _store_of_0013(store_url)
    store = Store(store_url)  # migrates to head
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT id, generation FROM at_config_generation")).all() == [(1, 0)]
            if conn.dialect.name == "sqlite":
                assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
        assert store.config_versions("c", "w", 2) == {1: 1, 2: 2, 3: 3}
        assert [c.batch_size for c in store.config_history("c", "w", 2)] == [3, 2, 1]
        [check] = store.validations("c", "w", 2)
        assert (check.config_id, check.new_config_id, check.state) == (3, 2, "held")
        assert store.fingerprint_reports([3])[3][0].jobs == 7
        by_hand(store, "DELETE FROM at_fingerprint_reports", "DELETE FROM at_config_validations",
                "DELETE FROM at_configs WHERE version = 3")  # fmt: skip
        assert store.config_generation() == 1  # the trigger still counts a DELETE by hand
        again = publish(store, nodes=2)
        assert again.version == 4  # v3 was the highest the upgrade knew of (v4 was deleted before)
        # 3 was deleted (was handed out again on SQLite); 4 was deleted before the upgrade: PostgreSQL's
        # sequence knows it, SQLite (no AUTOINCREMENT then) kept no trace of it
        assert again.id == (5 if store.engine.dialect.name == "postgresql" else 4)
    finally:
        store.dispose()


def test_a_store_downgraded_to_0013_and_upgraded_again_keeps_its_rows(store_url):
    store = Store(store_url)
    store.upsert_workload("w", {"name": "w", "tables": []})
    for _ in range(3):
        publish(store)
    command.downgrade(alembic_config(store.engine), "0013")
    store.dispose()
    store = Store(store_url)
    try:
        by_hand(store, "DELETE FROM at_configs WHERE version = 3")
        again = publish(store)
        assert (again.version, again.id) == (4, 4)  # the mark is made again from the rows; ids kept going
    finally:
        store.dispose()
