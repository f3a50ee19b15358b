"""serve replicas: one heartbeat row per `slurmguard serve` process (`serve status`)

Revision ID: 0008
Revises: 0007

Drafted by `python -m slurmguard.store.ddl --new-migration` from the models; reviewed by hand
(docs/store.md, "Changing the schema").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('serve_replicas',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('started', sa.Float(), nullable=False),
    sa.Column('heartbeat', sa.Float(), nullable=False),
    sa.Column('leader', sa.Boolean(), nullable=False),
    sa.Column('last_pass', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_serve_replicas')),
    sa.UniqueConstraint('name', name=op.f('uq_serve_replicas_name'))
    )


def downgrade() -> None:
    op.drop_table('serve_replicas')
