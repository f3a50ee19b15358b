"""The store's fleet switches (``store.switches``): a switch an admin turns on from any host
and every serve replica sees, unlike a file on one host. One row per switch that is on.

    store.switches.turn_on("repair-paused", actor="admin:carol", reason="firmware rollout")
    store.switches.get("repair-paused")   # SwitchRow, or None when off
    store.switches.turn_off("repair-paused")
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from slurmguard.store.engine import guard
from slurmguard.store.models import FleetSwitch

REPAIR_PAUSED = "repair-paused"


@dataclass(frozen=True)
class SwitchRow:
    name: str
    actor: str
    reason: str
    at: float


class Switches:
    """Fleet switches on the store's engine (``store.switches``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def turn_on(self, name: str, *, actor: str, reason: str = "",
                now: float | None = None) -> bool:
        """Turn ``name`` on; False when it already was (its first setter is kept)."""
        at = time.time() if now is None else now
        with guard(self.engine, f"switch {name}"):
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(FleetSwitch).values(name=name[:64], actor=actor[:255],
                                                            reason=reason[:1000], at=at))
            except IntegrityError:
                return False  # on already (another admin, or a race with one): nothing to do
        return True

    def turn_off(self, name: str) -> bool:
        """Turn ``name`` off; False when it was not on."""
        with guard(self.engine, f"switch {name}"), self.engine.begin() as conn:
            return bool(conn.execute(delete(FleetSwitch).where(FleetSwitch.name == name[:64]))
                        .rowcount)

    def get(self, name: str) -> SwitchRow | None:
        with guard(self.engine, f"switch {name}"), self.engine.connect() as conn:
            r = conn.execute(select(FleetSwitch.__table__)
                             .where(FleetSwitch.name == name[:64])).first()
        return None if r is None else SwitchRow(r.name, r.actor, r.reason, float(r.at))
