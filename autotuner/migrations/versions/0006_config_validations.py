"""published configs are re-validated (the history of each version's re-validations, and the queue),
and jobs that run on another stack than a config was validated on are counted

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-12
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
PENDING = "state IN ('queued', 'running')"


def upgrade() -> None:
    op.create_table(
        "at_config_validations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("config_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_fingerprint", sa.JSON(), nullable=True),
        sa.Column("fingerprint", sa.JSON(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("action", sa.Text(), nullable=True),
        sa.Column("new_config_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["config_id"], ["at_configs.id"]),
        sa.ForeignKeyConstraint(["new_config_id"], ["at_configs.id"]),
        sa.ForeignKeyConstraint(["study_id"], ["at_studies.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("at_config_validations") as batch:
        batch.create_index(batch.f("ix_at_config_validations_config_id"), ["config_id"], unique=False)
        batch.create_index(batch.f("ix_at_config_validations_state"), ["state"], unique=False)
    # one queued or running re-validation per version
    op.create_index("uq_at_config_validations_pending", "at_config_validations", ["config_id"], unique=True,
                    sqlite_where=sa.text(PENDING), postgresql_where=sa.text(PENDING))  # fmt: skip

    op.create_table(
        "at_fingerprint_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("config_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("diff", sa.JSON(), nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("validation_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["config_id"], ["at_configs.id"]),
        sa.ForeignKeyConstraint(["validation_id"], ["at_config_validations.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("config_id", "digest"),
    )
    with op.batch_alter_table("at_fingerprint_reports") as batch:
        batch.create_index(batch.f("ix_at_fingerprint_reports_config_id"), ["config_id"], unique=False)


def downgrade() -> None:
    op.drop_table("at_fingerprint_reports")
    op.drop_table("at_config_validations")
