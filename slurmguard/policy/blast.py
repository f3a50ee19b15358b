"""The blast-radius guard: never drain more than a few nodes of one scope for one cause.

Scopes: the whole fleet, every Slurm partition and every config-named group
(``[policy.groups] rack1 = "gpu[001-032]"``). The guard counts **per cause** (the check, or
the Xid class for ``gpu-xid``: ``gpu-xid:79``) within each scope and window: at most
``blast_max_nodes`` nodes of the fleet and ``blast_max_percent`` % of a partition or group
(rounded down, but at least one, and at most ``blast_max_nodes``) may be drained for one
cause per ``blast_window``. Unrelated faults never use up each other's allowance: a lost GPU
on one node does not stop an Xid 79 on another.

Floors, for small scopes: every cap is at least 1, so a cause always drains its first node in
every scope (a fault seen on one node is never a shared cause); a refusal, and the ONE fleet
alert per (cause, scope) that names a suspect shared cause, needs at least two nodes with
that cause (the cap's worth already drained plus the one asking).

``recent`` is the ledger's view: node -> the causes slurmguard drained (or permitted a drain
of) it for within the window, built by :func:`ledger` for every caller (the store's events,
Slurm's view, replay's own drains). A node already counted for a cause costs nothing more. A
cause of :data:`ANY_CAUSE` (unknown: the reconciler's marks) counts against every cause.
The scopes come from :func:`scopes`, the one builder every caller uses.

The decision is a pure function of (recent, scopes, params, requests), so it can run inside
one database transaction that serializes it across serve replicas.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmguard.contract import reason_source
from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.types import Action

ANY_CAUSE = "*"  # a recent drain whose cause is unknown: counts against every cause
_XID = re.compile(r"\bXid\s+(\d+)", re.IGNORECASE)
_TOP = re.compile(r"\(([a-z0-9][a-z0-9._-]*)[,)]")


@dataclass(frozen=True)
class DrainRequest:
    node: str
    cause: str  # what a shared fault would share: "fs-mount", "gpu-xid:79", "lemon"
    reason: str  # the full Slurm reason


def cause_key(check: str, reason: str = "") -> str:
    """The guard's cause for a drain of ``check`` with ``reason``: the check name, except
    ``gpu-xid``, which is split by Xid class (an Xid 79 and an Xid 48 on two nodes are two
    unrelated faults, not one shared one), and a lemon's, which is its top failing check."""
    check = check or "unknown"
    if check in ("lemon", "flapping"):
        # "slurmguard: lemon: 3 failures in 1h (gpu-xid, ib-link)": the lemon's top check,
        # as the policy pass names it (a flaky shared filesystem makes many lemons at once).
        m = _TOP.search(reason or "")
        if m:
            return cause_key(m.group(1).strip(), reason)
    if check == "gpu-xid":
        m = _XID.search(reason or "")
        if m:
            return f"gpu-xid:{int(m.group(1))}"
    return check


