"""The node-state history serve keeps from its node view: every change of a node between in
service and out of it (drained, DOWN, FAIL), with Slurm's reason, who set it and when, as a
``state_change`` event of actor ``slurm`` (details: ``to``, ``by``, ``state``, ``ours``).

A site without Slurm accounting (no ``sacctmgr show event``) has the incumbent's drains
(NHC's, its admins', Slurm's own) here; `slurmguard shadow report` reads them
(slurmguard/shadow/). The view is the one serve reads anyway (serve/slurmview.py
CachedNodes, every ``serve.slurm_view_ttl``): no read of Slurm's is added.

On serve's first view a node already out gets one event dated by Slurm's reason time (when
it says one), so a restart of serve neither loses nor repeats a drain: a node whose latest
stored state_change already says it is out for the same reason is not written again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from slurmguard.errors import SlurmguardError

log = logging.getLogger("slurmguard.serve")
KIND = "state_change"
OUT, IN = "out", "in"


def _out(info: Any) -> bool:
    return bool(info.drained or info.down or "FAIL" in info.flags or "DRAIN" in info.flags)


def _when(text: str, default: float) -> float:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, AttributeError):
        return default


class NodeStates:
    """Call :meth:`update` with each full node view; it writes the changes to ``store``."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._last: dict[str, tuple[str, str]] | None = None  # node -> (in/out, reason)

    def _stored(self) -> dict[str, tuple[str, str]]:
        """Each node's latest stored state (a restarted serve goes on from the ledger)."""
        got: dict[str, tuple[str, str]] = {}
        for e in self.store.nodes.events(kinds=[KIND], limit=100_000):  # newest first
            if e.actor_kind == "slurm" and e.node not in got:
                got[e.node] = (str(e.details.get("to", "")), e.reason)
        return got

    def update(self, infos: Iterable[Any], now: float | None = None) -> int:
        """Write the changes since the last view; returns how many were written."""
        now = time.time() if now is None else now
        first = self._last is None
        last = self._stored() if first else self._last
        assert last is not None
        seen: dict[str, tuple[str, str]] = {}
        written = 0
        for info in infos:
            state = (OUT, info.reason) if _out(info) else (IN, "")
            seen[info.name] = state
            before = last.get(info.name)
            if before == state or (before is None and state[0] == IN):
                continue  # unchanged; a node first seen in service is no news
            at = _when(info.reason_time, now) if state[0] == OUT else now
            try:
                self.store.nodes.record_event(
                    info.name, KIND, "slurm", state[1] or f"back in service ({info.state})",
                    source="slurm", at=at,
                    details={"to": state[0], "by": info.reason_user, "state": info.state,
                             "flags": sorted(info.flags), "ours": bool(info.ours)})
                written += 1
            except SlurmguardError as exc:
                log.warning("node states: %s not recorded: %s", info.name, exc)
                seen[info.name] = before or (IN, "")  # try again with the next view
        self._last = {**last, **seen}
        return written
