"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _create_clusters()
    _create_workloads()
    _create_studies()
    _create_configs()
    _create_launches()
    _create_candidates()
    _create_quarantine()


def _create_clusters() -> None:
    op.create_table('at_clusters',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('fingerprint', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )


def _create_workloads() -> None:
    op.create_table('at_workloads',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )


def _create_studies() -> None:
    op.create_table('at_studies',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('space', sa.JSON(), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('launches_done', sa.Integer(), nullable=False),
    sa.Column('best_candidate_id', sa.Integer(), nullable=True),
    sa.Column('baseline_candidate_id', sa.Integer(), nullable=True),
    sa.Column('outcome', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('owner', sa.String(length=200), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['cluster_id'], ['at_clusters.id'], ),
    sa.ForeignKeyConstraint(['workload_id'], ['at_workloads.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    with op.batch_alter_table('at_studies', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_at_studies_cluster_id'), ['cluster_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_studies_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_studies_workload_id'), ['workload_id'], unique=False)



def _create_configs() -> None:
    op.create_table('at_configs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('nodes', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('env', sa.JSON(), nullable=False),
    sa.Column('fwd_precision', sa.String(length=8), nullable=False),
    sa.Column('bwd_precision', sa.String(length=8), nullable=False),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('sharding', sa.String(length=32), nullable=False),
    sa.Column('num_threads', sa.Integer(), nullable=True),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('fingerprint', sa.JSON(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=True),
    sa.Column('pinned', sa.Boolean(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['cluster_id'], ['at_clusters.id'], ),
    sa.ForeignKeyConstraint(['study_id'], ['at_studies.id'], ),
    sa.ForeignKeyConstraint(['workload_id'], ['at_workloads.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cluster_id', 'workload_id', 'nodes', 'version')
    )
    with op.batch_alter_table('at_configs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_at_configs_cluster_id'), ['cluster_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_configs_workload_id'), ['workload_id'], unique=False)



def _create_launches() -> None:
    op.create_table('at_launches',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('env', sa.JSON(), nullable=False),
    sa.Column('env_hash', sa.String(length=64), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('optuna_trials', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('executor', sa.String(length=32), nullable=False),
    sa.Column('backend_id', sa.String(length=200), nullable=True),
    sa.Column('request', sa.Text(), nullable=True),
    sa.Column('workdir', sa.Text(), nullable=True),
    sa.Column('log_path', sa.Text(), nullable=True),
    sa.Column('result_path', sa.Text(), nullable=True),
    sa.Column('summary', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('log_tail', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['study_id'], ['at_studies.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('study_id', 'seq')
    )
    with op.batch_alter_table('at_launches', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_at_launches_env_hash'), ['env_hash'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_launches_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_launches_study_id'), ['study_id'], unique=False)



def _create_candidates() -> None:
    op.create_table('at_candidates',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('launch_id', sa.Integer(), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('optuna_number', sa.Integer(), nullable=True),
    sa.Column('env', sa.JSON(), nullable=False),
    sa.Column('fwd_precision', sa.String(length=8), nullable=False),
    sa.Column('bwd_precision', sa.String(length=8), nullable=False),
    sa.Column('effective_fwd_precision', sa.String(length=8), nullable=True),
    sa.Column('effective_bwd_precision', sa.String(length=8), nullable=True),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('sharding', sa.String(length=32), nullable=False),
    sa.Column('num_threads', sa.Integer(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('samples_per_s', sa.Float(), nullable=True),
    sa.Column('iter_ms', sa.Float(), nullable=True),
    sa.Column('iter_cv', sa.Float(), nullable=True),
    sa.Column('a2a_ms', sa.Float(), nullable=True),
    sa.Column('a2a_bytes', sa.Float(), nullable=True),
    sa.Column('busbw_gbps', sa.Float(), nullable=True),
    sa.Column('quant_error_fwd', sa.Float(), nullable=True),
    sa.Column('quant_error_bwd', sa.Float(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['launch_id'], ['at_launches.id'], ),
    sa.ForeignKeyConstraint(['study_id'], ['at_studies.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('at_candidates', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_at_candidates_launch_id'), ['launch_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_candidates_samples_per_s'), ['samples_per_s'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_candidates_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_at_candidates_study_id'), ['study_id'], unique=False)



def _create_quarantine() -> None:
    op.create_table('at_quarantine',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('env_hash', sa.String(length=64), nullable=False),
    sa.Column('env', sa.JSON(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('launch_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['cluster_id'], ['at_clusters.id'], ),
    sa.ForeignKeyConstraint(['launch_id'], ['at_launches.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cluster_id', 'env_hash')
    )
    with op.batch_alter_table('at_quarantine', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_at_quarantine_cluster_id'), ['cluster_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('at_quarantine', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_at_quarantine_cluster_id'))

    op.drop_table('at_quarantine')
    with op.batch_alter_table('at_candidates', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_at_candidates_study_id'))
        batch_op.drop_index(batch_op.f('ix_at_candidates_state'))
        batch_op.drop_index(batch_op.f('ix_at_candidates_samples_per_s'))
        batch_op.drop_index(batch_op.f('ix_at_candidates_launch_id'))

    op.drop_table('at_candidates')
    with op.batch_alter_table('at_launches', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_at_launches_study_id'))
        batch_op.drop_index(batch_op.f('ix_at_launches_state'))
        batch_op.drop_index(batch_op.f('ix_at_launches_env_hash'))

    op.drop_table('at_launches')
    with op.batch_alter_table('at_configs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_at_configs_workload_id'))
        batch_op.drop_index(batch_op.f('ix_at_configs_cluster_id'))

    op.drop_table('at_configs')
    with op.batch_alter_table('at_studies', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_at_studies_workload_id'))
        batch_op.drop_index(batch_op.f('ix_at_studies_state'))
        batch_op.drop_index(batch_op.f('ix_at_studies_cluster_id'))

    op.drop_table('at_studies')
    op.drop_table('at_workloads')
    op.drop_table('at_clusters')
