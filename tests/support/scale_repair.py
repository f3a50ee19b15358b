"""Repair in act mode on the scale harness (docs/scale.md "wave_repair"): what a site's repair
needs, from the repair tests' own rig (support/repairrig.py), on the harness's per-node
hardware; and the scenario that puts repair in the Xid wave's loop.

* support/scale_repair_conf.py: ``ScaleSpec.repair`` set, the harness writes the RebootProgram
  (the rig's REBOOT_SCRIPT) into slurm.conf and ``[repair] mode = "act"`` with those limits
  into every serve replica's config.
* :class:`HarnessHardware`: what a reboot does to a harness node (a new boot id, a fresh
  kernel log, its agent restarted), for the rig's :class:`~support.repairrig.BMC`, which kills
  the node's slurmd and starts it with a fresh boot time: slurmd runs the installed
  HealthCheckProgram as it registers, and that run tells serve the node is healthy again.
* :func:`wave_repair`: Xid 79 on ``percent`` % of the nodes, every node's health check, then
  repair acts until every faulted node is back or ticketed; the figures come from the store's
  ledger and the BMC's log, with the decisions a test asserts (:func:`failures`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from slurmguard.repair import ledger
from support.repairrig import BMC
from support.scale_repair_conf import RepairLimits, bmc_dir
from support.scale_scenarios import Figures, Phase, all_healthchecks, wave_nodes
from support.scaleharness import _stop

if TYPE_CHECKING:
    from support.scaleharness import ScaleHarness


class HarnessHardware:
    """The BMC's view of a harness node (what NodeHardware.boot does, on nodes/NODE/)."""

    def __init__(self, h: ScaleHarness) -> None:
        self.h = h
        self.agent_failures: list[str] = []

    def boot(self, node: str) -> None:
        """A new boot id, a fresh kernel log (a new file: a reader's cursor in the old one
        means nothing there), and the node's agent, if it has one, started with the boot."""
        import uuid

        d = self.h.node_dir(node)
        for name, text in (("boot_id", f"{uuid.uuid4()}\n"), ("kmsg", "")):
            tmp = d / f".{name}.boot"
            tmp.write_text(text)
            os.replace(tmp, d / name)
        old = self.h.agents.get(node)
        if old is not None:
            # In place (no pop): the scenario's phase reads the agents while the BMC works.
            _stop(old)
            try:
                self.h.start_agent(node)
            except RuntimeError as e:  # the node goes on without it (the hooks' fallback)
                self.agent_failures.append(f"{node}: {str(e)[-300:]}")


def repair_budget_s(n: int, k: int, limits: RepairLimits, policy_interval: float) -> float:
    """How long ``k`` repairs on ``n`` nodes may take: the hours the reboot limit makes the
    last ones wait, plus one round per ``slots`` repairs (a reboot, the health check at boot,
    a few policy passes each: proof, verification, return), plus a margin."""
    hours = limits.reboot_hours(k)
    rounds = math.ceil(k / limits.slots(n))
    return hours * 3600 + rounds * (90 + 6 * policy_interval) + 120


def wave_repair(h: ScaleHarness, percent: float = 3.0, parallel: int = 64,
                repair_timeout: float = 0.0, **_: Any) -> Figures:
    """Xid 79 on ``percent`` % of the nodes at once, every node's health check (as ``wave``),
    then serve's repair in act mode until every faulted node is returned or ticketed (at most
    ``repair_timeout`` s; 0: :func:`repair_budget_s`)."""
    from slurmguard.store import Store

    limits = h.spec.repair
    if limits is None:
        raise ValueError("wave_repair: the harness must be started with ScaleSpec.repair set")
    assert h.cluster is not None
    faulted = wave_nodes(h, percent)
    store = Store.open(url=h.store_url)
    budget = repair_timeout or repair_budget_s(h.spec.nodes, len(faulted), limits,
                                               h.spec.policy_interval)
    hw = HarnessHardware(h)
    with BMC(h.cluster, bmc_dir(h), hw) as bmc:
        t0 = time.time()
        for n in faulted:
            h.inject_xid(n)
        p = Phase(h)
        wall, logs = all_healthchecks(h, parallel)
        fig = p.end()
        # Slurm's drains, and the ledger's: a node drained early in the pass may already be
        # rebooting (a reboot drops the drain: docs/repair.md) when the pass ends.
        drained = set(h.drained()) | _drained_in_ledger(store, t0, len(h.nodes))
        fig.update(faulted=len(faulted), wall_s=round(wall, 1), drained=len(drained),
                   drained_faulted=len(set(drained) & set(faulted)),
                   drained_healthy=sorted(set(drained) - set(faulted)),
                   missed=sorted(set(faulted) - set(drained)),
                   missed_logs={n: logs[h.nodes.index(n)][-600:]
                                for n in set(faulted) - set(drained)},
                   all_drained_s=round(time.time() - t0, 1))
        done: dict[str, str] = {}
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            done = {r.node: r.outcome for r in ledger.episodes(store.nodes.events(
                since=t0, kinds=list(ledger.KINDS), limit=50 * len(faulted) + 1000))
                if r.outcome in ("returned", "ticketed")}
            if set(faulted) <= set(done):
                break
            time.sleep(min(5.0, max(1.0, h.spec.policy_interval)))
        fig["repair_wait_s"] = round(time.time() - t0, 1)
        time.sleep(2 * h.spec.policy_interval)  # a repair that wrongly goes on shows itself
        reboots = list(bmc.reboots)
    events = store.nodes.events(since=t0, kinds=list(ledger.KINDS),
                                limit=50 * len(faulted) + 1000)
    fig.update(ledger_figures(events, reboots, faulted))
    # A healthy node drained at any time in the wave and its repairs, not only in the pass.
    fig["drained_healthy"] = sorted(set(fig["drained_healthy"])
                                    | (_drained_in_ledger(store, t0, len(h.nodes)) - set(faulted)))
    fig.update(budget_s=round(budget), still_drained=sorted(h.drained()),
               agent_failures=hw.agent_failures,
               limits={"max_nodes": limits.max_nodes, "max_percent": limits.max_percent,
                       "reboots_per_hour": limits.reboots_per_hour, "settle": limits.settle,
                       "slots": limits.slots(h.spec.nodes),
                       "policy_interval": h.spec.policy_interval})
    fig["failures"] = failures(fig)
    store.close()
    for n in set(faulted) - {n for n, k in done.items() if k == "returned"}:
        h.node_dir(n).joinpath("kmsg").write_text("")  # a ticketed node, back for what follows
    h.undrain_all()
    return fig


