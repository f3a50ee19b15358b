"""A fleet with planted truth for the repair decision core (slurmguard/repair/plan.py).

Thousands of nodes over weeks; each node fault is planted with what cures it, so every
decision the plan makes can be scored:

* ``reboot``: a transient fault a reboot clears (Xid 79, a lost GPU);
* ``power``: one that survives a reboot but not a power cycle;
* ``permanent``: nothing the ladder does clears it (bad hardware): it must end in a ticket;
* ``flap``: cleared by a reboot, back 2-30 h after each return (a bad node that looks fixed);
* shared-cause outages: a switch takes ``ib-link`` down on a whole slice of a partition for
  hours, with the blast-radius guard's fleet alert open; people fix it and return the nodes.

Jobs: a third of the drained nodes still run a job, which ends within 12 h. The world
answers each rung: a reboot or power cycle brings the node back with a new boot id 4-10
minutes later, and its next health check passes when the rung cured the fault; a quick
burn-in (``repair.verify_burnin``) then takes 5-15 minutes (queue, run, verdict) and passes
when the rung cured it (the flapping node's fault is not back yet, so it passes too).

``simulate`` returns the ledger and the figures; tests/test_repair_planted.py asserts them.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from slurmguard.policy.repair_params import REBOOTS, RepairParams
from slurmguard.repair.plan import Action, Fleet, NodeIn, RepairEvent, plan, repairs_in_window

CURES = {"reboot": {"reboot", "power-cycle"}, "power": {"power-cycle"}, "permanent": set(),
         "flap": {"reboot", "power-cycle"}, "outage": set()}
CAUSES = {"reboot": "gpu-xid:79", "power": "gpu-lost", "permanent": "gpu-xid:79",
          "flap": "gpu-xid:79", "outage": "ib-link"}


@dataclass
class Fault:
    node: str
    kind: str
    at: float
    episode: int = 0
    job_until: float = 0.0
    cured: bool = False
    boot_at: float | None = None  # the node comes back from its rung at
    health_at: float | None = None  # its next health check runs at
    returned: list[float] = field(default_factory=list)
    outage_end: float | None = None
    burnin_at: float | None = None  # its quick burn-in's verdict arrives at


@dataclass
class Figures:
    returns: int = 0
    good_returns: int = 0  # the node stayed healthy 7 days after (by its planted truth)
    tickets: int = 0
    tickets_of_curable: int = 0  # a ticket where the ladder had a cure
    curable: int = 0  # reboot/power faults planted
    curable_returned: int = 0
    max_attempts: int = 0
    max_in_repair: int = 0
    max_reboots_hour: int = 0
    max_returns_flapper: int = 0  # returns of one flapping node in lemon_window
    permanent_returned: int = 0
    rungs_on_busy: int = 0
    rungs_on_shared: int = 0
    drain_to_return: list[float] = field(default_factory=list)


class World:
    def __init__(self, nodes: int, days: int, seed: int, params: RepairParams) -> None:
        self.rng = random.Random(seed)
        self.names = [f"g{i:05d}" for i in range(nodes)]
        self.part = {n: f"partition:p{i * 4 // nodes}" for i, n in enumerate(self.names)}
        self.sizes = {"fleet": nodes, **{f"partition:p{k}": nodes // 4 for k in range(4)}}
        self.params, self.end = params, days * 86400.0
        self.events: dict[str, list[RepairEvent]] = {}
        self.active: dict[str, Fault] = {}  # drained nodes, by name
        self.pending: list[Fault] = self._plant(nodes, days)
        self.alerts: set[str] = set()
        self.reboots: deque[float] = deque()
        self.fig = Figures()
        self._episode = 0
        self.lemons: set[str] = set()

    def _plant(self, nodes: int, days: int) -> list[Fault]:
        rng, out = self.rng, []
        for _ in range(int(nodes * days * 0.005)):  # 5 faults per 1,000 node-days
            kind = rng.choices(["reboot", "power", "permanent", "flap"], [65, 10, 15, 10])[0]
            out.append(Fault(rng.choice(self.names), kind, rng.uniform(0, self.end - 7 * 86400)))
        for k in range(2):  # two switch outages: 80 nodes of a partition each, 4 h
            at = rng.uniform(86400, self.end - 7 * 86400)
            part = self.names[k * len(self.names) // 4: k * len(self.names) // 4 + 80]
            out += [Fault(n, "outage", at, outage_end=at + 4 * 3600) for n in part]
        return sorted(out, key=lambda f: f.at)

    def log(self, node: str, kind: str, at: float, **details: object) -> None:
        self.events.setdefault(node, []).append(RepairEvent(at, kind, details, admin=kind in (
            "lemon_cleared", "clear")))

    # -- the world's side
    def arrive(self, now: float) -> None:
        while self.pending and self.pending[0].at <= now:
            f = self.pending.pop(0)
            if f.node in self.active or (f.node in self.lemons and f.kind != "outage"):
                continue  # already out: the same node, one incident
            self._episode += 1
            f.episode = self._episode
            if self.rng.random() < 0.3:
                f.job_until = now + self.rng.uniform(0, 12 * 3600)
            self.active[f.node] = f
            if f.kind in ("reboot", "power") and not f.returned:
                self.fig.curable += 1

    def react(self, now: float) -> None:
        for name, f in list(self.active.items()):
            if f.kind == "outage":
                if now >= f.outage_end:
                    self.alerts.discard("ib-link")
                    if now >= f.outage_end + 3600:  # people fixed the switch, returned them
                        self.log(name, "clear", now)
                        del self.active[name]
                else:
                    self.alerts.add("ib-link")
            if f.node in self.lemons and f.kind != "outage" and now >= f.at + 3 * 86400:
                self.lemons.discard(name)  # people replaced the part and returned it
                self.log(name, "lemon_cleared", now)
                del self.active[name]

    def node_in(self, f: Fault, now: float) -> NodeIn:
        back = f.boot_at is not None and now >= f.boot_at
        health = f.health_at is not None and now >= f.health_at
        return NodeIn(f.node, CAUSES[f.kind], f.episode, jobs=int(now < f.job_until),
                      lemon=f.node in self.lemons, boot_id=f"b{f.boot_at}" if back else "b0",
                      registered=back or f.boot_at is None,
                      healthy_since=f.health_at if health and f.cured else None,
                      failing_since=f.health_at if health and not f.cured else None,
                      burnin=_burnin(f, now),
                      mode="act", scopes=("fleet", self.part[f.node]))


def _burnin(f: Fault, now: float) -> str:
    if f.burnin_at is None:
        return ""
    return "pending" if now < f.burnin_at else ("pass" if f.cured else "failed")


def simulate(nodes: int = 2000, days: int = 28, seed: int = 1, step: float = 300.0,
             params: RepairParams | None = None) -> tuple[World, Figures]:
    from slurmguard import config

    params = params or RepairParams.from_section(config.defaults()["repair"])
    w = World(nodes, days, seed, params)
    now = 0.0
    while now < w.end:
        w.arrive(now)
        w.react(now)
        while w.reboots and w.reboots[0] < now - 3600:
            w.reboots.popleft()
        drained = [w.node_in(f, now) for f in w.active.values()]
        fleet = Fleet(w.sizes, frozenset(w.alerts), len(w.reboots),
                      available=frozenset({"reboot", "power-cycle", "ticket"}))
        for a in plan(drained, w.events, fleet, params, now):
            _carry_out(w, a, now)
        _measure(w, drained, now)
        now += step
    return w, w.fig


def _carry_out(w: World, a: Action, now: float) -> None:
    f = w.active.get(a.node)
    if f is None or a.kind in ("hold", "observe"):
        return
    ep = {"episode": a.episode}
    if a.kind == "rung":
        assert a.rung is not None
        if f.job_until > now:
            w.fig.rungs_on_busy += 1
        if f.kind == "outage" and "ib-link" in w.alerts:
            w.fig.rungs_on_shared += 1
        if a.first:
            w.log(a.node, "repair_start", now, **ep)
        w.log(a.node, "repair_rung", now, rung=a.rung.name, boot_before="b0", **ep)
        w.reboots.append(now) if a.rung.name in REBOOTS else None
        f.cured = f.cured or a.rung.name in CURES[f.kind]
        f.boot_at = now + w.rng.uniform(240, 600)
        f.health_at = f.boot_at + 300
    elif a.kind == "burnin":
        w.log(a.node, "repair_burnin", now, **ep)
        f.burnin_at = now + w.rng.uniform(300, 900)
    elif a.kind == "outcome":
        w.log(a.node, "repair_outcome", now, result=a.result, rung=str(a.rung), **ep)
        f.boot_at = None
    elif a.kind == "return":
        _returned(w, f, now)
    elif a.kind == "ticket":
        w.log(a.node, "repair_ticket", now, **ep)
        w.lemons.add(a.node)
        w.fig.tickets += 1
        w.fig.tickets_of_curable += f.kind in ("reboot", "power")
        f.at = now  # people take 3 days from here


def _returned(w: World, f: Fault, now: float) -> None:
    w.log(f.node, "repair_return", now, episode=f.episode)
    fig = w.fig
    fig.returns += 1
    fig.drain_to_return.append(now - f.at)
    del w.active[f.node]
    if f.kind == "flap":  # back within 2-30 h: a bad return
        prior = repairs_in_window(w.events[f.node], now, w.params.lemon_window)
        fig.max_returns_flapper = max(fig.max_returns_flapper, prior)
        w.pending.append(Fault(f.node, "flap", now + w.rng.uniform(2, 30) * 3600,
                               returned=[now]))
        w.pending.sort(key=lambda x: x.at)
    else:
        fig.permanent_returned += f.kind == "permanent"
        fig.good_returns += f.kind != "permanent"
        fig.curable_returned += f.kind in ("reboot", "power")


def _measure(w: World, drained: list[NodeIn], now: float) -> None:
    fig = w.fig
    busy = 0
    for n in drained:
        evs = [e for e in w.events.get(n.name, ()) if e.details.get("episode") == n.episode]
        started = any(e.kind == "repair_start" for e in evs)
        done = any(e.kind in ("repair_return", "repair_ticket") for e in evs)
        busy += started and not done
        rungs = sum(1 for e in evs if e.kind == "repair_rung")
        fig.max_attempts = max(fig.max_attempts, rungs)
    fig.max_in_repair = max(fig.max_in_repair, busy)
    fig.max_reboots_hour = max(fig.max_reboots_hour, len(w.reboots))
