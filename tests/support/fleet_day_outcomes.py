"""What the fleet day's faults became (pure): incidents, repairs, and what slurmguard
predicted, each fault's.

Inputs are what the day recorded (support/fleet_day.py): every node fault as ``Injected``
(when it came and went, and whether a reboot took it away), the repair episodes of serve's
ledger as the product's one reader makes them (slurmguard/repair/ledger.py; their drains as
``(at, node, "drain")`` for the lead times), the BMC's reboots as ``(node, at)``, and the
predictions as ``(source, node, at)``. Times are seconds since the epoch; the figures are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from support.fleet_day_plan import KINDS, Fault, reboot_clears

# A hook stamps its drain in serve's ledger when its check started: under this host's load
# one node's check takes seconds, and a fault injected while it ran is drained with a stamp
# before the injection (seen: ECC injected at 8.3 s, its drain stamped 7.2 s, with four arms
# at load 20). A drain of the node this much before the fault is the fault's.
STAMP_SLACK_S = 5.0


@dataclass(frozen=True)
class Injected:
    kind: str
    node: str
    on: float                # when injected
    off: float | None        # when it went away (by itself or by a reboot); None: still on
    by_reboot: bool = False  # a reboot took it away
    flap: bool = False       # the flapping node's (its episodes follow the fleet policy)

    @property
    def name(self) -> str:
        return f"{self.kind}@{self.node}"


def _drain(f: Injected, events: list[tuple[float, str, str]]) -> float | None:
    return next((at for at, n, k in events
                 if n == f.node and k == "drain" and at >= f.on - STAMP_SLACK_S), None)


def _episode(f: Injected, repairs: list[Any]) -> Any:
    """The repair episode (slurmguard/repair/ledger.py) of the drain that followed ``f``."""
    return next((r for r in sorted(repairs, key=lambda r: r.first_at)
                 if r.node == f.node and r.drained_at is not None
                 and r.drained_at >= f.on - STAMP_SLACK_S), None)


def repair_figures(faults: list[Injected], repairs: list[Any],
                   reboots: list[tuple[str, float]]) -> dict[str, Any]:
    """Each node fault's repair, read from the repair episodes the product's one reader of the
    ledger makes (slurmguard/repair/ledger.py): returned, ticketed, back by itself (drained,
    then returned with no repair: the fault went away and the health check UNDRAINed), or
    open; the BMC's reboots between its drain and that end (what the world saw); drain to
    return by cause. ``returned_with_fault``: a return while a fault was still on its node
    (never allowed); ``rebooted_twice``: a fault whose node was rebooted more than once for
    it."""
    rows, to_return = [], {}
    for f in sorted(faults, key=lambda f: f.on):
        r = _episode(f, repairs)
        d = r.drained_at if r is not None else None
        end = r.ended_at if r is not None and r.outcome in ("returned", "ticketed") else None
        stop = end if end is not None else float("inf")
        boots = sum(1 for n, at in reboots if n == f.node and d is not None and d <= at <= stop)
        if r is None:
            outcome = "not drained"
        elif end is not None:
            outcome = r.outcome
        elif f.off is not None and not f.by_reboot:
            outcome = "back by itself"
        else:
            outcome = "open"
        if outcome == "returned" and end is not None and d is not None:
            to_return.setdefault(KINDS[f.kind][1], []).append(round(end - d, 1))
        rows.append({"fault": f.name, "cause": KINDS[f.kind][1], "reboot_clears": reboot_clears(f.kind),
                     "flap": f.flap, "outcome": outcome, "reboots": boots,
                     "drain_to_end_s": round(end - d, 1) if end is not None and d is not None
                     else None})
    returned_with_fault = sorted(
        f"{r.node}@{r.ended_at:.1f}" for r in repairs if r.outcome == "returned"
        and any(f.node == r.node and f.on <= r.ended_at and (f.off is None or f.off > r.ended_at)
                for f in faults))
    return {
        "in_loop": True,
        "by_fault": rows,
        "returned": sorted(r["fault"] for r in rows if r["outcome"] == "returned"),
        "ticketed": sorted(r["fault"] for r in rows if r["outcome"] == "ticketed"),
        "open": sorted(r["fault"] for r in rows if r["outcome"] == "open"),
        "reboots": len(reboots),
        "rebooted_twice": sorted(r["fault"] for r in rows if r["reboots"] > 1),
        "returned_with_fault": returned_with_fault,
        "drain_to_return_s_by_cause": dict(sorted(to_return.items())),
    }


def lead_times(faults: list[Injected], events: list[tuple[float, str, str]],
               predictions: list[tuple[str, str, float]]) -> dict[str, Any]:
    """For every node fault: the earliest prediction that named its node after the node's
    previous drain and before this fault's drain, and the seconds by which it came first.
    Per source: predictions made (one per node and source: the first), those a fault's drain
    followed (came true), those on a node that never faulted (false), the rest (not borne
    out: the node's faults all came before)."""
    events = sorted(events)
    rows, true_ = [], set()
    prev: dict[str, float] = {}
    for f in sorted(faults, key=lambda f: f.on):
        d = _drain(f, events)
        lo = prev.get(f.node, float("-inf"))
        hit = sorted((at, src) for src, n, at in predictions
                     if n == f.node and lo < at and (d is None or at < d))
        if d is not None:
            prev[f.node] = d
        if hit and d is not None:
            true_.update((src, f.node) for at, src in hit)
        rows.append({"fault": f.name, "predicted_by": hit[0][1] if hit and d is not None else None,
                     "lead_s": round(d - hit[0][0], 1) if hit and d is not None else None})
    faulted = {f.node for f in faults}
    made = sorted({(src, n) for src, n, _ in predictions})
    by_source: dict[str, dict[str, int]] = {}
    for src, n in made:
        s = by_source.setdefault(src, {"made": 0, "came_true": 0, "false": 0, "not_borne_out": 0})
        s["made"] += 1
        key = "came_true" if (src, n) in true_ else "false" if n not in faulted else "not_borne_out"
        s[key] += 1
    return {"by_fault": rows, "by_source": by_source,
            "false_nodes": sorted({n for _, n in made if n not in faulted}),
            "predicted": sum(1 for r in rows if r["predicted_by"])}


def incident_truth(faults: list[Fault], found: list[dict[str, Any]]) -> dict[str, Any]:
    """Each injected fault matched to exactly one incident (its node and cause; the shared one
    to one shared incident of its cause), and the incidents no fault explains."""
    left = list(found)
    matched, missing = [], []
    for f in sorted(faults, key=lambda f: f.at):
        if f.node:
            hit = [i for i in left if i["nodes"] == [f.node] and i["cause"].startswith(f.cause)]
        else:
            hit = [i for i in left if str(i["id"]).startswith(f"shared-{f.cause}")]
        if hit:
            hit.sort(key=lambda i: i["drained_at"] or 0)
            left.remove(hit[0])
            matched.append({"fault": f"{f.kind}@{f.node or 'all'}", "incident": hit[0]["id"],
                            "cause": hit[0]["cause"]})
        else:
            missing.append(f"{f.kind}@{f.node or 'all'}")
    return {"matched": matched, "missing": missing,
            "unexplained": [{"id": i["id"], "cause": i["cause"], "nodes": i["nodes"]} for i in left]}
