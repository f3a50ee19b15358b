"""Policy replay: run the recorded history through the policy code with a config, and score
the flags against what happened next. Pure: reads a :class:`History`, writes nothing.

- **lemon** (:func:`slurmguard.policy.lemon.lemon_verdict`, the thresholds of ``[policy]``):
  each node is judged after each failing run (and the run after it, for flapping) with the
  runs of the policy window, as serve's pass would have. ``count="runs"`` gives it the runs
  as recorded (what the rule counts today); ``count="episodes"`` gives it one failing run per
  episode (the counting rule of docs/fleet.md). A flagged node stays a lemon to the end.
- **risk** (:func:`slurmguard.fleet.risk.score`, ``[risk]``): every node is scored once a day;
  a score at or above ``risk.level`` flags it for that day.
- **blast radius** (:func:`slurmguard.policy.blast.guard`): every drain slurmguard made or was
  refused, in time order, through the guard with ``policy.blast_*`` and ``policy.groups``.
- **probation**: each recorded return ends probation after ``policy.probation_jobs`` passing
  jobs (epilogs) of the node.
- **repair**, in observe form (:func:`slurmguard.policy.repair_params` ladders and limits, the rules of
  :mod:`slurmguard.repair.plan`): each of slurmguard's drain episodes, in time order, is what
  the repair pass would have met: no ladder, a shared cause (never repaired node by node), a
  lemon (repaired ``lemon_repairs`` times in ``lemon_window``: no more repairs), held by
  ``reboots_per_hour``, or the first rung it would take. A would-be repair whose node failed
  again within the horizon of its recorded return is counted as "came back" (what a return
  by repair would have risked). How long a repair takes is not in the history, so
  ``max_nodes``/``max_percent`` are not replayed.

Against what happened next, with the one scorer (:mod:`slurmguard.fleet.scoring`): an alarm
(consecutive flagged days of one node) is true when the node's next failure starts within
the horizon after it, false when none does, and counts for nothing when raised while the
node was inside a failure or when its horizon runs past the history; recall = failures in
the window (shared ones left out) that a true alarm came before; lead per true alarm.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from typing import Any

from slurmguard.fleet import episodes as episodes_mod
from slurmguard.fleet import scoring
from slurmguard.fleet.episodes import Episode
from slurmguard.fleet.history import History
from slurmguard.fleet.params import RiskParams
from slurmguard.fleet.risk import DAY
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.repair_params import DEFAULT_LADDERS, RepairParams
from slurmguard.policy.shared import covering, from_alert
from slurmguard.policy.types import HEALTHY, UNHEALTHY, NodeView, Sample

_CHANGED_SHOWN = 20  # decisions listed in blast.changed (the counts are complete)


def _starts(eps: Sequence[Episode]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for e in eps:
        if e.shared is None:
            out.setdefault(e.node, []).append(e.start)
    return {n: sorted(v) for n, v in out.items()}


def _hit(starts: Sequence[float], t: float, horizon: float) -> bool:
    i = bisect_right(starts, t)
    return i < len(starts) and starts[i] <= t + horizon


def _samples(h: History, node: str, eps: Sequence[Episode], count: str) -> list[Sample]:
    runs = [r for r in h.runs.get(node, ()) if r.health != "error"]
    if count == "episodes":  # one failing run per episode: its first
        starts = {e.start for e in eps if e.node == node}
        keep = []
        spans = [(e.start, e.out_until(h.until)) for e in eps if e.node == node]
        for r in runs:
            inside = any(a <= r.at <= b for a, b in spans)
            if r.health != UNHEALTHY or not inside or r.at in starts:
                keep.append(r)
        runs = keep
    out = [Sample(r.at, r.health, r.checks, r.hook, r.job_id) for r in runs]
    out += [Sample(t, HEALTHY) for t in h.healthy.get(node, ())]
    out.sort(key=lambda s: s.at)
    return out


def lemons(h: History, eps: Sequence[Episode], p: PolicyParams, *,
           count: str = "runs") -> dict[str, tuple[float, str]]:
    """node -> (when, reason) of the first lemon (or flapping) verdict in the window."""
    from slurmguard.policy.blast import scopes as blast_scopes
    from slurmguard.policy.lemon import lemon_verdict

    by_node: dict[str, list[Episode]] = {}
    for e in eps:
        by_node.setdefault(e.node, []).append(e)
    foreign: dict[str, list[float]] = {}
    for node, evs in h.events.items():
        foreign[node] = [e.at for e in evs if e.kind == "drain" and e.actor_kind != "slurmguard"]
    # Shared faults (policy/shared.py), as serve's pass knew them at t: the alerts opened by
    # then that name a suspect shared cause (two nodes) and cover the node (its partitions
    # when the caller gave Slurm's, its groups, the fleet's, or naming it).
    faults = [(a.opened, from_alert(a.cause, a.scope, a.opened, a.updated, a.closed,
                                    p.blast_window, a.nodes))
              for a in h.alerts if len(a.nodes) >= 2]
    held = blast_scopes(h.partitions, p.groups) if faults else {}
    out: dict[str, tuple[float, str]] = {}
    # Only a node with a failing run or a foreign drain can become a lemon.
    for node in sorted({n for n, rs in h.runs.items() if any(r.health == UNHEALTHY for r in rs)}
                       | {n for n, f in foreign.items() if f}):
        samples = _samples(h, node, by_node.get(node, ()), count)
        times = [s.at for s in samples]
        fd = foreign.get(node, [])
        moments = sorted({s.at for s in samples if s.health == UNHEALTHY} | set(fd))
        follow = {times[i + 1] for i in range(len(samples) - 1) if samples[i].health == UNHEALTHY}
        mine = [(opened, f) for opened, f in faults if covering(node, [f], held)]
        for t in sorted(set(moments) | follow):
            if not h.since <= t <= h.until:
                continue
            lo = bisect_left(times, t - p.window)
            view = NodeView(node, samples=tuple(samples[lo:bisect_right(times, t)]),
                            foreign_drains=tuple(x for x in fd if t - p.window <= x <= t),
                            shared=covering(node, [f for opened, f in mine if opened <= t], held))
            v = lemon_verdict(view, t, p)
            if v is not None:
                out[node] = (t, v.reason)
                break
    return out


def risk_flags(h: History, eps: Sequence[Episode], rp: RiskParams) -> dict[str, list[tuple[float, float]]]:
    """node -> alarms [(first flagged day, last flagged day)], scored once a day."""
    from slurmguard.fleet.curve import daily_scores, flags_at

    days, scores = daily_scores(h, eps, rp)
    return flags_at(days, scores, rp.level)


def blast_decisions(h: History, p: PolicyParams) -> tuple[list[tuple[float, str, str, str, bool]],
                                                          list[tuple[float, str, str]]]:
    """Every drain slurmguard made or was refused in the window, in time order, through the
    guard with ``p``: decisions (at, node, cause, recorded kind, allowed now) and the alerts
    (at, cause, scope) of the refusals. The guard decides here as it does live
    (slurmguard/drainguard.py): the one scope builder over the history's partitions (Slurm's,
    handed in by the caller), ``policy.groups`` and the known nodes; the one ledger builder
    over this replay's own earlier drains, per cause."""
    from slurmguard.policy.blast import DrainRequest, guard, ledger, scopes

    sc = scopes(h.partitions, p.groups, fleet=h.first_seen)
    attempts = sorted((e.at, node, e.kind, e.source or "unknown") for node, evs in h.events.items()
                      for e in evs if e.actor_kind == "slurmguard"
                      and e.kind in ("drain", "drain_refused") and h.since <= e.at <= h.until)
    taken: deque[tuple[float, str, str, str]] = deque()  # the replay's ledger: its own drains
    decisions, alerts = [], []
    for at, node, kind, cause in attempts:
        while taken and taken[0][0] < at - p.blast_window:
            taken.popleft()
        here = sc if node in sc["fleet"] else {**sc, "fleet": sc["fleet"] | {node}}
        ok, actions = guard([DrainRequest(node, cause, "")], ledger(taken, at - p.blast_window),
                            here, p)
        if ok:
            taken.append((at, node, "drain", cause))
        decisions.append((at, node, cause, kind, bool(ok)))
        alerts += [(at, a.source, a.scope) for a in actions if a.kind == "alert"]
    return decisions, alerts


