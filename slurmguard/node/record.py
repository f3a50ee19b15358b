"""The result record: the JSON of one hook run, as the node sends it and serve stores it.

Validated on the serve side by :mod:`slurmguard.store.records`; delivered by
:mod:`slurmguard.node.delivery`. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from slurmguard import __version__
from slurmguard.contract import CheckResult

RECORD_VERSION = 1


def make_record(node: str, hook: str, results: Sequence[CheckResult], action: str, reason: str,
                *, job_id: str | None = None, started: float | None = None,
                duration: float = 0.0) -> dict[str, Any]:
    """The JSON record of one hook run. ``id`` makes ingest exactly-once."""
    return {
        "version": RECORD_VERSION,
        "id": uuid4_hex(),
        "node": node,
        "hook": hook,
        "job_id": job_id,
        "started": started if started is not None else time.time(),
        "duration": round(duration, 4),
        "decision": {"action": action, "reason": reason},
        "results": [r.to_dict() for r in results],
        "slurmguard_version": __version__,
    }


def uuid4_hex() -> str:
    """``uuid.uuid4().hex`` without importing uuid on the hook path: 122 random bits with
    the version-4 and RFC 4122 variant bits set."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()
