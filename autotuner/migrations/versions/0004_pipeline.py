"""candidates and configs remember the train pipeline that drove the step

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("at_candidates", "at_configs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("pipeline", sa.String(32), nullable=True))


def downgrade() -> None:
    for table in ("at_candidates", "at_configs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("pipeline")
