"""The repair decision core: drained nodes, the ledger's repair events and the limits in; the
next actions out. Pure (no Slurm, no store, no clock): serve's repair pass
(:mod:`slurmguard.repair.loop`) gathers the inputs and carries the actions out.

A node's repair state is derived from the ledger only (:func:`episode_state`): the events of
its current drain episode (``details.episode`` = the ledger id of the ``drain`` that started
it). So a serve restarted mid-repair resumes where the ledger says: a rung with a
``repair_rung`` event is never taken again, and the next rung is the first not yet taken.

Per node and pass, one action (:class:`Action`), in this order of precedence:

* nothing (``hold``, with why): no ladder for the cause; a shared cause (an open fleet
  alert); the node is a lemon; a job is running on it; repair paused; a limit reached;
* ``observe``: observe mode: what it would do, recorded once per episode;
* ``ticket`` (+ lemon): the ladder or the attempt budget is exhausted, a rung's outcome was
  permanent, or the node was already repaired ``lemon_repairs`` times in ``lemon_window``;
* ``rung``: take the next rung (the first of an episode starts it: evidence first);
* ``outcome``: a rung's proof arrived (``proven``) or did not in ``settle`` (``transient``),
  or verification passed (``verified``) or failed (``transient``);
* ``burnin``: the health checks pass after a proven rung and ``repair.verify_burnin`` is on:
  submit a quick burn-in into the node's repair reservation; its verdict (judged against the
  node's peers as the nightly burn-in judges) is verification's second half: only a pass
  (``pass``, ``no_verdict``, ``degrading``: what the nightly report returns a node on) is
  ``verified``; ``failed``, ``flagged``, ``suspect``, ``partial`` or no verdict within
  ``repair.burnin_timeout`` is ``transient`` (the ladder climbs);
* ``return``: verified: undrain and put the node on probation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmguard.policy.repair_params import REBOOTS, RepairParams, Rung, family

REPAIR_KINDS = ("repair_start", "repair_rung", "repair_outcome", "repair_return",
                "repair_ticket", "repair_observe", "repair_burnin")
# An outcome's result: proven (the rung took effect; verify next), transient (try the next
# rung), permanent (stop: ticket), verified (the health checks pass: return).
RESULTS = ("proven", "transient", "permanent", "verified")
_HOUR = 3600.0
# Burn-in verdicts (slurmguard.burnin.verdict) on which verification passes: those on which
# the nightly report returns a node awaiting burn-in. "pending" waits; any other fails.
BURNIN_PASS = ("pass", "no_verdict", "degrading")


@dataclass(frozen=True)
class RepairEvent:
    """One ledger event of a node's repairs (the store's EventRow, reduced)."""

    at: float
    kind: str  # one of REPAIR_KINDS, or "clear"/"lemon_cleared"/"probation_start" by an admin
    details: Mapping[str, Any] = field(default_factory=dict)
    admin: bool = False


@dataclass(frozen=True)
class NodeIn:
    """A node drained by slurmguard, as the repair pass sees it this pass."""

    name: str
    cause: str  # the guard's cause key: gpu-xid:79, gpu-lost, burnin:gpu-matmul
    episode: int  # ledger id of the drain that began this episode
    drained_at: float = 0.0  # when that drain was taken
    jobs: int = 0  # running jobs on it
    lemon: bool = False  # the store's lemon flag (set by policy or a ticket)
    gpus: tuple[int, ...] = ()  # GPUs named by the drain (reset-gpu needs them)
    boot_id: str | None = None  # the node's boot id now (None: not known)
    registered: bool = False  # slurmd answers and the node is not rebooting
    booted_at: float | None = None  # when the node booted (Slurm's BootTime), None: not known
    healthy_since: float | None = None  # a passing health run of the cause's check, at
    failing_since: float | None = None  # a failing run of the cause's check, at
    mode: str = "observe"  # repair.mode for this node (its [[group]])
    # The verdict of the episode's newest quick burn-in (repair_burnin): "" none, "pending",
    # or a burn-in verdict (pass, failed, flagged, suspect, partial, ...), and why.
    burnin: str = ""
    burnin_why: str = ""
    scopes: tuple[str, ...] = ("fleet",)  # scopes it belongs to (fleet, partition:P, group:G)


@dataclass(frozen=True)
class Action:
    kind: str  # hold, observe, rung, outcome, burnin, return, ticket
    node: str
    why: str = ""
    rung: Rung | None = None
    attempt: int = 0
    result: str = ""  # of an outcome
    episode: int = 0
    first: bool = False  # a rung that starts the episode (collect the evidence first)


@dataclass(frozen=True)
class Episode:
    """The repair state of one node's current drain episode, from its ledger events."""

    started: bool = False
    taken: tuple[Rung, ...] = ()  # rungs started, in order
    open_rung: Rung | None = None  # started, no outcome yet
    open_at: float = 0.0
    rung_at: float = 0.0  # the newest rung's start
    boot_before: str | None = None
    last_result: str = ""  # of the newest outcome
    result_at: float = 0.0
    done: str = ""  # returned, ticketed
    observed: bool = False
    burnin_at: float = 0.0  # the newest quick burn-in's submission (repair_burnin)

    @property
    def last_rung(self) -> Rung:
        return self.taken[-1] if self.taken else Rung("unknown")

    @property
    def state(self) -> str:
        """returned, ticketed, proving, verifying, in repair, observed or waiting."""
        if self.done:
            return self.done
        if self.open_rung is not None:
            return "proving"
        if self.last_result == "proven":
            return "burn-in" if self.burnin_at > self.result_at else "verifying"
        return "in repair" if self.started else ("observed" if self.observed else "waiting")


