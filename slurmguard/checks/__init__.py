"""The explicit list of every check. A duplicate name fails at import.

Check modules are pure (no adapters, no heavy imports), so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

from slurmguard.checks import fs, gpu, host, ib, timesync, xid
from slurmguard.checks.base import SOURCES, Check

_AREAS = (gpu, xid, ib, fs, host, timesync)

ALL_CHECKS: tuple[Check, ...] = tuple(c for m in _AREAS for c in m.CHECKS)
AREA_PARAMS: dict[str, Any] = {m.AREA: m.PARAMS for m in _AREAS}

BY_NAME: dict[str, Check] = {}
for _c in ALL_CHECKS:
    if _c.name in BY_NAME:
        raise RuntimeError(f"duplicate check name: {_c.name}")
    BY_NAME[_c.name] = _c
    for _s in _c.sources:
        if _s not in SOURCES:
            raise RuntimeError(f"check {_c.name}: unknown source {_s}")
