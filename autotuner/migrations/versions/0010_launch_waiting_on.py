"""launches say what they wait on while queued (Slurm's pending reason, a pod's)

Before, a launch queued for hours read "running" with nothing said: a job pending on
`PartitionNodeLimit` waited out `queue_timeout_s` in silence.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


# Plain ALTERs, no batch: SQLite (3.35 on) drops a column in place, where a batch copy of the table
# fails on the candidates' foreign keys to it.
def upgrade() -> None:
    op.add_column("at_launches", sa.Column("waiting_on", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("at_launches", "waiting_on")
