"""deleting a config row bumps the served generation (a trigger), so caches stop serving it

The store bumps the generation in every change it makes; an operator deleting a row by hand (the
documented remedy for a row that cannot be served) did not, and every service kept answering the
deleted version until some unrelated publish. A statement-level trigger covers any DELETE.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BUMP = "UPDATE at_config_generation SET generation = generation + 1 WHERE id = 1"
# Per dialect; another database gets no trigger (a row deleted by hand there is served until the
# next publish, as before).
CREATE = {
    "sqlite": [f"CREATE TRIGGER at_configs_deleted AFTER DELETE ON at_configs BEGIN {BUMP}; END"],
    "postgresql": [
        "CREATE FUNCTION at_bump_config_generation() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN {BUMP}; RETURN NULL; END $$",
        "CREATE TRIGGER at_configs_deleted AFTER DELETE ON at_configs "
        "FOR EACH STATEMENT EXECUTE PROCEDURE at_bump_config_generation()",
    ],
}
DROP = {
    "sqlite": ["DROP TRIGGER at_configs_deleted"],
    "postgresql": ["DROP TRIGGER at_configs_deleted ON at_configs", "DROP FUNCTION at_bump_config_generation()"],
}


def upgrade() -> None:
    for statement in CREATE.get(op.get_bind().dialect.name, []):
        op.execute(statement)


def downgrade() -> None:
    for statement in DROP.get(op.get_bind().dialect.name, []):
        op.execute(statement)
