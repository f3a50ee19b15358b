"""fleet switches: a switch an admin turns on from any host (`repair pause`), seen by every serve

Revision ID: 0009
Revises: 0008

Drafted by `python -m slurmguard.store.ddl --new-migration` from the models; reviewed by hand
(docs/store.md, "Changing the schema").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('fleet_switches',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('actor', sa.String(length=255), nullable=False),
    sa.Column('reason', sa.String(length=1000), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_fleet_switches'))
    )


def downgrade() -> None:
    op.drop_table('fleet_switches')