def blast(h: History, p: PolicyParams) -> dict[str, Any]:
    """The recorded drain attempts of slurmguard through the guard with ``p``
    (:func:`blast_decisions`), counted; ``changed``: the first decisions that differ from the
    recorded ones. An alert is counted once per (cause, scope) and window, as the store
    merges them."""
    decisions, refusal_alerts = blast_decisions(h, p)
    alerts = 0
    last_alert: dict[tuple[str, str], float] = {}
    for at, cause, scope in refusal_alerts:
        alerts += at - last_alert.get((cause, scope), float("-inf")) > p.blast_window
        last_alert[(cause, scope)] = at
    changed = [{"at": at, "node": n, "cause": c, "recorded": k,
                "replayed": "drain" if ok else "drain_refused"}
               for at, n, c, k, ok in decisions if (k == "drain") != ok]
    return {"attempts": len(decisions),
            "recorded_drains": sum(1 for d in decisions if d[3] == "drain"),
            "recorded_refusals": sum(1 for d in decisions if d[3] == "drain_refused"),
            "drains": sum(1 for d in decisions if d[4]),
            "refusals": sum(1 for d in decisions if not d[4]), "alerts": alerts,
            "newly_refused": sum(1 for d in decisions if d[3] == "drain" and not d[4]),
            "newly_allowed": sum(1 for d in decisions if d[3] == "drain_refused" and d[4]),
            "partitions": bool(h.partitions), "changed": changed[:_CHANGED_SHOWN]}


