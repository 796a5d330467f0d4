"""a study keeps the workload spec it was created with

The spec lived only on the workload row, which the next study under the same name rewrote: a study
queued (or resumed after a restart) then ran the other study's tables, and a re-validation measured
a published version on tables it was never tuned on. Each study now holds its own copy; studies from
before take the spec their workload has now (the best there is). A study an older version creates
leaves it NULL and reads its workload's, as before.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


# Plain ALTERs, no batch (as 0010): SQLite (3.35 on) drops a column in place, where a batch copy of
# the table fails on the foreign keys to it.
def upgrade() -> None:
    op.add_column("at_studies", sa.Column("workload_spec", sa.JSON(), nullable=True))
    op.execute(
        "UPDATE at_studies SET workload_spec = "
        "(SELECT spec FROM at_workloads WHERE at_workloads.id = at_studies.workload_id)"
    )


def downgrade() -> None:
    op.drop_column("at_studies", "workload_spec")
