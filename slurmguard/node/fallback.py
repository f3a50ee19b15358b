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
- **Anything else waits for its window, then counts.** Time is cut into windows of
  ``hooks.fallback_slot`` seconds, and windows into cycles of S = max(``fallback_slots``,
  ceil(P / ``fallback_share``)) for a partition of P nodes. In each cycle every residue
  0..S-1 gets exactly one window, at a position shifted by a hash of the cycle's number (the
  same on every node); a node decides only in its rank's (modulo S) window of each cycle, its
  rank taken in its first partition's sorted node list. It then reads Slurm's drained nodes
  and asks the guard with the drains of that cause in ``policy.blast_window`` as the ledger.

**What it reads.** Only what the cap needs: the partitions (``scontrol show partition``:
the node's partitions, their members for its rank and their sizes for their caps; slurmctld
answers it from its partition table, REQUEST_PARTITION_INFO, whatever the number of nodes),
and, in the node's own window only, the drained nodes with their reasons, reason times and
partitions (``sinfo -t drain``: slurmctld still packs its whole node table for it, since no
Slurm release filters nodes by state on the server, but a few lines come back instead of
every node's record). A node whose window is past its budget reads no node at all.

**The bound.** The nodes deciding in one window are those of one residue: at most
ceil(P / S) <= ``fallback_share`` = k of them. A node's read and drain take well under a slot
(one ``sinfo -t drain`` and one ``scontrol update``), so each window sees every drain of
the windows before it, and only the <= k nodes of one window decide on the same view. Once a
view holds the cap, every later decider refuses; the window that crossed it added at most k
drains on a view of at most cap - 1. So a shared fault drains at most **cap + k - 1** nodes
of the partition, whatever P (cap + 1 with the default k = 2), given clocks in sync well
within a slot (the timesync check). The price grows with P instead: a node with a
non-intrinsic fault waits for its window, up to 2S - 1 windows. A window past what the
hook's budget leaves is not waited for: the node is not drained this run ("its window is in
N s"), and a later run decides; the hash makes each run's chance about the reachable wait
over S x slot, whatever the HealthCheckInterval (a fixed order could keep a node's window out
of reach of every run). If Slurm cannot be read the node fails open, as before.
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


def _shift(cycle: int, slots: int) -> int:
    """The position of residue 0 in ``cycle`` (Knuth's multiplicative hash: the same on every
    node, no import)."""
    return ((cycle * 2654435761) & 0xFFFFFFFF) % slots


def slot_wait(rank: int, slots: int, slot: float, now: float) -> float:
    """Seconds from ``now`` to the start of the next window in which ``rank`` decides: the one
    window of each cycle (``slots`` windows of ``slot`` s) at position (rank + shift) mod slots.
    Too late in its own window (past a quarter of it) to finish inside: the next one."""
    window = int(now // slot)
    cycle = window // slots
    for c in (cycle, cycle + 1, cycle + 2):
        start = c * slots + (rank + _shift(c, slots)) % slots
        if start > window or (start == window and now - window * slot <= slot / 4):
            return max(0.0, start * slot - now)
    raise AssertionError("every cycle has a window for every rank")  # pragma: no cover


def cycle_slots(members: int, slots: int, share: int) -> int:
    """Windows per cycle: at least ``slots``, and enough that <= ``share`` nodes share one."""
    return max(slots, -(-members // max(1, share)))


def _since_epoch(text: str) -> float | None:
    try:  # Slurm prints local time, e.g. 2026-12-04T10:12:00
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


class SlurmPermit:
    """The fallback permit over Slurm's view (``slurm``: the Slurm adapter)."""

    def __init__(self, slurm: Any, cfg: Any, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 deadline: float | None = None) -> None:
        self.slurm, self.cfg, self.clock, self.sleep = slurm, cfg, clock, sleep
        hooks = cfg.section("hooks")
        self.slot, self.slots = float(hooks["fallback_slot"]), int(hooks["fallback_slots"])
        self.share = int(hooks["fallback_share"])
        self.deadline = deadline  # time.monotonic() by which the wait ends (None: no limit)
        self.params = PolicyParams.from_section(cfg.section("policy"))

    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        if cause in INTRINSIC:
            return True, "serve unreachable; node-intrinsic fault: drained without the cap"
        try:
            # The rank and the partitions' sizes from slurmctld's partition table (no node is
            # packed for it); the drains only in the node's own window, where it decides.
            members = self._partitions(node)
            first = sorted(next(iter(members.values()), [node]))
            slots = cycle_slots(len(first), self.slots, self.share)
            rank = first.index(node) if node in first else 0
            wait = slot_wait(rank, slots, self.slot, self.clock())
            if self.deadline is not None and wait > self.deadline - time.monotonic():
                return False, (f"serve unreachable, by Slurm's view: its window is in {wait:.0f} s,"
                               f" past the hook's budget ({slots} windows a cycle); a later run "
                               "decides")
            self.sleep(wait)
            drained = self.slurm.drained_nodes()
        except SlurmguardError as exc:
            return True, f"serve and Slurm unreachable, failing open: {exc.message}"
        return self._decide(node, cause, reason, drained, members)

    def _partitions(self, node: str) -> dict[str, list[str]]:
        """The partitions holding ``node`` (Slurm's order) and their members."""
        from slurmguard.nodeset import contains, names

        table = self.slurm.partitions()
        return {p: names(nodes, source=f"partition {p}: Nodes")
                for p, nodes in table.items() if nodes and contains(nodes, node)}

    def _decide(self, node: str, cause: str, reason: str, drained: list[Any],
                members: dict[str, list[str]]) -> tuple[bool, str]:
        since = self.clock() - self.params.blast_window
        # Slurm's drained nodes as the ledger: ours, each with its cause and reason time (a
        # drain without a readable time is counted: it is taken as now).
        recent = ledger((view_entry(i.name, i.reason, _since_epoch(i.reason_time) or self.clock())
                         for i in drained if i.drained and i.ours and i.name != node), since)
        # The scopes this node is in: its partitions (whole, for their caps) and the fleet,
        # which holds every drained node (its cap is blast_max_nodes, whatever its size).
        held: dict[str, list[str]] = {}
        for part, names in members.items():
            for n in names:
                held.setdefault(n, []).append(part)
        sc = scopes(held, self.params.groups, fleet=[node, *(i.name for i in drained)])
        allowed, actions = guard([DrainRequest(node, cause, reason)], recent, sc, self.params)
        if allowed:
            mine = sum(cause in c for c in recent.values())
            return True, f"serve unreachable, by Slurm's view: within the cap ({mine} drained)"
        alert = next((a.reason for a in actions if a.kind == "alert"), "refused")
        return False, f"serve unreachable, by Slurm's view: {alert}"
