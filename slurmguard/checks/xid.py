"""Checks of area 'xid' (placeholder until the area's checks land)."""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check

AREA = "xid"
PARAMS: dict[str, Any] = {}
CHECKS: list[Check] = []
