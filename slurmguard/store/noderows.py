"""What every area's writes share: the ``nodes`` row id of a name (created on first sight)
and IN (...) lists cut to a size both engines accept."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select

from slurmguard.store.models import Node

CHUNK = 500  # rows per IN (...) list: below SQLite's and PostgreSQL's parameter limits


def chunks(items: Sequence[Any]) -> Iterable[list[Any]]:
    """``items`` in lists of at most :data:`CHUNK` (one IN (...) list each)."""
    items = list(items)
    for i in range(0, len(items), CHUNK):
        yield items[i:i + CHUNK]


def node_ids(conn: Any, names: Iterable[str], now: float) -> dict[str, int]:
    """The ``nodes`` row id of each name, creating the rows not there yet (every area's writes
    go through here: a node is known from its first record, event or burn-in run)."""
    names = sorted(set(names))
    out: dict[str, int] = {}
    for chunk in chunks(names):
        out.update(conn.execute(select(Node.name, Node.id).where(Node.name.in_(chunk))).all())
    missing = [n for n in names if n not in out]
    for name in missing:
        out[name] = conn.execute(insert(Node).values(
            name=name, first_seen=now, lemon=False, burnin_required=False, probation=False,
            probation_passes=0).returning(Node.id)).scalar_one()
    return out
