"""a config's version (and, on SQLite, its id) is never handed out twice; the generation row is made
again when it is gone

A version was max(version) + 1 of its key: a version deleted (by hand, the documented remedy for a
row that cannot be served) was handed out again by the next publish, to another config, and a job's
report, a pin or a rollback that named it named that other config. Each (cluster, workload, nodes)
now keeps the highest version it ever had, by name (`at_config_versions`, seeded here from the rows
there are: a version deleted before this upgrade is not known), raised by the publish and, for any
other writer (an older replica still running, a hand), by a trigger on every row written. SQLite handed out a deleted row's id
again too (the largest rowid + 1), and ids are named outside the row (re-validations, fingerprint
reports, a re-validation's `replaces`): `at_configs` is made AUTOINCREMENT there (PostgreSQL's
sequence never hands one out twice). A downgrade leaves it AUTOINCREMENT: older code reads it alike.

The trigger of 0008/0012 (a DELETE by hand bumps the generation) makes the generation's row again if
a hand deleted it, so the bump is still seen by every service; the row itself is made again here.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

MARKS = "at_config_versions"
SEED = (
    f"INSERT INTO {MARKS} (cluster, workload, nodes, version) "
    "SELECT c.name, w.name, k.nodes, MAX(k.version) FROM at_configs k "
    "JOIN at_clusters c ON c.id = k.cluster_id JOIN at_workloads w ON w.id = k.workload_id "
    "GROUP BY c.name, w.name, k.nodes"
)
GENERATION_ROW = (
    "INSERT INTO at_config_generation (id, generation) SELECT 1, 0 "
    "WHERE NOT EXISTS (SELECT 1 FROM at_config_generation WHERE id = 1)"
)
BUMP = "UPDATE at_config_generation SET generation = generation + 1, stamp = {draw} WHERE id = 1"
# Every row written, whoever writes it (an older replica still running after the upgrade, a hand),
# raises its key's mark: a version handed out by another writer is never handed out again either.
MARK = (
    f"INSERT INTO {MARKS} (cluster, workload, nodes, version) "
    "SELECT c.name, w.name, NEW.nodes, NEW.version FROM at_clusters c, at_workloads w "
    "WHERE c.id = NEW.cluster_id AND w.id = NEW.workload_id "
    "ON CONFLICT (cluster, workload, nodes) DO UPDATE SET version = {greatest}"
)
KEY_COLUMNS = "cluster_id, workload_id, nodes, version"
MARKING = {
    "sqlite": [
        f"CREATE TRIGGER at_configs_marked_{event} AFTER {when} ON at_configs BEGIN "
        + MARK.format(greatest="max(version, excluded.version)")
        + "; END"
        for event, when in (("insert", "INSERT"), ("update", f"UPDATE OF {KEY_COLUMNS}"))
    ],
    "postgresql": [
        "CREATE FUNCTION at_mark_config_version() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + MARK.format(greatest=f"GREATEST({MARKS}.version, EXCLUDED.version)")
        + "; RETURN NULL; END $$",
        f"CREATE TRIGGER at_configs_marked AFTER INSERT OR UPDATE OF {KEY_COLUMNS} ON at_configs "
        "FOR EACH ROW EXECUTE PROCEDURE at_mark_config_version()",
    ],
}
UNMARKING = {
    "sqlite": ["DROP TRIGGER at_configs_marked_insert", "DROP TRIGGER at_configs_marked_update"],
    "postgresql": ["DROP TRIGGER at_configs_marked ON at_configs", "DROP FUNCTION at_mark_config_version()"],
}
TRIGGER = {  # 0012's, and (upgrade only) the row made first if it is gone
    "sqlite": (
        "CREATE TRIGGER at_configs_deleted AFTER DELETE ON at_configs BEGIN {make}"
        + BUMP.format(draw="lower(hex(randomblob(8)))")
        + "; END",
        "INSERT OR IGNORE INTO at_config_generation (id, generation) VALUES (1, 0); ",
    ),
    "postgresql": (
        "CREATE OR REPLACE FUNCTION at_bump_config_generation() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {make}"
        + BUMP.format(draw="substr(md5(random()::text || clock_timestamp()::text), 1, 16)")
        + "; RETURN NULL; END $$",
        "INSERT INTO at_config_generation (id, generation) VALUES (1, 0) ON CONFLICT (id) DO NOTHING; ",
    ),
}


def upgrade() -> None:
    # DML first: on SQLite it opens the transaction (pysqlite opens none before DDL) that makes this
    # step all or nothing, and that the rebuild's deferred foreign keys hold in.
    op.execute(GENERATION_ROW)
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite" and not getattr(
        op.get_bind().connection.driver_connection, "in_transaction", True
    ):
        raise RuntimeError("0014: SQLite must be migrated inside a transaction")
    op.create_table(
        MARKS,
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("workload", sa.String(length=128), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "workload", "nodes"),
    )
    op.execute(SEED)
    if dialect == "sqlite":
        _sqlite_autoincrement()
    _trigger(dialect, make=True)
    for statement in MARKING.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in UNMARKING.get(dialect, []):
        op.execute(statement)
    _trigger(dialect, make=False)
    op.drop_table(MARKS)


def _trigger(dialect: str, *, make: bool) -> None:
    if dialect not in TRIGGER:
        return  # another database has no trigger (see 0008)
    statement, making = TRIGGER[dialect]
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS at_configs_deleted")
    op.execute(statement.format(make=making if make else ""))


def _sqlite_autoincrement() -> None:
    """`at_configs` made again with AUTOINCREMENT (SQLite cannot ALTER it in), its rows, ids, indexes
    and triggers kept. Foreign keys to it are on (a batch copy drops the table first and fails on
    them; they cannot be turned off inside the migration's transaction): deferred, the DROP's orphans
    are counted and the copy back under the same name counts them off, so the commit checks them."""
    bind = op.get_bind()
    schema = bind.exec_driver_sql(
        "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'at_configs' AND sql IS NOT NULL"
    ).all()
    [table] = [sql for kind, sql in schema if kind == "table"]
    if "AUTOINCREMENT" in table.upper():
        return
    made = re.sub(r"\bid INTEGER NOT NULL,", "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", table, count=1)
    made = re.sub(r"PRIMARY KEY \(id\),\s*", "", made, count=1)
    if "AUTOINCREMENT" not in made or "PRIMARY KEY (id)" in made:
        raise RuntimeError(f"0014: at_configs is not the table this migration knows: {table}")
    columns = ", ".join(f'"{row[1]}"' for row in bind.exec_driver_sql("PRAGMA table_info(at_configs)"))
    op.execute("PRAGMA defer_foreign_keys = ON")  # until this transaction's commit
    for kind, sql in schema:  # triggers first: the DROP's implicit delete must bump nothing
        if kind == "trigger":
            op.execute(f"DROP TRIGGER {_name(sql)}")
    op.execute("CREATE TABLE at_configs_0014 AS SELECT * FROM at_configs")
    op.execute("DROP TABLE at_configs")
    op.execute(made)
    op.execute(f"INSERT INTO at_configs ({columns}) SELECT {columns} FROM at_configs_0014")
    op.execute("DROP TABLE at_configs_0014")
    for kind, sql in schema:
        if kind != "table":
            op.execute(sql)


def _name(sql: str) -> str:
    match = re.match(r"\s*CREATE\s+TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?(\S+)", sql, re.IGNORECASE)
    if match is None:
        raise RuntimeError(f"0014: cannot read a trigger's name: {sql}")
    return match.group(1)
