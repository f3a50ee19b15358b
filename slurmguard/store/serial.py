"""Fleet decisions with a cap, serialized in the database (docs/serve.md, "Replicas").

    with store.serialized("permit:fs-mount") as tx:      # one transaction, the lock held
        recent = tx.nodes.events(...)                     # read the ledger
        tx.nodes.record_event(...)                        # write the answer; commit at exit

Any number of serve replicas (and the gate, burn-in and the reconciler, each its own
process) decide one at a time per name, and each decision reads every earlier one:

- PostgreSQL: ``pg_advisory_xact_lock(key)`` as the transaction's first statement, ``key``
  a 64-bit hash of the name. The lock is released by COMMIT or ROLLBACK (also when the
  client dies: the server ends its transaction), so it cannot be left behind. Under READ
  COMMITTED every later statement of the holder sees what earlier holders committed.
  Chosen over SERIALIZABLE with retry: a storm of permits for one cause conflicts on every
  pair, so SERIALIZABLE would abort and retry most of them (a thundering herd on the busy
  moment); the lock queues them and each costs one round trip of waiting.
- SQLite: ``BEGIN IMMEDIATE``: the database's one write lock for the whole transaction
  (readers go on under WAL); waits up to ``store.busy_timeout``. One name or another, the
  file has one writer at a time.

Names are per cause (``permit:<cause>``): the guard counts per cause in every scope, so two
causes never share a slot and never wait on each other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, text

from slurmguard.store.engine import guard


def lock_key(name: str) -> int:
    """A signed 64-bit advisory-lock key for ``name`` (stable across processes and hosts)."""
    digest = hashlib.blake2b(f"slurmguard:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def take_lock(conn: Any, name: str) -> None:
    """Take the transaction's serializing lock for ``name`` on ``conn`` (just begun)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(name)})
    else:  # SQLite: the driver has not begun yet (it begins before the first write)
        conn.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def serialized(engine: Engine, name: str) -> Iterator[Any]:
    """One transaction on ``engine`` holding the lock for ``name``; yields its connection.
    Commits at exit, rolls back (and releases the lock) on an exception."""
    with guard(engine, f"serialize {name}"), engine.begin() as conn:
        take_lock(conn, name)
        yield conn
