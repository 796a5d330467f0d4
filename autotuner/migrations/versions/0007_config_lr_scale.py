"""configs carry the learning-rate factor their batch change was validated with

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("at_configs") as batch:
        batch.add_column(sa.Column("lr_scale", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("at_configs") as batch:
        batch.drop_column("lr_scale")