def probation(h: History, p: PolicyParams) -> dict[str, Any]:
    """Probation periods from each recorded return, ending after ``probation_jobs`` passes."""
    hours, open_ = [], 0
    for node, evs in h.events.items():
        passes = h.passes.get(node, [])
        for e in evs:
            if e.kind != "probation_start" or not h.since <= e.at <= h.until:
                continue
            i = bisect_right(passes, e.at) + p.probation_jobs - 1
            if p.probation_jobs == 0:
                hours.append(0.0)
            elif i < len(passes) and passes[i] <= h.until:
                hours.append((passes[i] - e.at) / 3600.0)
            else:
                open_ += 1
    hours.sort()
    return {"returns": len(hours) + open_, "ended": len(hours), "still_on": open_,
            "median_h": round(hours[len(hours) // 2], 2) if hours else None}


def repair_observe(eps: Sequence[Episode], rp: RepairParams, available: frozenset[str],
                   since: float, until: float, horizon: float) -> dict[str, Any]:
    """What the repair pass would have done with slurmguard's drain episodes (observe form)."""
    from slurmguard.policy.repair_params import REBOOTS

    ours = sorted((e for e in eps if e.drained_by == "slurmguard" and since <= e.drained_at <= until),
                  key=lambda e: e.drained_at)
    starts = _starts(eps)
    repaired: dict[str, list[float]] = {}  # node -> would-be repair starts
    reboots: deque[float] = deque()
    no_ladder: dict[str, int] = {}
    first: dict[str, int] = {}
    shared = lemon_stopped = held = at_once_ticket = by_admin = came_back = returned = 0
    lemon_nodes: set[str] = set()
    out_h = 0.0
    for e in ours:
        ladder = [r for r in rp.ladder(e.cause) if r.name in available]
        if e.shared is not None:
            shared += 1
            continue
        if not ladder:
            no_ladder[e.cause] = no_ladder.get(e.cause, 0) + 1
            continue
        before = [t for t in repaired.get(e.node, []) if t >= e.drained_at - rp.lemon_window]
        if len(before) >= rp.lemon_repairs:
            lemon_stopped += 1
            lemon_nodes.add(e.node)
            continue
        rung = ladder[0]
        if rung.name == "ticket":
            at_once_ticket += 1
            continue
        if rung.name in REBOOTS:
            while reboots and reboots[0] <= e.drained_at - 3600.0:
                reboots.popleft()
            if len(reboots) >= rp.reboots_per_hour:
                held += 1  # it would wait for the hour's budget, then be taken
            reboots.append(e.drained_at)
        first[str(rung)] = first.get(str(rung), 0) + 1
        repaired.setdefault(e.node, []).append(e.drained_at)
        out_h += (e.out_until(until) - e.drained_at) / 3600.0
        if e.returned_at is not None:
            returned += 1
            by_admin += e.returned_by == "admin"
            came_back += _hit(starts.get(e.node, []), e.returned_at, horizon)
    taken = sum(first.values())
    return {"mode": "observe", "episodes": len(ours), "would_repair": taken,
            "first_rungs": dict(sorted(first.items())), "held_by_reboot_limit": held,
            "ticket_at_once": at_once_ticket, "shared": shared,
            "no_ladder": dict(sorted(no_ladder.items())), "lemon_stopped": lemon_stopped,
            "lemon_nodes": sorted(lemon_nodes), "returned_by_admin": by_admin,
            "node_hours_out": round(out_h, 1), "returned": returned, "came_back": came_back,
            "came_back_rate": round(came_back / returned, 3) if returned else None}


def _in_service_h(eps: Sequence[Episode], node: str, t: float, until: float) -> float:
    out = sum(max(0.0, min(e.out_until(until), until) - max(e.drained_at, t))
              for e in eps if e.node == node)
    return max(0.0, until - t - out) / 3600.0


def replay(h: History, p: PolicyParams, rp: RiskParams, *, count: str = "runs",
           eps: Sequence[Episode] | None = None, repair: RepairParams | None = None,
           available: frozenset[str] = frozenset({"reboot", "ticket"})) -> dict[str, Any]:
    """Everything the config would have done over the history, and how good its flags were."""
    eps = list(eps) if eps is not None else episodes_mod.build(h, blast_window=p.blast_window)
    horizon = rp.horizon_days * DAY
    lem = lemons(h, eps, p, count=count)
    by_node: dict[str, list[Episode]] = {}
    for e in eps:
        by_node.setdefault(e.node, []).append(e)
    lemon_spans = {n: [(t, h.until)] for n, (t, _) in lem.items()}
    fails = scoring.failures_of(eps, h.until)
    lemon_score = scoring.score({n: [(t, t)] for n, (t, _) in lem.items()}, fails, h.since,
                                h.until, horizon, while_out="next")
    lemon_score["caught_while_lemon"] = scoring.score(lemon_spans, fails, h.since, h.until, 0.0,
                                                      while_out="next")["caught"]
    recorded = sorted(n for n, evs in h.events.items()
                      if any(e.kind == "lemon" and h.since <= e.at <= h.until for e in evs))
    rflags = risk_flags(h, eps, rp)
    return {
        "since": h.since, "until": h.until, "count": count, "horizon_days": rp.horizon_days,
        "lemon": {"flagged": len(lem), "recorded": len(recorded),
                  "new": sorted(set(lem) - set(recorded)), "dropped": sorted(set(recorded) - set(lem)),
                  "node_hours_kept_out": round(sum(_in_service_h(by_node.get(n, []), n, t, h.until)
                                                   for n, (t, _) in lem.items()), 1),
                  **lemon_score, "nodes": {n: r for n, (_, r) in sorted(lem.items())}},
        "risk": {"level": rp.level, "nodes_flagged": len(rflags),
                 **scoring.score(rflags, fails, h.since, h.until, horizon),
                 "nodes": sorted(rflags)},
        "blast": blast(h, p),
        "probation": probation(h, p),
        "repair": repair_observe(eps, repair or RepairParams.from_section(
                                     {"ladders": dict(DEFAULT_LADDERS)}), available,
                                 h.since, h.until, horizon),
    }