def scopes(nodes: Mapping[str, Iterable[str]] | Iterable[Any],
           groups: Mapping[str, str] | Iterable[tuple[str, str]] | None = (), *,
           fleet: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """The guard's scopes, built in this one place for every caller (serve, the gate, the
    hooks' fallback, repair, burn-in, the reconciler, policy replay): ``fleet`` (every node
    named in ``nodes`` or ``fleet``), ``partition:P`` from each node's Slurm partitions, and
    ``group:G`` for each ``policy.groups`` pattern (a NodeSet, expanded by slurmguard.nodeset).

    ``nodes``: Slurm's nodes (anything with ``.name`` and ``.partitions``: the adapter's
    NodeInfo, the reconciler's SlurmView) or a mapping node -> its partitions (replay's
    history)."""
    if isinstance(nodes, Mapping):
        partitions = {n: tuple(parts) for n, parts in nodes.items()}
    else:
        partitions = {i.name: tuple(i.partitions) for i in nodes}
    out: dict[str, set[str]] = {"fleet": set(partitions) | set(fleet)}
    for node, parts in partitions.items():
        for part in parts:
            out.setdefault(f"partition:{part}", set()).add(node)
    items = groups.items() if isinstance(groups, Mapping) else (groups or ())
    for name, pattern in items:
        from slurmguard.nodeset import expand

        out[f"group:{name}"] = set(expand(pattern, source=f"policy.groups.{name}"))
    return {k: frozenset(v) for k, v in out.items()}


# What the ledger holds, per entry: a permit or a drain takes the node's slot for its cause;
# a failed drain gives that slot back (the permit was granted, Slurm did not drain).
TAKES = ("permit", "drain", "would_drain")  # a would-drain (observe mode) counts too
GIVES_BACK = "drain_failed"


def ledger(entries: Iterable[tuple[float, str, str, str]], since: float) -> dict[str, set[str]]:
    """The guard's ``recent``, built in this one place: node -> the causes it was drained (or
    permitted a drain) for at or after ``since``. ``entries``: (at, node, kind, cause), any
    order; kind in :data:`TAKES` or :data:`GIVES_BACK`; cause :data:`ANY_CAUSE` where the
    caller cannot know it (counted against every cause). Callers: the store's ledger
    (drainguard.ledger_recent), Slurm's view (the hooks' fallback, via :func:`view_entry`),
    the reconciler's two views, and policy replay's own decisions."""
    out: dict[str, set[str]] = {}
    for at, node, kind, cause in sorted(entries, key=lambda e: e[0]):
        if at < since:
            continue
        causes = out.setdefault(node, set())
        if kind == GIVES_BACK:
            causes.discard(cause)
        elif kind in TAKES:
            causes.add(cause)
    return {n: c for n, c in out.items() if c}


def view_entry(node: str, reason: str, at: float) -> tuple[float, str, str, str]:
    """A ledger entry for a drain seen in Slurm's view: ``reason`` (ours, ``slurmguard:
    <check>: ...``) gives the cause as the permit named it (:func:`cause_key`)."""
    return (at, node, "drain", cause_key(reason_source(reason) or "", reason))


def caps(scopes: Mapping[str, frozenset[str]], p: PolicyParams) -> dict[str, int]:
    """Cap per scope and cause: ``fleet`` -> blast_max_nodes, others -> max(1, floor(P% of
    size)), never above blast_max_nodes."""
    out: dict[str, int] = {}
    for scope, members in scopes.items():
        if scope == "fleet":
            out[scope] = p.blast_max_nodes
        else:
            pct = max(1, math.floor(len(members) * p.blast_max_percent / 100.0 + 1e-9))
            out[scope] = min(p.blast_max_nodes, pct)
    return out


def _ledger(recent: Mapping[str, Iterable[str]] | Iterable[str]) -> dict[str, set[str]]:
    if isinstance(recent, Mapping):
        return {node: set(causes) or {ANY_CAUSE} for node, causes in recent.items()}
    return {node: {ANY_CAUSE} for node in recent}


def _counted(ledger: Mapping[str, set[str]], members: frozenset[str], cause: str) -> set[str]:
    # Walk the ledger (a window's drains), not the scope (a fleet of 10,000).
    return {n for n, causes in ledger.items()
            if n in members and (cause in causes or ANY_CAUSE in causes)}


def guard(requests: Iterable[DrainRequest], recent: Mapping[str, Iterable[str]] | Iterable[str],
          scopes: Mapping[str, frozenset[str]], p: PolicyParams,
          failing: Mapping[str, Iterable[str]] | None = None) -> tuple[list[DrainRequest], list[Action]]:
    """Split drain requests into (allowed, [refuse and alert actions]). Pure and deterministic.

    ``recent``: node -> causes slurmguard drained it for within the blast window (see the
    module doc). ``scopes``: scope name -> member nodes (must include "fleet"). ``failing``:
    cause -> nodes seen failing it now (for the alert's node list; defaults to the requesters).
    """
    cap = caps(scopes, p)
    ledger = _ledger(recent)
    allowed: list[DrainRequest] = []
    refused: dict[tuple[str, str], list[DrainRequest]] = {}
    for req in sorted(requests, key=lambda r: (r.cause, r.node)):
        mine = [s for s, members in scopes.items() if req.node in members or s == "fleet"]
        full = []
        for s in mine:
            counted = _counted(ledger, scopes[s], req.cause)
            # The floor: cap >= 1, so the first node of a cause always fits.
            if req.node not in counted and len(counted) + 1 > cap[s]:
                full.append(s)
        if full:
            refused.setdefault((req.cause, narrowest(full, scopes)), []).append(req)
            continue
        ledger.setdefault(req.node, set()).add(req.cause)
        allowed.append(req)
    return allowed, _refusals(refused, allowed, ledger, scopes, cap, p, failing)


def _refusals(refused: Mapping[tuple[str, str], list[DrainRequest]], allowed: list[DrainRequest],
              ledger: Mapping[str, set[str]], scopes: Mapping[str, frozenset[str]],
              cap: Mapping[str, int], p: PolicyParams,
              failing: Mapping[str, Iterable[str]] | None) -> list[Action]:
    actions: list[Action] = []
    w = human_window(p.blast_window)
    for (cause, scope), reqs in sorted(refused.items()):
        for r in reqs:
            actions.append(Action("refuse", node=r.node, source=cause, reason=r.reason, scope=scope))
        # The nodes of this scope only: a fault seen elsewhere in the fleet is not this
        # scope's (the alert names the scope, and its count is of its members).
        members = scopes.get(scope, frozenset())
        seen = set(failing.get(cause, ())) if failing else set()
        seen |= {r.node for r in reqs} | {a.node for a in allowed if a.cause == cause}
        seen = {n for n in seen if n in members}
        seen |= {n for n, causes in ledger.items() if n in members and cause in causes}
        if len(seen) < 2:
            # Refused only because of earlier drains of unknown cause: say so, and do not
            # call a fault seen on one node shared.
            actions.append(Action(
                "alert", source=cause, scope=scope, nodes=tuple(sorted(seen)),
                reason=(f"blast-radius guard: {scope} reached its cap of {cap[scope]} drains "
                        f"per {w} (causes unknown); {cause} not drained")))
            continue
        actions.append(Action(
            "alert", source=cause, scope=scope, nodes=tuple(sorted(seen)),
            reason=(f"blast-radius guard: {cause} failing on {len(seen)} nodes of {scope} "
                    f"(cap {cap[scope]} drains per {w}); suspect a shared cause behind "
                    f"{cause}; stopped draining for it")))
    return actions


def narrowest(full: list[str], scopes: Mapping[str, frozenset[str]]) -> str:
    # Name the smallest full scope (a rack says more than the whole fleet).
    return min(full, key=lambda s: (len(scopes.get(s, ())) if s != "fleet" else 1 << 30, s))


# The second look (docs/policy.md "Second look"): a node's own drain for a cause that other
# nodes were just drained for waits for the node's next check. Event kind of a held drain
# (not a ledger entry: it takes no slot), and who asks for a node's own drain: its hooks
# (serve's /permit) and the gate. Only a hook's ask is a new look; the gate re-reads a result.
HELD = "drain_held"
LOOKERS = ("permit", "gate")


def second_look(node: str, cause: str, via: str, others: Iterable[str], held_at: float | None,
                now: float, p: PolicyParams) -> str:
    """Why ``node``'s drain for ``cause`` waits, or "" to ask the guard now. Pure.

    ``others``: the nodes drained (or permitted) for ``cause`` in the last
    ``second_look_window`` seconds; ``held_at``: when this node's drain for ``cause`` was first
    held in that window (None: not held). At ``second_look_after`` other nodes or more, the
    node's first ask is held; its hooks' next ask at least ``second_look_delay`` seconds later
    is its second look, and the guard decides it as any drain (the caps, the alert). A fault
    shared by many nodes that clears before their next check (a filer's brief hang, a fabric
    flap) so drains only the first few; a fault on one node, or on nodes far apart in time,
    is never held, and neither is a cause outside ``second_look_checks`` (a node's own
    hardware: an Xid wave drains at once, within the caps)."""
    if p.second_look_after <= 0 or via not in LOOKERS:
        return ""
    if cause.split(":", 1)[0] not in p.second_look_checks:
        return ""  # a node's own hardware: drained at once (the caps still bound it)
    n = len(set(others) - {node})
    if n < p.second_look_after:
        return ""
    if via == "permit" and held_at is not None and now - held_at >= p.second_look_delay:
        return ""
    return (f"held for a second look: {n} other nodes drained for {cause} in the last "
            f"{human_window(p.second_look_window)}; this node drains if its next check, "
            f"{human_window(p.second_look_delay)} or more from its first, fails too")
