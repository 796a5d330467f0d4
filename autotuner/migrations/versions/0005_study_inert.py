"""studies say which variables of their space cannot act where they measure

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("at_studies") as batch:
        batch.add_column(sa.Column("inert", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("at_studies") as batch:
        batch.drop_column("inert")
