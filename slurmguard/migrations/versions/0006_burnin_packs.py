"""burnin_packs: one row per node with its burnin_series rows packed, for `burnin report`.

Revision ID: 0006
Revises: 0005

Over 10,000 nodes x 10 metrics, fetching 100,000 burnin_series rows (1.1 million Python
values) and walking them was most of the report; one row per node with the metrics packed
(JSON for the names, float64 bytes for the numbers) is 10,000 rows read into numpy
(docs/burnin.md, "Report at fleet scale"; the format: slurmguard/store/burnin_read.py).
burnin_series stays the readable copy and what `--node --plot` and PostgreSQL history read.
Packs are filled here from the rows already stored; a node with a row whose values did not
parse (NULL recent_f8) gets none, and the report then reads burnin_series.
"""

from __future__ import annotations

from itertools import groupby

import sqlalchemy as sa
from alembic import op

from slurmguard.store.burnin_read import pack_series

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "burnin_packs",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("meta", sa.Text(), nullable=False),
        sa.Column("nums", sa.LargeBinary(), nullable=False),
        sa.Column("recent", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_burnin_packs_node_id_nodes",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id", name="pk_burnin_packs"),
    )
    conn = op.get_bind()
    s = sa.table("burnin_series", *(sa.column(c) for c in (
        "node_id", "metric", "unit", "higher_is_better", "group_key", "last_run_id", "last_at",
        "last_value", "last_night", "recent", "recent_f8")))
    rows = conn.execute(sa.select(*s.c).order_by(s.c.node_id, s.c.metric)).all()
    packs = sa.table("burnin_packs", sa.column("node_id"), sa.column("meta"),
                     sa.column("nums"), sa.column("recent"))
    todo = []
    for node_id, group in groupby(rows, key=lambda r: r[0]):
        packed = pack_series(list(group))
        if packed is not None:
            todo.append(dict(zip(("node_id", "meta", "nums", "recent"), (node_id, *packed),
                                 strict=True)))
    for i in range(0, len(todo), 1000):
        conn.execute(sa.insert(packs), todo[i:i + 1000])


def downgrade() -> None:
    op.drop_table("burnin_packs")
