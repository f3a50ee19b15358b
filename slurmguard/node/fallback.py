"""The blast-radius cap when no serve replica answers a node's permit (docs/hooks.md, "When
every replica is unreachable").

Without serve a hook used to fail open, so a shared fault arriving while serve was down (a
filesystem, a fabric) drained every node that saw it. slurmctld is up when a prolog runs, and
Slurm's own node list says which nodes slurmguard drained, for what, and when (the reason
``slurmguard: <check>: ...`` and its time). So the node applies the same guard
(:func:`slurmguard.policy.blast.guard`, the same caps) to Slurm's view:

- **Node-intrinsic faults drain at once**, no cap: a lost or missing GPU, uncorrectable ECC,
  a failed row remap, and every Xid that the Xid table drains (checks/xid_table.py
  DRAIN_XIDS: 79 fallen off the bus, 48 double-bit ECC, 95 uncontained ECC, 64 row remap
  failure, 74 NVLink, 119/120 GSP, ...). A shared cause cannot produce them, and such a node
  must not take jobs. (63 and 94 are not among them: the table classes them info and app
  error, so they never drain.)
- **Anything else waits for its slot, then counts.** Time is cut into windows of
  ``hooks.fallback_slot`` seconds; a node decides only in windows whose number modulo
  ``hooks.fallback_slots`` equals its rank (modulo the same) in its first partition's
  sorted node list. It then reads Slurm and asks the guard with the drains of that cause
  in ``policy.blast_window`` as the ledger.

**The bound.** Nodes of different residues decide in different windows, at least one slot
apart; a node's read and drain take well under a slot (one ``scontrol show node`` and one
``scontrol update``), so each window sees every drain of the windows before it. Only nodes of
one residue can decide on the same view, and a partition of P nodes has at most
ceil(P / fallback_slots) of them. So a shared fault drains at most **cap + ceil(P /
fallback_slots) - 1** nodes of the partition (the cap exactly when P <= fallback_slots), with
clocks in sync well within a slot (the timesync check). The wait is at most fallback_slots x
fallback_slot seconds (10 s by default), paid only when serve is unreachable and the fault is
not node-intrinsic. If Slurm cannot be read the node fails open, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from slurmguard.checks.xid_table import DRAIN_XIDS
from slurmguard.errors import SlurmguardError
from slurmguard.policy.blast import DrainRequest, guard, ledger, scopes, view_entry
from slurmguard.policy.params import PolicyParams

# Node-intrinsic causes: the checks of one node's own hardware, and every Xid the one Xid
# table drains (checks/xid_table.py DRAIN_XIDS; its classes, not a second list here). The hook
# has imported the checks package before it can get here, so this costs nothing more.
INTRINSIC_CHECKS = frozenset({"gpu-lost", "gpu-count", "gpu-ecc", "gpu-remap"})
INTRINSIC = INTRINSIC_CHECKS | frozenset(f"gpu-xid:{code}" for code in DRAIN_XIDS)


def wait_for_slot(rank: int, slots: int, slot: float, *, clock: Callable[[], float] = time.time,
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Sleep until the start of the next window (of ``slot`` s) whose number modulo ``slots``
    is ``rank`` modulo ``slots``."""
    now = clock()
    window = int(now // slot)
    ahead = (rank - window) % slots
    if ahead == 0 and now - window * slot > slot / 4:
        ahead = slots  # too late in our own window to finish inside it: the next one
    if ahead:
        sleep(max(0.0, (window + ahead) * slot - now))


def _since_epoch(text: str) -> float | None:
    try:  # Slurm prints local time, e.g. 2026-12-04T10:12:00
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


class SlurmPermit:
    """The fallback permit over Slurm's view (``slurm``: the Slurm adapter)."""

    def __init__(self, slurm: Any, cfg: Any, *, clock: Callable[[], float] = time.time) -> None:
        self.slurm, self.cfg, self.clock = slurm, cfg, clock
        hooks = cfg.section("hooks")
        self.slot, self.slots = float(hooks["fallback_slot"]), int(hooks["fallback_slots"])
        self.params = PolicyParams.from_section(cfg.section("policy"))

    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        if cause in INTRINSIC:
            return True, "serve unreachable; node-intrinsic fault: drained without the cap"
        try:
            infos = {i.name: i for i in self.slurm.nodes()}
            mine = infos.get(node)
            part = mine.partitions[0] if mine is not None and mine.partitions else ""
            members = sorted(n for n, i in infos.items() if not part or part in i.partitions)
            wait_for_slot(members.index(node) if node in members else 0, self.slots, self.slot,
                          clock=self.clock)
            infos = {i.name: i for i in self.slurm.nodes()}
        except SlurmguardError as exc:
            return True, f"serve and Slurm unreachable, failing open: {exc.message}"
        return self._decide(node, cause, reason, infos)

    def _decide(self, node: str, cause: str, reason: str, infos: dict[str, Any]) -> tuple[bool, str]:
        since = self.clock() - self.params.blast_window
        # Slurm's view as the ledger: our drains, each with its cause and reason time (a drain
        # without a readable time is counted: it is taken as now).
        recent = ledger((view_entry(n, i.reason, _since_epoch(i.reason_time) or self.clock())
                         for n, i in infos.items() if i.drained and i.ours and n != node), since)
        sc = scopes(infos.values(), self.params.groups, fleet=[node])
        allowed, actions = guard([DrainRequest(node, cause, reason)], recent, sc, self.params)
        if allowed:
            mine = sum(cause in c for c in recent.values())
            return True, f"serve unreachable, by Slurm's view: within the cap ({mine} drained)"
        alert = next((a.reason for a in actions if a.kind == "alert"), "refused")
        return False, f"serve unreachable, by Slurm's view: {alert}"
