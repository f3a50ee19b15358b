"""Goodput accounting: goodput_jobs (one breakdown per job) and goodput_job_nodes.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PARTS = ("productive", "lost_work", "requeue_wait", "restart", "stall", "checkpoint_save",
         "drained_node", "straggler", "other", "unknown")


def upgrade() -> None:
    op.create_table(
        "goodput_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("ended", sa.Float(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("held_s", sa.Float(), nullable=False),
        *[sa.Column(f"{p}_s", sa.Float(), nullable=False) for p in PARTS],
        sa.Column("unknown", sa.Text(), nullable=False),
        sa.Column("steps_lost", sa.Integer(), nullable=False),
        sa.Column("collected", sa.Float(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_goodput_jobs"),
        sa.UniqueConstraint("job_id", name="uq_goodput_jobs_job_id"),
    )
    op.create_index("ix_goodput_jobs_ended", "goodput_jobs", ["ended"])
    op.create_index("ix_goodput_jobs_partition_ended", "goodput_jobs", ["partition", "ended"])
    op.create_index("ix_goodput_jobs_user_ended", "goodput_jobs", ["user", "ended"])
    op.create_table(
        "goodput_job_nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_row", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.ForeignKeyConstraint(["job_row"], ["goodput_jobs.id"], ondelete="CASCADE",
                                name="fk_goodput_job_nodes_job_row_goodput_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_goodput_job_nodes"),
    )
    op.create_index("ix_goodput_job_nodes_job_row", "goodput_job_nodes", ["job_row"])
    op.create_index("ix_goodput_job_nodes_node", "goodput_job_nodes", ["node"])


def downgrade() -> None:
    op.drop_table("goodput_job_nodes")
    op.drop_table("goodput_jobs")
