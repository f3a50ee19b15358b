"""Checks of area 'fs' (placeholder until the area's checks land)."""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check

AREA = "fs"
PARAMS: dict[str, Any] = {}
CHECKS: list[Check] = []
