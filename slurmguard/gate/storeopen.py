"""The store a gate reads for one job: serve's own, or one opened for the job.

Standard library only at import: `slurmguard gate` on a SQLite store never opens SQLAlchemy's
(slurmguard/gate/answer.py reads it with sqlite3), and this opens it only when asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmguard.store.api import Store


@contextmanager
def opened(section: Mapping[str, Any], store: Store | None = None) -> Iterator[Store]:
    """``store`` when the gate runs inside serve (its gate socket: serve's pooled store), else
    the configured store, opened for this job and closed after. Opening one per job in serve
    cost a PostgreSQL gate an engine and a backend per job (bench_gate_burst.py), and a burst
    of one-node jobs could ask for more connections than the server allows."""
    if store is not None:
        yield store
        return
    from slurmguard.store.api import Store

    own = Store.open(section=section)
    try:
        yield own
    finally:
        own.close()
