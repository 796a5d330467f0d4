"""a generation number of what is served, bumped by every publish, pin and rollback

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "at_config_generation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(table, [{"id": 1, "generation": 0}])


def downgrade() -> None:
    op.drop_table("at_config_generation")
