"""serve's repair pass: gather the inputs of :func:`slurmguard.repair.plan.plan` (Slurm's
node and job view, the ledger, the fleet alerts, the health runs), carry its actions out, and
write every step to the ledger (docs/repair.md).

    RepairPass(cfg, store, slurm).run() -> list[Action]

Carrying out, per action:

* ``rung`` (the episode's first: the evidence bundle first, the triage collector into
  ``repair.evidence_dir``, then ``repair_start``); a MAINT reservation of the node's own
  (``sg_repair_<node>``) keeps jobs off it until it is returned or ticketed, whatever Slurm's
  ReturnToService does after a reboot; ``repair_rung`` is written *before* the rung is taken
  (a serve that dies mid-rung never takes it twice); then ``scontrol reboot ASAP
  nextstate=DOWN reason="slurmguard: repair: ..."`` or the site's argv (reset-gpu,
  restart-service, power-cycle) through :func:`slurmguard.proc.run_command`. Slurm refusing,
  a command failing or hanging past ``repair.command_timeout``: a ``transient`` outcome.
* ``burnin``: the health checks pass after the rung: the node opened inside its reservation
  and a quick burn-in submitted into it (:mod:`slurmguard.repair.burnin`): ``repair_burnin``
  (run, job); its verdict, judged as the nightly report judges, makes the next outcome.
* ``outcome``: ``repair_outcome`` (a quick burn-in's verdict also written to its run).
* ``return``: the reservation deleted, our drain (or our reboot's DOWN) cleared, the node on
  probation: ``repair_return``, ``probation_start``.
* ``ticket``: the site's ticket argv with the cause, the history and the evidence path; the
  node kept out (drained again if a reboot let Slurm return it), the lemon flag set:
  ``repair_ticket``, ``lemon``.
* ``observe``: ``repair_observe`` (once per episode), nothing else.

A fault in this pass (the store, Slurm unreadable) raises to the caller, which logs it: it
never drains and never returns a node.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from slurmguard.contract import REASON_PREFIX, reason_source
from slurmguard.errors import CommandError, SlurmguardError
from slurmguard.output import iso
from slurmguard.policy.blast import scopes as blast_scopes
from slurmguard.policy.repair_params import REBOOTS, RepairParams, Rung, available_rungs, family
from slurmguard.repair.plan import (
    REPAIR_KINDS,
    Action,
    Fleet,
    NodeIn,
    RepairEvent,
    episode_state,
    plan,
)

log = logging.getLogger("slurmguard.repair")
ACTOR = "slurmguard"
_ADMIN_KINDS = ("clear", "lemon_cleared", "probation_start")
_LOOKBACK = 30 * 86400.0
_LIMIT = 1_000_000


def reservation_name(node: str) -> str:
    return "sg_repair_" + "".join(c if c.isalnum() else "_" for c in node)


class RepairPass:
    """One repair pass over the fleet; ``run`` is called from serve's periodic pass."""

    def __init__(self, cfg: Any, store: Any, slurm: Any, metrics: Any = None) -> None:
        self.cfg, self.store, self.slurm, self.metrics = cfg, store, slurm, metrics
        self.section = cfg.section("repair")
        self.params = RepairParams.from_section(self.section)
        self._infos: dict[str, Any] = {}
        self._events: dict[str, list[RepairEvent]] = {}
        self._judged: dict[str, Any] = {}  # node -> its quick burn-in's Judged, this pass

    # -- inputs
    def _ledger(self, now: float) -> tuple[dict[str, list[RepairEvent]], dict[str, Any]]:
        """Per node: its repair (and admin return) events; and its latest drain by us."""
        kinds = [*REPAIR_KINDS, *_ADMIN_KINDS, "drain"]
        rows = self.store.nodes.events(since=now - max(_LOOKBACK, self.params.lemon_window),
                                       kinds=kinds, limit=_LIMIT)
        events: dict[str, list[RepairEvent]] = {}
        drains: dict[str, Any] = {}
        for e in sorted(rows, key=lambda e: (e.at, e.id)):
            if e.kind == "drain":
                if e.actor_kind == ACTOR:
                    drains[e.node] = e
                continue
            events.setdefault(e.node, []).append(
                RepairEvent(e.at, e.kind, e.details, admin=e.actor_kind == "admin"))
        return events, drains

    def _health(self, node: str, check: str, since: float) -> tuple[float | None, float | None]:
        """(last run at which ``check`` passed, last at which it failed), since ``since``."""
        healthy = failing = None
        for item in self.store.nodes.history(node, since=since, limit=50):
            if item.kind != "result" or item.health in ("error", "unsupported"):
                continue
            if check in item.checks:
                failing = max(failing or item.at, item.at)
            elif item.health in ("healthy", "degraded"):
                healthy = max(healthy or item.at, item.at)
        return healthy, failing

    def inputs(self, now: float) -> tuple[list[NodeIn], dict[str, list[RepairEvent]], Fleet]:
        # Fresh, not serve's shared view (serve/slurmview.py): a reboot's proof and the
        # failures counted since it read the node's BootTime.
        read = getattr(self.slurm, "nodes_now", self.slurm.nodes)
        infos = self._infos = {i.name: i for i in read()}
        busy = _running(self.slurm.jobs())
        events, drains = self._ledger(now)
        self._events = events
        scopes = blast_scopes(infos.values(), self.cfg.section("policy").get("groups"))
        lemons = {s.name for s in self.store.nodes.summary(list(drains)) if s.lemon}
        only = set(self.section["partitions"])
        nodes = []
        for name, drain in sorted(drains.items()):
            info = infos.get(name)
            if info is None or (only and not only & set(info.partitions)):
                continue
            if not _ours_now(info, events.get(name, ()), drain.id):
                continue
            nodes.append(self._node_in(info, drain, busy.get(name, 0), name in lemons, scopes,
                                       events.get(name, ()), now))
        fleet = Fleet({s: len(m) for s, m in scopes.items()},
                      frozenset(a.cause for a in self.store.nodes.alerts(
                          open_only=True, since=now - float(self.section["shared_hold"]))),
                      _reboots_since(events, now - 3600.0),
                      paused=self.paused() is not None,
                      available=self._available())
        return nodes, events, fleet

    def paused(self) -> str | None:
        """Why repair is paused, or None: the store's switch (`repair pause`, seen by every
        replica) or ``repair.pause_file`` on this host (works while the store is down)."""
        from slurmguard.store.switches import REPAIR_PAUSED

        sw = self.store.switches.get(REPAIR_PAUSED)
        if sw is not None:
            return f"paused by {sw.actor} at {iso(sw.at)}" + (f": {sw.reason}" if sw.reason else "")
        path = str(self.section["pause_file"])
        return f"paused by the file {path}" if os.path.exists(path) else None

    def _node_in(self, info: Any, drain: Any, jobs: int, lemon: bool,
                 scopes: Mapping[str, frozenset[str]], events: Sequence[RepairEvent],
                 now: float) -> NodeIn:
        cause = drain.source or reason_source(drain.reason) or "unknown"
        healthy, failing = self._health(info.name, family(cause), drain.at)
        ncfg = self.cfg.for_node(info.name)
        # Precedence (docs/policy.md "Observe mode"): a node observing under policy.mode
        # acts nowhere, whatever repair.mode says.
        mode = "observe" if ncfg["policy.mode"] == "observe" else ncfg["repair.mode"]
        judged = self._burnin_of(info.name, drain.id, events, scopes, now)
        return NodeIn(info.name, cause, drain.id, drain.at, jobs=jobs, lemon=lemon,
                      burnin=judged.verdict if judged else "",
                      burnin_why=judged.why if judged else "",
                      gpus=_gpus(drain.reason), boot_id=str(info.raw.get("BootTime") or "") or None,
                      registered=not info.not_responding and not any(
                          f.startswith("REBOOT") for f in info.flags),
                      booted_at=_boot_time(info.raw.get("BootTime")),
                      healthy_since=healthy, failing_since=failing, mode=mode,
                      scopes=tuple(s for s, m in scopes.items() if info.name in m))

    def _burnin_of(self, node: str, episode: int, events: Sequence[RepairEvent],
                   scopes: Mapping[str, frozenset[str]], now: float) -> Any:
        """The verdict of the node's quick burn-in while verification waits for it (else
        None): judged against the nodes of its partitions, as the nightly report judges."""
        from slurmguard.repair import burnin

        ep = episode_state(events, episode)
        if ep.last_result != "proven" or ep.burnin_at <= ep.result_at:
            return None
        peers = {m for s, members in scopes.items() if s.startswith("partition:")
                 and node in members for m in members}
        judged = burnin.judge(self.cfg, self.store, self.slurm, node, ep.burnin_at - 1.0,
                              peers, now)
        self._judged[node] = judged
        return judged

    def _available(self) -> frozenset[str]:
        return available_rungs(self.section)

    # -- the pass
    def run(self, now: float | None = None) -> list[Action]:
        now = time.time() if now is None else now
        nodes, events, fleet = self.inputs(now)
        actions = plan(nodes, events, fleet, self.params, now)
        by = {n.name: n for n in nodes}
        for a in actions:
            if a.kind != "hold":
                log.warning("repair: %s %s %s: %s", a.node, a.kind, a.rung or a.result, a.why)
            try:
                self.apply(a, by[a.node], now)
            except SlurmguardError as exc:
                log.error("repair: %s %s failed: %s", a.node, a.kind, exc)
            else:
                self._count(a, by[a.node], now)
        if self.metrics is not None:
            self.metrics.repair_nodes.set(_in_repair(nodes, events))
        return actions

    def _count(self, a: Action, n: NodeIn, now: float) -> None:
        if self.metrics is None or a.kind == "hold":
            return
        result = {"rung": "started", "return": "returned", "ticket": "ticketed",
                  "observe": "observed", "burnin": "burn-in"}.get(a.kind, a.result)
        rung = a.rung.name if a.rung is not None else ("ticket" if a.kind == "ticket" else "")
        self.metrics.repair_steps.labels(cause=n.cause, rung=rung, result=result).inc()
        if a.kind == "return" and n.drained_at:
            self.metrics.repair_drain_to_return.observe(max(0.0, now - n.drained_at))

    def apply(self, a: Action, n: NodeIn, now: float) -> None:
        ep = {"episode": a.episode, "cause": n.cause}
        if a.kind == "observe":
            self._event(a.node, "repair_observe", a.why, now, **ep)
        elif a.kind == "outcome":
            judged = self._judged.pop(a.node, None)
            extra = {}
            if judged is not None and judged.run is not None:
                from slurmguard.repair import burnin

                burnin.settle(self.store, a.node, judged, now)
                extra = {"burnin_run": judged.run.id, "burnin_verdict": judged.verdict}
            self._event(a.node, "repair_outcome", f"{a.rung}: {a.result}: {a.why}", now,
                        rung=str(a.rung), attempt=a.attempt, result=a.result, **extra, **ep)
        elif a.kind == "burnin":
            self._burnin(a, n, now, ep)
        elif a.kind == "rung":
            self._rung(a, n, now, ep)
        elif a.kind == "return":
            self._return(a, now, ep)
        elif a.kind == "ticket":
            self._ticket(a, n, now, ep)

    def _event(self, node: str, kind: str, reason: str, now: float, **details: Any) -> None:
        self.store.nodes.record_event(node, kind, ACTOR, reason, source="repair", at=now,
                                      details=details)

    def _rung(self, a: Action, n: NodeIn, now: float, ep: dict[str, Any]) -> None:
        assert a.rung is not None
        if not self._reserve(n.name):
            return  # no rung without the reservation: the same rung is proposed next pass
        if a.first:
            evidence = self.collect_evidence(n.name, a.episode)
            self._event(n.name, "repair_start", f"{n.cause}: evidence in {evidence}", now,
                        evidence=evidence, **ep)
        self._event(n.name, "repair_rung", f"{a.rung} (attempt {a.attempt})", now,
                    rung=a.rung.name, arg=a.rung.arg, attempt=a.attempt,
                    boot_before=n.boot_id, **ep)
        try:
            self._take(a.rung, n, a.attempt)
        except CommandError as exc:
            self._event(n.name, "repair_outcome", f"{a.rung}: transient: {exc.message}", now,
                        rung=str(a.rung), attempt=a.attempt, result="transient", **ep)
            return
        if a.rung.name not in REBOOTS:  # a command rung ran: verify next
            self._event(n.name, "repair_outcome", f"{a.rung}: proven: the command succeeded",
                        time.time(), rung=str(a.rung), attempt=a.attempt, result="proven", **ep)

    def _burnin(self, a: Action, n: NodeIn, now: float, ep: dict[str, Any]) -> None:
        from slurmguard.repair import burnin

        if not self._reserve(n.name):
            return  # never opened without the reservation: proposed again next pass
        res = reservation_name(n.name)
        timeout = self.params.burnin_timeout
        try:
            since = max((e.at for e in self._events.get(n.name, ())
                         if e.kind == "repair_outcome" and e.details.get("episode") == a.episode),
                        default=now)
            job, run, opened = burnin.submit(self.cfg, self.store, self.slurm, n.name, res,
                                             timeout, self._infos.get(n.name), now, since)
        except SlurmguardError as exc:
            self._event(n.name, "repair_outcome", f"{a.rung}: transient: quick burn-in not "
                        f"submitted: {exc}", now, rung=str(a.rung), attempt=a.attempt,
                        result="transient", **ep)
            return
        self._event(n.name, "repair_burnin", f"quick burn-in: job {job} in {res}", now,
                    rung=str(a.rung), attempt=a.attempt, run=run, job=job, reservation=res,
                    opened=opened, timeout=timeout, **ep)

    def _take(self, rung: Rung, n: NodeIn, attempt: int) -> None:
        if rung.name == "reboot":
            self.slurm.reboot(n.name, f"{REASON_PREFIX} repair: {n.cause}: reboot "
                              f"(attempt {attempt})")
            return
        key = {"reset-gpu": "reset_gpu", "restart-service": "restart_service",
               "power-cycle": "power_cycle"}[rung.name]
        values = {"node": n.name, "gpus": ",".join(map(str, n.gpus)), "service": rung.arg}
        self._command(self.section[key], values)

    def _command(self, template: Sequence[str], values: Mapping[str, str]) -> None:
        from slurmguard.proc import run_command

        argv = [part.format_map(_Blank(values)) for part in template]
        run_command(argv, timeout=float(self.section["command_timeout"]))

    def _reserve(self, node: str) -> bool:
        """The node's own MAINT reservation, made (or found) before each rung; False when
        there is none (Slurm refused, e.g. an overlapping reservation): no rung then."""
        import getpass

        from slurmguard.adapters.slurm.burnin import create_reservation, reservation_exists

        name = reservation_name(node)
        # Long enough for every rung of the budget and its verification; released at the end.
        per_rung = 2 * self.params.settle + self.params.burnin_timeout
        minutes = int((self.params.attempts + 1) * per_rung / 60) + 60
        # root, and the user serve runs as: the quick burn-in is submitted by serve.
        users = sorted({"root", getpass.getuser()})
        try:
            create_reservation(self.slurm, name, node, users, minutes)
            return True
        except CommandError as exc:
            if reservation_exists(self.slurm, name):
                return True  # ours, from an earlier rung of this episode
            log.error("repair: %s: no rung without reservation %s: %s", node, name, exc.message)
            return False

    def _release(self, node: str) -> None:
        from slurmguard.adapters.slurm.burnin import delete_reservation

        try:
            delete_reservation(self.slurm, reservation_name(node))
        except CommandError:
            pass  # none (a reservation ends by itself): nothing to release

    def _return(self, a: Action, now: float, ep: dict[str, Any]) -> None:
        self.slurm.resume_ours(a.node)
        self._release(a.node)
        self._event(a.node, "repair_return", a.why, now, **ep)
        # Probation (and the gate's "returned at") from when Slurm took the node back, not from
        # the pass's start: a health check that ran before the RESUME is older than the return.
        self.store.nodes.return_node(a.node, ACTOR, f"repair: {a.why}", probation=True,
                                     at=max(now, time.time()))

    def _ticket(self, a: Action, n: NodeIn, now: float, ep: dict[str, Any]) -> None:
        evidence = self._evidence_of(a.node, a.episode) or self.collect_evidence(n.name, a.episode)
        history = _history_text(self.store.nodes.events(node=a.node, kinds=list(REPAIR_KINDS),
                                                        limit=50))
        called = ""
        if self.section["ticket"]:
            try:
                self._command(self.section["ticket"], {"node": a.node, "cause": n.cause,
                                                        "history": history, "evidence": evidence})
                called = "called"
            except CommandError as exc:
                called = f"failed: {exc.message}"
        kept = self._keep_out(n, a.why)
        self._release(a.node)
        self._event(a.node, "repair_ticket", a.why, now, evidence=evidence, command=called,
                    kept_out=kept, **ep)
        self.store.nodes.set_flags(a.node, lemon=True,
                                   lemon_reason=f"{REASON_PREFIX} repair: ticket: {a.why}",
                                   lemon_since=now)
        self.store.nodes.record_event(a.node, "lemon", ACTOR, f"repair: {a.why}",
                                      source="repair", at=now)

    def _keep_out(self, n: NodeIn, why: str) -> str:
        """A ticketed node stays out: drained again if a reboot let Slurm return it."""
        from slurmguard.drainguard import Unguarded, guarded_drain

        reason = f"{REASON_PREFIX} repair: ticket: {why}"
        done = guarded_drain(self.slurm, Unguarded("repair: a ticketed node stays out"),
                             n.name, n.cause, reason, via="repair", ledger=None)
        # Still DOWN from our reboot (a ticket can follow the proof within seconds, when the
        # health check at boot failed): ReturnToService=2 would return it at its next ping,
        # after the reservation is gone. Drained now, it comes back drained.
        if done.result == "already" and self.slurm.drain_ours_down(n.name, reason):
            return "drained"
        return done.result

    # -- evidence
    def _evidence_of(self, node: str, episode: int) -> str:
        for e in self.store.nodes.events(node=node, kinds=["repair_start"], limit=20):
            if e.details.get("episode") == episode:
                return str(e.details.get("evidence", ""))
        return ""

    def collect_evidence(self, node: str, episode: int) -> str:
        """The triage bundle of ``node`` (kernel log, nvidia-smi, the store's runs, Slurm's
        record) before any rung destroys it; its path. A node that cannot be reached still
        gets a bundle: the store's runs, Slurm's view, and why the rest is missing."""
        from slurmguard.triage.bundle import Bundle
        from slurmguard.triage.collect import CollectOptions, collect

        out = os.path.join(str(self.section["evidence_dir"]),
                           f"{node}-{episode}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
        try:
            bundle = Bundle(out_dir=out)
            # Slurm's record first: it needs no SSH, and the reason names the fault.
            with open(os.path.join(out, "slurm-node.json"), "w", encoding="utf-8") as f:
                json.dump(dict(self.slurm.node_record(node).raw), f, indent=1, sort_keys=True)
            opts = CollectOptions.from_config(self.cfg.section("triage"), parallel=1)
            try:
                collect([node], opts, bundle, recent=self._recent, progress=False)
            except ImportError as exc:  # the ssh extra is not installed where serve runs
                with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
                    json.dump(self._recent(node), f, indent=1, sort_keys=True)
                why = (f"no SSH collection: {exc.name or exc} is not installed "
                       "(pip install 'slurmguard[ssh]')")
                log.warning("repair: evidence of %s: %s", node, why)
                return f"{out} (incomplete: {why})"
        except (SlurmguardError, OSError) as exc:
            log.error("repair: evidence of %s: %s", node, exc)
            return f"{out} (incomplete: {exc})"
        return out

    def _recent(self, node: str) -> list[dict[str, Any]]:
        return [asdict(i) for i in self.store.nodes.history(node, limit=200)]


class _Blank(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> str:
        return ""


def _running(jobs: Iterable[Any]) -> dict[str, int]:
    from slurmguard.nodeset import expand

    out: dict[str, int] = {}
    for j in jobs:
        if j.state.upper() in ("RUNNING", "COMPLETING", "SUSPENDED") and j.nodes:
            for n in expand(j.nodes, source="job nodes", allow_empty=True):
                out[n] = out.get(n, 0) + 1
    return out


def _ours_now(info: Any, events: Sequence[RepairEvent], episode: int) -> bool:
    """Repair looks at a node drained by us now, or one whose repair episode is open (a
    reboot may leave it DOWN, or back in service inside our reservation). Never at a node
    someone else drained or set DOWN, nor one a person returned during the episode: a
    person has taken it over."""
    if info.ours and info.drained:
        return True
    raw = str(info.raw.get("Reason") or info.reason or "")
    if (info.drained or info.down) and not raw.startswith(REASON_PREFIX):
        return False
    mine = [e for e in events if e.details.get("episode") == episode]
    started = min((e.at for e in mine if e.kind == "repair_start"), default=None)
    done = any(e.kind in ("repair_return", "repair_ticket") for e in mine)
    if started is None or done:
        return False
    return not any(e.admin and e.at >= started for e in events)


def _in_repair(nodes: Sequence[NodeIn], events: Mapping[str, Sequence[RepairEvent]]) -> int:
    from slurmguard.repair.plan import episode_state

    states = (episode_state(events.get(n.name, ()), n.episode) for n in nodes)
    return sum(1 for s in states if s.started and not s.done)


def _reboots_since(events: Mapping[str, Sequence[RepairEvent]], since: float) -> int:
    return sum(1 for evs in events.values() for e in evs
               if e.kind == "repair_rung" and e.at >= since and e.details.get("rung") in REBOOTS)


def _boot_time(value: Any) -> float | None:
    """Slurm's BootTime (``2026-12-05T01:02:03``, local time as Slurm prints it, or epoch
    seconds) as epoch seconds; None when Slurm does not know it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if value > 0 else None
    try:
        return time.mktime(time.strptime(str(value or "").strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _gpus(reason: str) -> tuple[int, ...]:
    """GPUs a drain names (``GPU 3``, ``GPUs 0,3``, ``gpu 0000:3b:00.0`` is not an index)."""
    import re

    m = re.search(r"\bGPUs?\s+([0-9]+(?:\s*,\s*[0-9]+)*)\b", reason or "")
    return tuple(int(x) for x in re.split(r"\s*,\s*", m.group(1))) if m else ()


def _history_text(rows: Sequence[Any]) -> str:
    return "; ".join(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(e.at))} {e.kind} "
                     f"{e.reason}" for e in sorted(rows, key=lambda e: e.at))[:2000]


def run_pass(fleet: Any) -> None:
    """serve's hook (slurmguard/serve/fleet.py): one repair pass; a failure is logged only."""
    try:
        RepairPass(fleet.cfg, fleet.store, fleet.slurm, fleet.metrics).run()
    except SlurmguardError as exc:  # Slurm or the store unreadable: nothing done this pass
        log.warning("repair: pass skipped: %s", exc)
    except Exception:
        log.exception("repair pass failed")
