"""slurm views: the node table the leading serve replica reads, published for the others

Revision ID: 0010
Revises: 0009

Drafted by `python -m slurmguard.store.ddl --new-migration` from the models; reviewed by hand
(docs/store.md, "Changing the schema").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('slurm_views',
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('read_at', sa.Float(), nullable=False),
    sa.Column('changed_at', sa.Float(), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.Column('publisher', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_slurm_views'))
    )


def downgrade() -> None:
    op.drop_table('slurm_views')