def episode_state(events: Iterable[RepairEvent], episode: int) -> Episode:
    """Fold the node's repair events of ``episode`` (oldest first) into its state. Pure."""
    st: dict[str, Any] = {"taken": []}
    for e in sorted(events, key=lambda e: e.at):
        if e.details.get("episode") != episode:
            continue
        if e.kind == "repair_start":
            st["started"] = True
        elif e.kind == "repair_rung":
            rung = Rung(str(e.details.get("rung", "")), str(e.details.get("arg", "")))
            st["taken"].append(rung)
            st.update(open_rung=rung, open_at=e.at, rung_at=e.at,
                      boot_before=e.details.get("boot_before"))
        elif e.kind == "repair_outcome":
            st.update(open_rung=None, last_result=str(e.details.get("result", "")),
                      result_at=e.at)
        elif e.kind in ("repair_return", "repair_ticket"):
            st["done"] = "returned" if e.kind == "repair_return" else "ticketed"
        elif e.kind == "repair_observe":
            st["observed"] = True
        elif e.kind == "repair_burnin":
            st["burnin_at"] = e.at
    st["taken"] = tuple(st["taken"])
    return Episode(**st)


def repairs_in_window(events: Iterable[RepairEvent], now: float, window: float) -> int:
    """Returns by repair in ``window``, since the last time a person returned the node."""
    events = sorted(events, key=lambda e: e.at)
    reset = max((e.at for e in events if e.admin and e.kind in
                 ("clear", "lemon_cleared", "probation_start")), default=-math.inf)
    return sum(1 for e in events if e.kind == "repair_return" and e.at >= max(now - window, reset))


@dataclass(frozen=True)
class Fleet:
    """What the limits are measured against."""

    scope_sizes: Mapping[str, int]  # scope -> nodes in it
    shared_causes: frozenset[str] = frozenset()  # causes with an open fleet alert
    reboots_last_hour: int = 0  # reboot and power-cycle rungs started in the last hour
    paused: bool = False
    available: frozenset[str] = frozenset({"reboot", "restart-service", "ticket"})


def plan(nodes: Sequence[NodeIn], events: Mapping[str, Sequence[RepairEvent]], fleet: Fleet,
         params: RepairParams, now: float) -> list[Action]:
    """The next action of every node in ``nodes`` (sorted by name). Pure."""
    states = {n.name: episode_state(events.get(n.name, ()), n.episode) for n in nodes}
    busy = {n.name for n in nodes if n.mode == "act" and states[n.name].started
            and not states[n.name].done}
    in_scope = _scope_counts(nodes, busy)
    budget = _Budget(len(busy), in_scope, fleet.reboots_last_hour)
    out = []
    for n in sorted(nodes, key=lambda n: n.name):
        out.append(_decide(n, states[n.name], events.get(n.name, ()), fleet, params, now, budget))
    return out


