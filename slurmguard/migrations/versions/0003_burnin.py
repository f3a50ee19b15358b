"""Burn-in: burnin_runs, burnin_results, burnin_series.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One function per table (and its indexes), in the order the foreign keys need.
    _burnin_runs()
    _burnin_results()
    _burnin_series()


def _burnin_runs() -> None:
    op.create_table(
        "burnin_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("night", sa.String(16), nullable=False),
        sa.Column("group_key", sa.String(128), nullable=False),
        sa.Column("submitted", sa.Float(), nullable=False),
        sa.Column("started", sa.Float(), nullable=True),
        sa.Column("finished", sa.Float(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reservation", sa.String(128), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("verdict_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_burnin_runs_node_id_nodes",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_burnin_runs"),
    )
    op.create_index("ix_burnin_runs_node_id_submitted", "burnin_runs", ["node_id", "submitted"])
    op.create_index("ix_burnin_runs_status_submitted", "burnin_runs", ["status", "submitted"])
    op.create_index("ix_burnin_runs_job_id", "burnin_runs", ["job_id"])


def _burnin_results() -> None:
    op.create_table(
        "burnin_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("measurement", sa.String(64), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_burnin_results_node_id_nodes",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["burnin_runs.id"],
                                name="fk_burnin_results_run_id_burnin_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_burnin_results"),
    )
    op.create_index("ix_burnin_results_run_id", "burnin_results", ["run_id"])
    op.create_index("ix_burnin_results_node_id_metric_at", "burnin_results",
                    ["node_id", "metric", "at"])


def _burnin_series() -> None:
    op.create_table(
        "burnin_series",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("higher_is_better", sa.Boolean(), nullable=False),
        sa.Column("group_key", sa.String(128), nullable=False),
        sa.Column("last_run_id", sa.Integer(), nullable=False),
        sa.Column("last_at", sa.Float(), nullable=False),
        sa.Column("last_value", sa.Float(), nullable=False),
        sa.Column("last_night", sa.String(16), nullable=False),
        sa.Column("recent", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_burnin_series_node_id_nodes",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id", "metric", name="pk_burnin_series"),
    )


def downgrade() -> None:
    op.drop_table("burnin_series")
    op.drop_index("ix_burnin_results_node_id_metric_at", table_name="burnin_results")
    op.drop_index("ix_burnin_results_run_id", table_name="burnin_results")
    op.drop_table("burnin_results")
    op.drop_index("ix_burnin_runs_job_id", table_name="burnin_runs")
    op.drop_index("ix_burnin_runs_status_submitted", table_name="burnin_runs")
    op.drop_index("ix_burnin_runs_node_id_submitted", table_name="burnin_runs")
    op.drop_table("burnin_runs")
