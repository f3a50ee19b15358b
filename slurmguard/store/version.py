"""Schema revisions this slurmguard knows, oldest first (no SQLAlchemy import here).

Kept equal to slurmguard/migrations/versions by tests/test_store_schema.py. The gate reads
this to refuse a store of a newer schema without importing Alembic.
"""

from __future__ import annotations

KNOWN_REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008",
                                     "0009", "0010")
HEAD = KNOWN_REVISIONS[-1]


def schema_problem(revision: str | None, where: str) -> str | None:
    """Why a store at schema ``revision`` cannot be used by this slurmguard, or None."""
    if revision is None:
        return (f"store {where} has no slurmguard schema; run `slurmguard db upgrade` "
                "(on a new controller: `slurmguard setup controller`)")
    if revision not in KNOWN_REVISIONS:
        return (f"store {where} has schema revision {revision}, newer than this slurmguard "
                f"knows (head {HEAD}); upgrade slurmguard on this host")
    if revision != HEAD:
        return (f"store {where} has schema revision {revision}, older than {HEAD}; "
                "run `slurmguard db upgrade`")
    return None
