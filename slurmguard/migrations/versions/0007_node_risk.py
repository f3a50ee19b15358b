"""nodes.risk_score, nodes.risk_at: node risk as serve's policy pass last computed it.

Revision ID: 0007
Revises: 0006

The allocation gate refuses an at-risk node to jobs of more than ``risk.gate_max_nodes``
nodes (docs/fleet.md, "Uses"); it must stay one indexed query on ``nodes`` with the standard
library's sqlite3, so the score is precomputed by serve and stored beside the node's flags.
NULL: never scored (the gate then never refuses for risk).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("risk_score", sa.Float(), nullable=True))
    op.add_column("nodes", sa.Column("risk_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("risk_at")
        batch.drop_column("risk_score")