def _scope_counts(nodes: Sequence[NodeIn], busy: set[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in nodes:
        if n.name in busy:
            for s in n.scopes:
                counts[s] = counts.get(s, 0) + 1
    return counts


@dataclass
class _Budget:
    """The fleet limits, spent as the pass hands out new episodes and reboots."""

    repairing: int
    in_scope: dict[str, int]
    reboots: int

    def start_refused(self, n: NodeIn, fleet: Fleet, p: RepairParams) -> str:
        if self.repairing >= p.max_nodes:
            return f"limit: {self.repairing} nodes in repair (repair.max_nodes {p.max_nodes})"
        for s in n.scopes:
            cap = max(1, math.floor(fleet.scope_sizes.get(s, 1) * p.max_percent / 100.0))
            if s != "fleet" and self.in_scope.get(s, 0) >= cap:
                return f"limit: {self.in_scope.get(s, 0)} nodes of {s} in repair (at most {cap})"
        return ""

    def start(self, n: NodeIn) -> None:
        self.repairing += 1
        for s in n.scopes:
            self.in_scope[s] = self.in_scope.get(s, 0) + 1


def _decide(n: NodeIn, ep: Episode, events: Sequence[RepairEvent], fleet: Fleet,
            p: RepairParams, now: float, budget: _Budget) -> Action:
    hold = _hold_why(n, ep, fleet, p)
    if hold:
        return Action("hold", n.name, hold, episode=n.episode)
    if n.mode != "act" and (ep.started or ep.taken or ep.last_result):  # back to observe: freeze
        return Action("hold", n.name, "observe mode: repair frozen", episode=n.episode)
    if ep.open_rung is not None:
        return _await_proof(n, ep, p, now)
    if ep.last_result == "proven":
        return _await_verify(n, ep, fleet, p, now)
    if ep.last_result == "verified":
        if fleet.paused:
            return Action("hold", n.name, "repair paused", episode=n.episode)
        return Action("return", n.name, f"verified after {ep.last_rung}", episode=n.episode)
    return _next_step(n, ep, events, fleet, p, now, budget)


def _hold_why(n: NodeIn, ep: Episode, fleet: Fleet, p: RepairParams) -> str:
    if ep.done:
        return f"repair {ep.done}"
    if not p.ladder(n.cause):
        return f"no ladder for {n.cause}"
    if n.cause in fleet.shared_causes or family(n.cause) in fleet.shared_causes:
        return f"shared cause: a fleet alert is open for {n.cause}"
    if n.lemon and not ep.started:
        return "lemon: repaired again only after a person returns it"
    return ""


def _await_proof(n: NodeIn, ep: Episode, p: RepairParams, now: float) -> Action:
    rung = ep.open_rung
    assert rung is not None
    attempt = len(ep.taken)
    if rung.name not in REBOOTS:
        # Command rungs record their outcome when the command returns: an open one means
        # serve stopped while it ran. It counts as taken (never run twice) and transient.
        return Action("outcome", n.name, "interrupted: serve stopped during the rung", rung,
                      attempt, "transient", n.episode)
    if n.registered and n.boot_id and ep.boot_before and n.boot_id != ep.boot_before:
        return Action("outcome", n.name, "new boot id, slurmd registered", rung, attempt,
                      "proven", n.episode)
    if now - ep.open_at > p.settle:
        return Action("outcome", n.name, f"not back with a new boot id in {p.settle:g}s", rung,
                      attempt, "transient", n.episode)
    return Action("hold", n.name, f"waiting for {rung} to take effect", rung, attempt,
                  episode=n.episode)


def _await_verify(n: NodeIn, ep: Episode, fleet: Fleet, p: RepairParams,
                  now: float) -> Action:
    rung, attempt = ep.last_rung, len(ep.taken)
    # The newest judged run decides: a pass since the rung began, or a failure since the rung
    # took effect: since its proof, or for a reboot since the node's boot. The health check at
    # boot (HealthCheckProgram runs before slurmd registers) reports before the proof is seen,
    # whether it passes or fails; a run from before the boot still saw the fault the reboot
    # was meant to clear.
    healthy, failing = n.healthy_since, n.failing_since
    if healthy is not None and healthy >= ep.rung_at and (failing is None or healthy > failing):
        if p.verify_burnin:
            return _await_burnin(n, ep, fleet, p, now)
        return Action("outcome", n.name, f"{n.cause} passes after {rung}", rung, attempt,
                      "verified", n.episode)
    since = ep.result_at
    # BootTime has whole seconds: a boot in the rung's own second still counts.
    if rung.name in REBOOTS and n.booted_at is not None and n.booted_at + 1.0 > ep.rung_at:
        since = min(since, n.booted_at)
    if failing is not None and failing >= since:
        return Action("outcome", n.name, f"{n.cause} fails again after {rung}", rung, attempt,
                      "transient", n.episode)
    if now - ep.result_at > p.settle:
        return Action("outcome", n.name, f"no health result in {p.settle:g}s", rung, attempt,
                      "transient", n.episode)
    return Action("hold", n.name, "verifying: waiting for a health check", rung, attempt,
                  episode=n.episode)


def _await_burnin(n: NodeIn, ep: Episode, fleet: Fleet, p: RepairParams,
                  now: float) -> Action:
    """The health checks pass after the rung: the quick burn-in is verification's second half."""
    rung, attempt = ep.last_rung, len(ep.taken)
    if ep.burnin_at <= ep.result_at:  # none submitted since this rung was proven
        if fleet.paused:
            return Action("hold", n.name, "repair paused", rung, attempt, episode=n.episode)
        return Action("burnin", n.name, f"{n.cause} passes after {rung}: quick burn-in", rung,
                      attempt, episode=n.episode)
    why = f" ({n.burnin_why})" if n.burnin_why else ""
    if n.burnin in BURNIN_PASS:
        return Action("outcome", n.name, f"{n.cause} passes and the quick burn-in passes "
                      f"({n.burnin}) after {rung}", rung, attempt, "verified", n.episode)
    if n.burnin and n.burnin != "pending":
        return Action("outcome", n.name, f"quick burn-in {n.burnin} after {rung}{why}", rung,
                      attempt, "transient", n.episode)
    if now - ep.burnin_at > p.burnin_timeout:
        return Action("outcome", n.name, f"quick burn-in: no verdict in {p.burnin_timeout:g}s",
                      rung, attempt, "transient", n.episode)
    return Action("hold", n.name, "verifying: quick burn-in running", rung, attempt,
                  episode=n.episode)


def _next_step(n: NodeIn, ep: Episode, events: Sequence[RepairEvent], fleet: Fleet,
               p: RepairParams, now: float, budget: _Budget) -> Action:
    ticket = _ticket_why(n, ep, events, fleet, p, now)
    rung = None if ticket else _next_rung(n, ep, fleet, p)
    if rung is None and not ticket:
        ticket = f"ladder exhausted after {len(ep.taken)} rungs"
    if fleet.paused:
        return Action("hold", n.name, "repair paused", episode=n.episode)
    if n.mode != "act":
        if ep.observed:
            return Action("hold", n.name, "observe mode: recorded", episode=n.episode)
        would = f"would ticket: {ticket}" if ticket else f"would take {rung}"
        return Action("observe", n.name, would, rung, len(ep.taken) + 1, episode=n.episode)
    if ticket:
        return Action("ticket", n.name, ticket, episode=n.episode, first=not ep.started)
    assert rung is not None
    if n.jobs:
        return Action("hold", n.name, f"{n.jobs} job(s) running: no rung", episode=n.episode)
    if not ep.started:
        refused = budget.start_refused(n, fleet, p)
        if refused:
            return Action("hold", n.name, refused, episode=n.episode)
    if rung.name in REBOOTS and budget.reboots >= p.reboots_per_hour:
        return Action("hold", n.name, f"limit: {budget.reboots} reboots in the last hour "
                      f"(repair.reboots_per_hour {p.reboots_per_hour})", episode=n.episode)
    if not ep.started:
        budget.start(n)
    if rung.name in REBOOTS:
        budget.reboots += 1
    return Action("rung", n.name, f"{n.cause}: rung {len(ep.taken) + 1}", rung,
                  len(ep.taken) + 1, episode=n.episode, first=not ep.started)


def _ticket_why(n: NodeIn, ep: Episode, events: Sequence[RepairEvent], fleet: Fleet,
                p: RepairParams, now: float) -> str:
    if not ep.started:
        done = repairs_in_window(events, now, p.lemon_window)
        if done >= p.lemon_repairs:
            return f"repaired {done} times in {p.lemon_window / 86400:g}d: a lemon"
        return ""
    if ep.last_result == "permanent":
        return f"{ep.last_rung}: permanent failure"
    spent = sum(1 for r in ep.taken if r.name != "ticket")
    if spent >= p.attempts:
        return f"attempt budget spent ({spent} of repair.attempts {p.attempts})"
    return ""


def _next_rung(n: NodeIn, ep: Episode, fleet: Fleet, p: RepairParams) -> Rung | None:
    """The first rung of the ladder not yet taken this episode, among those available."""
    for rung in p.ladder(n.cause):
        if rung in ep.taken:
            continue
        if rung.name == "ticket":
            return None  # the ticket is taken as the ladder's end
        if rung.name not in fleet.available or (rung.name == "reset-gpu" and not n.gpus):
            continue
        return rung
    return None
