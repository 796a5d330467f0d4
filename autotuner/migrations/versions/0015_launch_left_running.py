"""launches whose cancel was not confirmed say what may still run, until a later cancel confirms it

Before, a scancel that did not reach the controller was named in the launch's error and forgotten:
the job could hold GPU nodes until its time limit, and only an operator reading the error stopped it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


# Plain ALTERs, no batch (as 0010): SQLite drops a column in place.
def upgrade() -> None:
    op.add_column("at_launches", sa.Column("left_running", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("at_launches", "left_running")
