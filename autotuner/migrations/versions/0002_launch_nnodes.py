"""launches remember their node count (scaling curves measure 1, 2, 4, ... nodes)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("at_launches") as batch:
        batch.add_column(sa.Column("nnodes", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("at_launches") as batch:
        batch.drop_column("nnodes")
