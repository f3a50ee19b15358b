"""The node-state store (SQLAlchemy 2; SQLite by default, PostgreSQL for fleets).

Importing this package is cheap; SQLAlchemy is imported when ``Store`` or the engine helpers
are first used (the gate's SQLite path never imports it at all).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Store", "NodeSummary", "TimelineItem", "EventRow", "AlertRow", "parse_actor"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from slurmguard.store import api

        return getattr(api, name)
    raise AttributeError(name)