def _drained_in_ledger(store: Any, since: float, nodes: int) -> set[str]:
    return {e.node for e in store.nodes.events(since=since, kinds=["drain"], limit=nodes + 100)}


def ledger_figures(events: list[Any], reboots: list[tuple[str, float]],
                   faulted: list[str]) -> Figures:
    """What repair did, from the ledger's events (EventRow) through the product's one reader
    of the repair ledger (slurmguard/repair/ledger.py), and the BMC's reboots (what the
    world saw)."""
    eps = ledger.episodes(events)
    started = [r for r in eps if r.started_at is not None]
    returned = sorted({r.node for r in eps if r.outcome == "returned"})
    ticketed = sorted({r.node for r in eps if r.outcome == "ticketed"})
    to_return = sorted(r.ended_at - r.drained_at for r in eps if r.outcome == "returned"
                       and r.ended_at is not None and r.drained_at is not None)
    queued = sorted(r.started_at - r.drained_at for r in started
                    if r.started_at is not None and r.drained_at is not None)
    per_node = Counter(n for n, _ in reboots)
    return {
        "repaired_healthy": sorted({r.node for r in started} - set(faulted)),
        "returned": len(returned), "ticketed": len(ticketed), "ticketed_nodes": ticketed,
        "unfinished": sorted(set(faulted) - set(returned) - set(ticketed)),
        "reboots": len(reboots), "rungs": sum(len(r.rungs) for r in eps),
        "rebooted_twice": sorted(n for n, c in per_node.items() if c > 1),
        "max_reboots_per_node": max(per_node.values(), default=0),
        "max_concurrent": max_overlap([(r.started_at, r.ended_at if r.ended_at is not None
                                        else math.inf) for r in started]),
        "max_reboots_in_hour": max_in_window(sorted(t for _, t in reboots), 3600.0),
        "drain_to_return_p50_s": _q(to_return, 0.5), "drain_to_return_max_s": _q(to_return, 1.0),
        "drain_to_start_p50_s": _q(queued, 0.5), "drain_to_start_max_s": _q(queued, 1.0),
    }


def failures(fig: Figures) -> list[str]:
    """The decisions the project asserts of a repaired wave, each broken one in a line."""
    lim, out = fig["limits"], []
    if fig["missed"] or fig["drained_healthy"]:
        out.append(f"drains: missed {fig['missed']}, healthy drained {fig['drained_healthy']}")
    if fig["repaired_healthy"]:
        out.append(f"repair started on healthy nodes {fig['repaired_healthy']}")
    if fig["rebooted_twice"]:
        out.append(f"rebooted twice: {fig['rebooted_twice']}")
    if fig["max_concurrent"] > lim["slots"]:
        out.append(f"{fig['max_concurrent']} repairs at once, limit {lim['slots']}")
    if fig["max_reboots_in_hour"] > lim["reboots_per_hour"]:
        out.append(f"{fig['max_reboots_in_hour']} reboots in an hour, limit {lim['reboots_per_hour']}")
    if fig["unfinished"]:
        out.append(f"neither returned nor ticketed within {fig['budget_s']} s: {fig['unfinished']}")
    left = sorted(set(fig["still_drained"]) - set(fig["ticketed_nodes"]))
    if left:
        out.append(f"drained after the repairs, not ticketed: {left}")
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one moment (a span ending as another starts: not both)."""
    marks = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans],
                   key=lambda m: (m[0], m[1]))
    best = cur = 0
    for _, d in marks:
        cur += d
        best = max(best, cur)
    return best


def max_in_window(times: list[float], window: float) -> int:
    """The most of the sorted ``times`` in any ``window`` seconds (two pointers, linear)."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _q(xs: list[float], q: float) -> float | None:
    """The median (``q`` 0.5) or the largest (1.0) of ``xs``, rounded; None when empty."""
    if not xs:
        return None
    return round(statistics.median(xs) if q < 1 else max(xs), 1)
