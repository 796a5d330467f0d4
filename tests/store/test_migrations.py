"""Migrations and models agree, and a store of the version before re-validation (0005) upgrades
with its configs served as they were (SQLite and PostgreSQL)."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from autotuner.store import Store
from autotuner.store.db import VERSION_TABLE, alembic_config, make_engine
from autotuner.store.models import Base


def _ours(name: str | None, type_: str, parent_names: object) -> bool:
    return type_ != "table" or bool(name and name.startswith("at_"))


def test_the_migrated_schema_is_the_models(store_url):
    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE, "include_name": _ours}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        store.dispose()


def test_a_store_from_before_revalidation_upgrades_and_serves_as_before(store_url):
    engine = make_engine(store_url)
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
    with engine.begin() as conn:  # one published config, as 0005 stored it
        conn.execute(text("INSERT INTO at_clusters (id, name, fingerprint, created_at, updated_at) "
                          "VALUES (1, 'c', '{\"driver\": \"550.54.15\"}', '2026-12-01 00:00:00+00', '2026-12-01 00:00:00+00')"))  # fmt: skip
        conn.execute(text("INSERT INTO at_workloads (id, name, spec, created_at, updated_at) "
                          "VALUES (1, 'w', '{}', '2026-12-01 00:00:00+00', '2026-12-01 00:00:00+00')"))  # fmt: skip
        conn.execute(text("INSERT INTO at_configs (id, cluster_id, workload_id, nodes, version, env, fwd_precision, "
                          "bwd_precision, batch_size, sharding, evidence, fingerprint, pinned, created_at) VALUES "
                          "(1, 1, 1, 2, 1, '{}', 'fp32', 'fp32', 512, 'table_wise', '{}', '{\"driver\": \"550.54.15\"}', "
                          "false, '2026-12-01 00:00:00+00')"))  # fmt: skip
    engine.dispose()
    store = Store(store_url)  # migrates to head
    try:
        assert [head[:3] for head in store.served_heads().heads] == [(1, False, 0)]
        public = store.public_config(store.served_config("c", "w"))
        assert public["validated_on"] == {"driver": "550.54.15", "nodes": "2"}
        assert public["validated_at"].startswith("2026-12-01")
        assert public["last_validation"] is None
    finally:
        store.dispose()


def test_candidates_from_before_pipelines_were_recorded_say_their_workloads_own(store_url):
    """0009: a NULL pipeline (rows from before 0004) becomes what that workload ran unless told:
    sparse_dist with a dense part, else none. Left NULL, they never paired with new measurements."""
    store = Store(store_url)
    dense = {"name": "dlrm", "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8, "pooling_factor": 1}],
             "dense": {"in_features": 4, "arch": [8], "over_arch": [1]}}  # fmt: skip
    ids = {}
    for workload in (dense, {**dense, "name": "sparse", "dense": None}):
        study = store.create_study(name=workload["name"], cluster="c", workload_name=workload["name"],
                                   workload_spec=workload, space={}, settings={})  # fmt: skip
        launch = store.add_launch(
            study_id=study.id, kind="search", env={}, spec={"candidates": [{}]}, executor="replay"
        )
        [row] = store.add_candidates([{"study_id": study.id, "launch_id": launch.id, "index": 0, "kind": "search",
                                       "env": {}, "fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64,
                                       "sharding": "table_wise", "pipeline": None, "state": "ok"}])  # fmt: skip
        ids[workload["name"]] = row.id
    command.downgrade(alembic_config(store.engine), "0008")  # as a store last written before 0009 holds it
    store.dispose()
    store = Store(store_url)  # migrates to head
    try:
        assert store.candidate(ids["dlrm"]).pipeline == "sparse_dist"
        assert store.candidate(ids["sparse"]).pipeline == "none"
    finally:
        store.dispose()


def test_studies_from_before_0013_take_the_spec_their_workload_has(store_url):
    """0013: each study keeps its own workload spec; one from before is given its workload's."""
    store = Store(store_url)
    spec = {
        "name": "w",
        "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8, "pooling_factor": 1}],
    }
    study = store.create_study(
        name="s", cluster="c", workload_name="w", workload_spec=spec, space={}, settings={}
    )
    command.downgrade(alembic_config(store.engine), "0012")  # as a store last written before 0013 holds it
    store.dispose()
    store = Store(store_url)  # migrates to head
    try:
        assert store.study(study.id).workload_spec == spec
    finally:
        store.dispose()
