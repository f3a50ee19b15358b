"""Result records: build them on the node, deliver them to `slurmguard serve`, spool on failure.

The node side uses the standard library only. (Delivery and spooling land with the store
issue; until then records are only built and logged.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from slurmguard import __version__
from slurmguard.health import CheckResult

RECORD_VERSION = 1


def make_record(node: str, hook: str, results: Sequence[CheckResult], action: str, reason: str,
                *, job_id: str | None = None, started: float | None = None,
                duration: float = 0.0) -> dict[str, Any]:
    """The JSON record of one hook run. ``id`` makes ingest exactly-once."""
    return {
        "version": RECORD_VERSION,
        "id": uuid.uuid4().hex,
        "node": node,
        "hook": hook,
        "job_id": job_id,
        "started": started if started is not None else time.time(),
        "duration": round(duration, 4),
        "decision": {"action": action, "reason": reason},
        "results": [r.to_dict() for r in results],
        "slurmguard_version": __version__,
    }


def deliver(record: dict[str, Any], cfg: Any) -> str:
    """Send a record to serve, or spool it. Returns "sent", "spooled" or "skipped"."""
    return "skipped"
