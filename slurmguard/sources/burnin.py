"""One burn-in value: what a measurement reports and the store keeps (no I/O, no imports)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BurninValue:
    """One measured value (``metric``/``value``/``unit``) or a measurement without one."""

    measurement: str
    status: str  # ok, unsupported, error, failed
    metric: str = ""
    value: float | None = None
    unit: str = ""
    reason: str = ""
    higher_is_better: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)
