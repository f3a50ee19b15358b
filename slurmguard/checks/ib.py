"""Checks of area 'ib' (placeholder until the area's checks land)."""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check

AREA = "ib"
PARAMS: dict[str, Any] = {}
CHECKS: list[Check] = []
