"""The blast-radius guard: never drain more than a few nodes of one scope per window.

Scopes: the whole fleet (at most ``blast_max_nodes`` nodes, default 50), every Slurm
partition and every config-named group (``[policy.groups] rack1 = "gpu[001-032]"``): at most
``blast_max_percent`` (default 10 %) of its nodes, rounded down but at least one. A drain is
allowed only if it fits every scope the node belongs to; nodes already drained by slurmguard
within ``blast_window`` count against the cap (and a node already counted costs nothing more).
When a drain does not fit, draining for that cause stops and ONE fleet alert per (cause,
scope) names the suspect shared cause: many nodes failing the same check at once (one
filesystem, one switch) is more likely a shared fault than many broken nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.types import Action


@dataclass(frozen=True)
class DrainRequest:
    node: str
    cause: str  # the check (or policy) that wants the drain: "fs-mount", "lemon"
    reason: str  # the full Slurm reason


def scopes(partitions: Mapping[str, Iterable[str]],
           groups: Mapping[str, str] | Iterable[tuple[str, str]] = (), *,
           fleet: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """The guard's scopes: ``fleet`` (every node named in ``partitions`` or ``fleet``),
    ``partition:P`` from each node's Slurm partitions (``partitions``: node -> its
    partitions), and ``group:G`` for each ``policy.groups`` pattern (a NodeSet, expanded by
    slurmguard.nodeset). The one definition serve, the reconciler and burn-in use."""
    out: dict[str, set[str]] = {"fleet": set(partitions) | set(fleet)}
    for node, parts in partitions.items():
        for part in parts:
            out.setdefault(f"partition:{part}", set()).add(node)
    items = groups.items() if isinstance(groups, Mapping) else groups
    for name, pattern in items:
        from slurmguard.nodeset import expand

        out[f"group:{name}"] = set(expand(pattern, source=f"policy.groups.{name}"))
    return {k: frozenset(v) for k, v in out.items()}


def caps(scopes: Mapping[str, frozenset[str]], p: PolicyParams) -> dict[str, int]:
    """Cap per scope: ``fleet`` -> blast_max_nodes, others -> max(1, floor(P% of size))."""
    out: dict[str, int] = {}
    for scope, members in scopes.items():
        if scope == "fleet":
            out[scope] = p.blast_max_nodes
        else:
            pct = max(1, math.floor(len(members) * p.blast_max_percent / 100.0 + 1e-9))
            out[scope] = min(p.blast_max_nodes, pct)
    return out


def guard(requests: Iterable[DrainRequest], recent: Iterable[str],
          scopes: Mapping[str, frozenset[str]], p: PolicyParams,
          failing: Mapping[str, Iterable[str]] | None = None) -> tuple[list[DrainRequest], list[Action]]:
    """Split drain requests into (allowed, [refuse and alert actions]). Pure and deterministic.

    ``recent``: nodes slurmguard drained within the blast window. ``scopes``: scope name ->
    member nodes (must include "fleet"). ``failing``: cause -> nodes seen failing it now (for
    the alert's node list; defaults to the requesters).
    """
    cap = caps(scopes, p)
    counted = {scope: set(members) & set(recent) for scope, members in scopes.items()}
    allowed: list[DrainRequest] = []
    refused: dict[tuple[str, str], list[DrainRequest]] = {}
    for req in sorted(requests, key=lambda r: (r.cause, r.node)):
        mine = [s for s, members in scopes.items() if req.node in members or s == "fleet"]
        full = [s for s in mine if req.node not in counted[s] and len(counted[s]) + 1 > cap[s]]
        if full:
            refused.setdefault((req.cause, _narrowest(full, scopes)), []).append(req)
            continue
        for s in mine:
            counted[s].add(req.node)
        allowed.append(req)
    actions: list[Action] = []
    w = human_window(p.blast_window)
    for (cause, scope), reqs in sorted(refused.items()):
        for r in reqs:
            actions.append(Action("refuse", node=r.node, source=cause, reason=r.reason, scope=scope))
        seen = set(failing.get(cause, ())) if failing else set()
        seen |= {r.node for r in reqs} | {a.node for a in allowed if a.cause == cause}
        actions.append(Action(
            "alert", source=cause, scope=scope, nodes=tuple(sorted(seen)),
            reason=(f"blast-radius guard: {cause} failing on {len(seen)} nodes of {scope} "
                    f"(cap {cap[scope]} drains per {w}); suspect a shared cause behind "
                    f"{cause}; stopped draining for it")))
    return allowed, actions


def _narrowest(full: list[str], scopes: Mapping[str, frozenset[str]]) -> str:
    # Name the smallest full scope (a rack says more than the whole fleet).
    return min(full, key=lambda s: (len(scopes.get(s, ())) if s != "fleet" else 1 << 30, s))
