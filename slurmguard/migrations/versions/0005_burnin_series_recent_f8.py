"""burnin_series.recent_f8: the recent nights' values as float64 bytes, for `burnin report`.

Revision ID: 0005
Revises: 0004

The report over 10,000 nodes x 10 metrics spent ~0.4 s parsing 500,000 floats out of
``recent`` (text); the same values as little-endian float64 are read with
numpy.frombuffer (docs/burnin.md, "Report at fleet scale"). ``recent`` stays the readable
copy. Rows already stored are filled from their ``recent`` here; a row left NULL (text
that does not parse) is read from ``recent``.
"""

from __future__ import annotations

import struct

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("burnin_series") as b:
        b.add_column(sa.Column("recent_f8", sa.LargeBinary(), nullable=True))
    conn = op.get_bind()
    series = sa.table("burnin_series", sa.column("node_id", sa.Integer),
                      sa.column("metric", sa.String), sa.column("recent", sa.Text),
                      sa.column("recent_f8", sa.LargeBinary))
    rows = conn.execute(sa.select(series.c.node_id, series.c.metric, series.c.recent)).all()
    todo = []
    for node_id, metric, recent in rows:
        try:
            vals = [float(x) for x in (recent or "").split()]
        except ValueError:
            continue
        todo.append({"n": node_id, "m": metric, "b": struct.pack(f"<{len(vals)}d", *vals)})
    stmt = (sa.update(series).where(series.c.node_id == sa.bindparam("n"),
                                    series.c.metric == sa.bindparam("m"))
            .values(recent_f8=sa.bindparam("b")))
    for i in range(0, len(todo), 1000):
        conn.execute(stmt, todo[i:i + 1000])


def downgrade() -> None:
    with op.batch_alter_table("burnin_series") as b:
        b.drop_column("recent_f8")
