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
    digest = hashlib.blake2b(f"slurmguard-lock {name}".encode(), digest_size=8).digest()
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


class SessionLock:
    """A PostgreSQL session-level advisory lock on a connection of its own: held as long as
    that connection lives (serve's leadership, serve/leader.py). The server releases it when
    the session ends: at once when the holder's process dies (its socket closes), and within
    about ``keepalive`` x 2 seconds when its host or network does (TCP keepalives set on the
    session)."""

    def __init__(self, engine: Engine, name: str, *, label: str = "",
                 keepalive: int = 5) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        self.name, self.key = name, lock_key(name)
        self._keepalive = keepalive
        args: dict[str, Any] = {"connect_timeout": 5, "keepalives": 1,
                                "keepalives_idle": keepalive, "keepalives_interval": 1,
                                "keepalives_count": keepalive}
        if label:
            args["application_name"] = label[:63]
        self._engine = create_engine(engine.url, poolclass=NullPool, connect_args=args)
        self._conn: Any = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; False when another session does (or the database
        cannot be reached)."""
        if self._conn is not None:
            return True
        try:
            conn = self._engine.connect()
            k = self._keepalive
            # The server side of the keepalive: a dead holder's host frees the lock in
            # about idle + count x interval seconds (~2 k), not after the kernel's 2 hours.
            for setting, value in (("tcp_keepalives_idle", k), ("tcp_keepalives_interval", 1),
                                   ("tcp_keepalives_count", k)):
                conn.exec_driver_sql(f"SET {setting} = {int(value)}")
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                    {"k": self.key}).scalar_one())
            conn.commit()  # a session lock outlives the transaction; never idle in one
        except Exception:  # noqa: BLE001  (unreachable: not the leader, try later)
            return False
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    def check(self) -> bool:
        """Still held? One round trip on the lock's connection; a lost connection is a lost
        lock (and the connection is dropped)."""
        if self._conn is None:
            return False
        try:
            self._conn.exec_driver_sql("SELECT 1").scalar_one()
            self._conn.commit()
            return True
        except Exception:  # noqa: BLE001
            self._drop()
            return False

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self._conn.commit()
        except Exception:  # noqa: BLE001  (the session ends below anyway)
            pass
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass

    def holder(self) -> str | None:
        """The ``application_name`` of the session holding the lock (any process), or None."""
        hi, lo = (self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF
        with guard(self._engine, "lock holder"), self._engine.connect() as conn:
            return conn.execute(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :hi"
                " AND l.objid = :lo AND l.objsubid = 1"), {"hi": hi, "lo": lo}).scalar()

    def close(self) -> None:
        self.release()
        self._engine.dispose()
