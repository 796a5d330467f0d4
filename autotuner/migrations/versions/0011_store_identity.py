"""a store knows itself: one row with an id of its own, made once

Two stores given one workdir (a shared filesystem path, set alike for a staging and a production
service) each have a study 1: their launches wrote each other's spec.json and result.json. The
workdir is marked with the id of the store that first launched there; another store is refused it.
The id, not the database's URL: one database has many spellings (a host name, its address).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "at_store",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(table, [{"id": 1, "uuid": str(uuid.uuid4())}])


def downgrade() -> None:
    op.drop_table("at_store")
