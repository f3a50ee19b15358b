"""Where the store is, and the read-only standard-library open of a SQLite store.

The configured ``[store]`` is worked out here once: its SQLAlchemy URL (the engine) and,
for SQLite, its file (the two light readers: the gate at every job's allocation and
`burnin report`, which must not pay SQLAlchemy's import). :func:`open_read_only` is the one
way those readers open the file: read-only (``mode=ro``: a reader never creates or writes the
store), with the busy timeout, and refused unless its schema revision is the one this
slurmguard knows (slurmguard.store.version). No SQLAlchemy import here
(tests/test_gate.py, tests/test_burnin_report_fast.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slurmguard.config import SCHEMA
from slurmguard.errors import StoreError
from slurmguard.store.version import schema_problem

if TYPE_CHECKING:
    import sqlite3

DEFAULT_PATH: str = SCHEMA["store"]["path"].default  # store.path's default, for hand-built sections
_SQLITE = "sqlite:///"


def store_url(section: Mapping[str, Any]) -> str:
    """The SQLAlchemy URL of the configured store: ``url``, else the SQLite file ``path``."""
    url = str(section.get("url") or "")
    return url or _SQLITE + str(section.get("path") or DEFAULT_PATH)


def sqlite_path(section: Mapping[str, Any]) -> str | None:
    """The file of a SQLite ``[store]`` section; None for any other database (or in-memory)."""
    url = store_url(section)
    if not url.startswith(_SQLITE):
        return None
    path = url[len(_SQLITE):]
    return path if path and path != ":memory:" else None


def open_read_only(path: str, busy_timeout: float = 5.0) -> sqlite3.Connection:
    """A read-only connection to the SQLite store at ``path`` whose schema is this
    slurmguard's; StoreError (one line, naming the file) otherwise."""
    import sqlite3

    if not os.path.exists(path):
        raise StoreError(f"store {path}: no such file; run: slurmguard setup controller")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout)
    except sqlite3.Error as exc:
        raise StoreError(f"store {path}: {exc}") from None
    try:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            row = None  # no table: not a slurmguard store (yet)
        problem = schema_problem(row[0] if row else None, path)
    except BaseException:
        conn.close()
        raise
    if problem:
        conn.close()
        raise StoreError(problem)
    return conn
