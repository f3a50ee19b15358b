"""The blast-radius cap when no serve replica answers a node's permit (docs/hooks.md, "When
every replica is unreachable").

Without serve a hook used to fail open, so a shared fault arriving while serve was down (a
filesystem, a fabric) drained every node that saw it. slurmctld is up when a prolog runs, and
Slurm's own node list says which nodes slurmguard drained, for what, and when (the reason
``slurmguard: <check>: ...`` and its time). So the node applies the same guard
(:func:`slurmguard.policy.blast.guard`, the same caps) to Slurm's view:

- **Node-intrinsic faults drain at once**, no cap: a lost or missing GPU, uncorrectable ECC,
  a failed row remap, a draining Xid (79 fallen off the bus, 48 double-bit ECC, 94/95
  contained/uncontained ECC, 63/64 row remap, 74 NVLink). A shared cause cannot produce
  them, and such a node must not take jobs.
- **Anything else waits for its window, then counts.** Time is cut into windows of
  ``hooks.fallback_slot`` seconds, and windows into cycles of S = max(``fallback_slots``,
  ceil(P / ``fallback_share``)) for a partition of P nodes. In each cycle every residue
  0..S-1 gets exactly one window, at a position shifted by a hash of the cycle's number (the
  same on every node); a node decides only in its rank's (modulo S) window of each cycle, its
  rank taken in its first partition's sorted node list. It then reads Slurm and asks the
  guard with the drains of that cause in ``policy.blast_window`` as the ledger.

**The bound.** The nodes deciding in one window are those of one residue: at most
ceil(P / S) <= ``fallback_share`` = k of them. A node's read and drain take well under a slot
(one ``scontrol show node`` and one ``scontrol update``), so each window sees every drain of
the windows before it, and only the <= k nodes of one window decide on the same view. Once a
view holds the cap, every later decider refuses; the window that crossed it added at most k
drains on a view of at most cap - 1. So a shared fault drains at most **cap + k - 1** nodes
of the partition, whatever P (cap + 1 with the default k = 2), given clocks in sync well
within a slot (the timesync check). The price grows with P instead: a node with a
non-intrinsic fault waits for its window, up to 2S - 1 windows. A window past what the
hook's budget leaves is not waited for: the node is not drained this run ("its window is in
N s"), and a later run decides; the hash makes each run's chance about the reachable wait
over S x slot, whatever the HealthCheckInterval (a fixed order could keep a node's window out
of reach of every run). A first view that already holds the cap refuses at once. If Slurm
cannot be read the node fails open, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from slurmguard.contract import reason_source
from slurmguard.errors import SlurmguardError
from slurmguard.policy.blast import DrainRequest, cause_key, guard
from slurmguard.policy.blast import scopes as blast_scopes
from slurmguard.policy.params import PolicyParams

INTRINSIC = frozenset({"gpu-lost", "gpu-count", "gpu-ecc", "gpu-remap", "gpu-xid:79",
                       "gpu-xid:48", "gpu-xid:94", "gpu-xid:95", "gpu-xid:63", "gpu-xid:64",
                       "gpu-xid:74"})


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
            infos = {i.name: i for i in self.slurm.nodes()}
            mine = infos.get(node)
            part = mine.partitions[0] if mine is not None and mine.partitions else ""
            members = sorted(n for n, i in infos.items() if not part or part in i.partitions)
            allowed, why = self._decide(node, cause, reason, infos)
            if not allowed:  # the cap is already reached: later views only hold more drains
                return allowed, why
            slots = cycle_slots(len(members), self.slots, self.share)
            rank = members.index(node) if node in members else 0
            wait = slot_wait(rank, slots, self.slot, self.clock())
            if self.deadline is not None and wait > self.deadline - time.monotonic():
                return False, (f"serve unreachable, by Slurm's view: its window is in {wait:.0f} s,"
                               f" past the hook's budget ({slots} windows a cycle); a later run "
                               "decides")
            self.sleep(wait)
            infos = {i.name: i for i in self.slurm.nodes()}
        except SlurmguardError as exc:
            return True, f"serve and Slurm unreachable, failing open: {exc.message}"
        return self._decide(node, cause, reason, infos)

    def _decide(self, node: str, cause: str, reason: str, infos: dict[str, Any]) -> tuple[bool, str]:
        since = self.clock() - self.params.blast_window
        recent: dict[str, set[str]] = {}
        for name, i in infos.items():
            if not (i.drained and i.ours) or name == node:
                continue
            theirs = cause_key(reason_source(i.reason) or "", i.reason)
            at = _since_epoch(i.reason_time)
            if theirs == cause and (at is None or at >= since):  # no time: counted
                recent[name] = {cause}
        groups = self.cfg.section("policy").get("groups") or {}
        sc = blast_scopes({n: i.partitions for n, i in infos.items()}, groups, fleet=infos)
        sc["fleet"] = sc.get("fleet", frozenset()) | {node}
        allowed, actions = guard([DrainRequest(node, cause, reason)], recent, sc, self.params)
        if allowed:
            return True, f"serve unreachable, by Slurm's view: within the cap ({len(recent)} drained)"
        alert = next((a.reason for a in actions if a.kind == "alert"), "refused")
        return False, f"serve unreachable, by Slurm's view: {alert}"

