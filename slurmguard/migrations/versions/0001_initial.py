"""Initial store: nodes, runs, results, events, fleet_alerts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One function per table (and its indexes), in the order the foreign keys need.
    _nodes()
    _fleet_alerts()
    _runs()
    _events()
    _results()


def _nodes() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=True),
        sa.Column("last_health", sa.String(16), nullable=True),
        sa.Column("last_hook", sa.String(32), nullable=True),
        sa.Column("last_reason", sa.Text(), nullable=True),
        sa.Column("last_run_id", sa.Integer(), nullable=True),
        sa.Column("lemon", sa.Boolean(), nullable=False),
        sa.Column("lemon_since", sa.Float(), nullable=True),
        sa.Column("lemon_reason", sa.Text(), nullable=True),
        sa.Column("burnin_required", sa.Boolean(), nullable=False),
        sa.Column("probation", sa.Boolean(), nullable=False),
        sa.Column("probation_since", sa.Float(), nullable=True),
        sa.Column("probation_passes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_nodes"),
        sa.UniqueConstraint("name", name="uq_nodes_name"),
    )


def _fleet_alerts() -> None:
    op.create_table(
        "fleet_alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("opened", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.Column("closed", sa.Float(), nullable=True),
        sa.Column("cause", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_fleet_alerts"),
    )
    op.create_index("ix_fleet_alerts_cause_scope_closed", "fleet_alerts",
                    ["cause", "scope", "closed"])


def _runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("hook", sa.String(32), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("received", sa.Float(), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_runs_node_id_nodes",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("record_id", name="uq_runs_record_id"),
    )
    op.create_index("ix_runs_node_id_started", "runs", ["node_id", "started"])
    op.create_index("ix_runs_health_started", "runs", ["health", "started"])


def _events() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("actor_kind", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_events_node_id_nodes",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_node_id_at", "events", ["node_id", "at"])
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_kind_at", "events", ["kind", "at"])


def _results() -> None:
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_results_node_id_nodes",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_results_run_id_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_results"),
    )
    op.create_index("ix_results_node_id_started", "results", ["node_id", "started"])
    op.create_index("ix_results_name_health_started", "results", ["name", "health", "started"])
    op.create_index("ix_results_run_id", "results", ["run_id"])


def downgrade() -> None:
    for table in ("results", "events", "runs", "fleet_alerts", "nodes"):
        op.drop_table(table)
