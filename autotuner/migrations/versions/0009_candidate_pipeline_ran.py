"""candidates measured before pipelines were recorded say the one they ran: their workload's own

Since 0004 a candidate row stores the pipeline that drove its step, and a measurement is paired with
another by that setting. Rows from before hold NULL, and ran what their workload runs unless told
(trials.spec.WorkloadSpec.default_pipeline): TorchRec's `sparse_dist` for a workload with a dense
part, else the sparse part in a plain loop, `none`. Left NULL, a study resumed after the upgrade, or
a re-validation of its config, never found those rows among what it measured again: it launched one
side over and over, then gave up (a re-validation: "not enough rounds", exit 3; a resumed study: its
confirmed finalist dropped and the baseline published as "not confirmed").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.text(  # (no DISTINCT over the JSON column: PostgreSQL has no = for json)
        "SELECT s.id, w.spec FROM at_studies s JOIN at_workloads w ON w.id = s.workload_id "
        "WHERE s.id IN (SELECT study_id FROM at_candidates WHERE pipeline IS NULL)"
    ))  # fmt: skip
    for study_id, spec in rows.fetchall():
        try:
            workload = json.loads(spec) if isinstance(spec, str) else spec
            dense = isinstance(workload, dict) and workload.get("dense") is not None
        except ValueError:  # a workload no one can read: its rows stay NULL, as before
            continue
        bind.execute(
            sa.text("UPDATE at_candidates SET pipeline = :ran WHERE study_id = :study AND pipeline IS NULL"),
            {"ran": "sparse_dist" if dense else "none", "study": study_id},
        )


def downgrade() -> None:
    pass  # which rows were NULL is not kept, and what they ran is true under either schema
