"""`slurmguard serve status`: the replicas that heartbeat into the store, which one leads,
the last policy pass, and how fresh the store is (docs/serve.md, "serve status").

A replica is *up* when its heartbeat (every ``serve.leader_retry`` s) is younger than
:func:`stale_after`; on PostgreSQL the leader is whoever holds the leader lock now (the
database's word, not a row), on SQLite the one live serve.
"""

from __future__ import annotations

import time
from typing import Any


def stale_after(retry: float) -> float:
    """Seconds without a heartbeat after which a replica is shown as gone."""
    return 3 * retry + 5.0


def replica_status(store: Any, retry: float, now: float | None = None) -> dict[str, Any]:
    """The status as a JSON-ready dict (the text form is :func:`status_lines`)."""
    now = time.time() if now is None else now
    rows = store.replicas.all()
    limit = stale_after(retry)
    replicas = [{"name": r.name, "host": r.host, "pid": r.pid, "version": r.version,
                 "up": now - r.heartbeat <= limit, "leader": r.leader and now - r.heartbeat <= limit,
                 "heartbeat_age_s": round(now - r.heartbeat, 1),
                 "last_pass_age_s": None if r.last_pass is None else round(now - r.last_pass, 1)}
                for r in rows]
    leader = _leader_now(store, replicas)
    passes = [r.last_pass for r in rows if r.last_pass is not None]
    newest = store.replicas.newest_record()
    return {"store": store.where, "leader": leader,
            "replicas": replicas, "up": sum(r["up"] for r in replicas),
            "last_policy_pass_age_s": round(now - max(passes), 1) if passes else None,
            "newest_record_age_s": None if newest is None else round(now - newest, 1),
            "standbys": store.replicas.standbys()}


def _leader_now(store: Any, replicas: list[dict[str, Any]]) -> str | None:
    if store.engine.dialect.name == "postgresql":
        from slurmguard.serve.leader import LOCK_NAME
        from slurmguard.store.serial import SessionLock

        lock = SessionLock(store.engine, LOCK_NAME)
        try:
            holder = lock.holder()
        finally:
            lock.close()
        return holder.removeprefix("slurmguard-serve ") if holder else None
    return next((r["name"] for r in replicas if r["leader"]), None)


def status_lines(s: dict[str, Any]) -> list[str]:
    """The text form: a summary, then one line per replica."""
    def age(v: float | None) -> str:
        return "never" if v is None else f"{v:g} s ago"

    out = [f"store:       {s['store']}",
           f"leader:      {s['leader'] or '(none)'}",
           f"replicas up: {s['up']} of {len(s['replicas'])} seen",
           f"last policy pass: {age(s['last_policy_pass_age_s'])}",
           f"newest record:    {age(s['newest_record_age_s'])}"]
    for sb in s["standbys"]:
        lag = "?" if sb["replay_lag_s"] is None else f"{sb['replay_lag_s']:g} s"
        out.append(f"standby {sb['name'] or sb['address']}: {sb['state']}, replay lag {lag}")
    for r in s["replicas"]:
        state = "leader" if r["leader"] else ("up" if r["up"] else "gone")
        out.append(f"  {r['name']:<40} {state:<6} pid {r['pid']:<7} heartbeat "
                   f"{age(r['heartbeat_age_s'])}, version {r['version']}")
    return out
