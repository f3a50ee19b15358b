"""Copy a store's history from SQLite into another (migrated, empty) store, e.g. a generated
fleet (tests/support/fleetgen.py, written with sqlite3 in bulk) into a real PostgreSQL, so
that the same history is read on both engines.

Rows keep their ids (the history refers to them); PostgreSQL's sequences are moved past them
afterwards so that later inserts (serve's ingest) get new ids.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import insert, text

from slurmguard.store.engine import make_engine
from slurmguard.store.models import ALL_TABLES

CHUNK = 5000


def copy_history(sqlite_path: str, url: str) -> dict[str, int]:
    """Copy every history table of the SQLite store at ``sqlite_path`` into the store at
    ``url`` (same schema revision, empty); the rows copied per table."""
    src = sqlite3.connect(sqlite_path)
    engine = make_engine({"url": url})
    done: dict[str, int] = {}
    try:
        with engine.begin() as conn:
            for table in ALL_TABLES:  # parents before children (the models' order)
                cols = [c.name for c in table.columns]
                cur = src.execute(f"SELECT {', '.join(cols)} FROM {table.name}")
                n = 0
                while rows := cur.fetchmany(CHUNK):
                    conn.execute(insert(table), [dict(zip(cols, r, strict=True)) for r in rows])
                    n += len(rows)
                done[table.name] = n
                if engine.dialect.name == "postgresql" and "id" in cols and n:
                    conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table.name}', "
                                      f"'id'), (SELECT max(id) FROM {table.name}))"))
    finally:
        src.close()
        engine.dispose()
    return done
