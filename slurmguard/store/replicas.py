"""The store's serve-replicas area (``store.replicas``): one heartbeat row per `slurmguard
serve` process, written by the process itself (serve/leader.py) and read by
`slurmguard serve status`.

    store.replicas.beat("ctl1 10.0.0.1:8742", host="ctl1", pid=1234, version="...",
                        started=t0, leader=True, last_pass=t1)
    store.replicas.all()          # [ReplicaRow], newest heartbeat first
    store.replicas.newest_record()  # when serve last stored a record (any replica)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from slurmguard.store.engine import guard
from slurmguard.store.models import Run, ServeReplica


@dataclass(frozen=True)
class ReplicaRow:
    name: str
    host: str
    pid: int
    version: str
    started: float
    heartbeat: float
    leader: bool
    last_pass: float | None


class Replicas:
    """serve's heartbeats: one per store, on its engine (``store.replicas``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def beat(self, name: str, *, host: str, pid: int, version: str, started: float,
             leader: bool, last_pass: float | None, now: float | None = None) -> None:
        """Insert or refresh this replica's row (its name is unique: "HOST ADDR:PORT")."""
        now = time.time() if now is None else now
        values: dict[str, Any] = {"host": host[:255], "pid": pid, "version": version[:64],
                                  "started": started, "heartbeat": now, "leader": leader,
                                  "last_pass": last_pass}
        with guard(self.engine, "serve heartbeat"), self.engine.begin() as conn:
            done = conn.execute(update(ServeReplica).where(ServeReplica.name == name[:200])
                                .values(**values)).rowcount
            if not done:
                conn.execute(insert(ServeReplica).values(name=name[:200], **values))

    def forget(self, name: str) -> None:
        """Remove a replica's row (serve stopping cleanly)."""
        with guard(self.engine, "serve heartbeat"), self.engine.begin() as conn:
            conn.execute(delete(ServeReplica).where(ServeReplica.name == name[:200]))

    def all(self) -> list[ReplicaRow]:
        with guard(self.engine, "serve replicas"), self.engine.connect() as conn:
            rows = conn.execute(select(ServeReplica.__table__)
                                .order_by(ServeReplica.heartbeat.desc())).all()
            return [ReplicaRow(r.name, r.host, r.pid, r.version, r.started, r.heartbeat,
                               bool(r.leader), r.last_pass) for r in rows]

    def newest_record(self) -> float | None:
        """When the newest stored record was received (any replica), or None: the row with
        the highest id (the primary key's index, not a scan of ``runs``)."""
        with guard(self.engine, "newest record"), self.engine.connect() as conn:
            at = conn.execute(select(Run.received).order_by(Run.id.desc()).limit(1)).scalar()
        return None if at is None else float(at)

    def standbys(self) -> list[dict[str, Any]]:
        """PostgreSQL streaming standbys of the store and how far behind each replays
        (``pg_stat_replication``; seconds, None when idle or not visible to this user).
        Empty on SQLite or with no standby."""
        if self.engine.dialect.name != "postgresql":
            return []
        from sqlalchemy import text

        with guard(self.engine, "standbys"), self.engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT application_name, client_addr::text, state,"
                " EXTRACT(EPOCH FROM replay_lag) FROM pg_stat_replication")).all()
        return [{"name": r[0], "address": r[1], "state": r[2],
                 "replay_lag_s": None if r[3] is None else float(r[3])} for r in rows]
