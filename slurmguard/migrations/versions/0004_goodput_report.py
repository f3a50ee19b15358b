"""Goodput reports: covering indexes for the fleet queries, unknown_notes, node shares.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

PARTS = ("productive", "lost_work", "requeue_wait", "restart", "stall", "checkpoint_save",
         "drained_node", "straggler", "other", "unknown")


def upgrade() -> None:
    with op.batch_alter_table("goodput_jobs") as b:
        b.add_column(sa.Column("unknown_notes", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("goodput_job_nodes") as b:
        b.add_column(sa.Column("share", sa.Float(), nullable=False, server_default="1.0"))
    # Rows stored by 0002: their notes and node shares from what they hold.
    op.execute("UPDATE goodput_jobs SET unknown_notes = 1 WHERE unknown <> '[]'")
    op.execute("UPDATE goodput_job_nodes SET share = 1.0 / (SELECT count(*) FROM goodput_job_nodes n"
               " WHERE n.job_row = goodput_job_nodes.job_row)")
    op.create_index("ix_goodput_jobs_report", "goodput_jobs",
                    ["ended", "partition", "user", "gpus", "wall_s", "held_s", "unknown_notes",
                     *[f"{p}_s" for p in PARTS]])
    op.create_index("ix_goodput_job_nodes_report", "goodput_job_nodes", ["job_row", "node", "share"])


def downgrade() -> None:
    op.drop_index("ix_goodput_job_nodes_report", "goodput_job_nodes")
    op.drop_index("ix_goodput_jobs_report", "goodput_jobs")
    with op.batch_alter_table("goodput_job_nodes") as b:
        b.drop_column("share")
    with op.batch_alter_table("goodput_jobs") as b:
        b.drop_column("unknown_notes")
