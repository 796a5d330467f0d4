"""every change to what is served also draws a new stamp beside the generation

A store restored from a dump (or a failover to a replica that lost commits) that then took as many
changes as it lost is back at the same generation, with other configs: a service that polled only
the number kept serving configs the store no longer had, and answered 404 for the ones it had. The
stamp, drawn anew at every bump, tells two states of one generation apart. The trigger of 0008 (a
DELETE by hand bumps the generation) draws one too.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLE = "at_config_generation"
DRAW = {
    "sqlite": "lower(hex(randomblob(8)))",
    "postgresql": "substr(md5(random()::text || clock_timestamp()::text), 1, 16)",
}


def _bump(stamp: str | None) -> str:
    drawn = f", stamp = {stamp}" if stamp else ""
    return f"UPDATE {TABLE} SET generation = generation + 1{drawn} WHERE id = 1"


def _trigger(dialect: str, stamp: str | None) -> list[str]:
    """0008's trigger, with the stamp drawn (or, for a downgrade, without)."""
    if dialect == "sqlite":
        return [
            "DROP TRIGGER IF EXISTS at_configs_deleted",
            f"CREATE TRIGGER at_configs_deleted AFTER DELETE ON at_configs BEGIN {_bump(stamp)}; END",
        ]
    if dialect == "postgresql":
        return [
            "CREATE OR REPLACE FUNCTION at_bump_config_generation() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {_bump(stamp)}; RETURN NULL; END $$"
        ]
    return []  # another database has no trigger (see 0008)


# A plain ALTER, no batch (see 0010).
def upgrade() -> None:
    op.add_column(TABLE, sa.Column("stamp", sa.String(length=32), nullable=True))
    dialect = op.get_bind().dialect.name
    for statement in _trigger(dialect, DRAW.get(dialect)):
        op.execute(statement)


def downgrade() -> None:
    for statement in _trigger(op.get_bind().dialect.name, None):
        op.execute(statement)
    op.drop_column(TABLE, "stamp")
