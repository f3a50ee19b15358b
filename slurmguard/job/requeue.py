"""The requeue watcher: put jobs hit by a node fault back on healthy nodes at once.

When a node dies under a job with ``--requeue``, Slurm requeues the job but makes it eligible
only ~121 s later (``EligibleTime`` = requeue + ``cred_expire``, testbed.md), and may send it
straight back to a node that is about to fail again. When a Prolog on a node we drained
fails, Slurm requeues the job *held* ("launch failed requeued held"). Both are lost GPU time.

The watcher polls the queue (``squeue -O``, the fields it reads; SlurmCLI.queue) and reads a
job's full record (``scontrol show job``) and the node table only when a waiting job needs a
decision. It remembers the nodes each job ran on (Slurm forgets them at
requeue), and when a job comes back PENDING with a higher restart count (or held after a
launch failure) and one of those nodes is now down, not responding, or drained (by anyone:
since drain notices, a drain under a running job ends the run at its next checkpoint for a
requeue, whoever set it; a drained node takes no new job, so excluding it costs nothing), it:

1. adds the failed nodes to the job's ``ExcNodeList``;
2. releases it if it is held after that launch failure;
3. sets ``EligibleTime=now``, in the second after it saw the requeue (a launch in the second
   the previous run's credential was revoked is killed by slurmd);

at most ``max_requeues`` times per job (then it leaves the job alone and says so: no crash
loops). A job requeued for any other reason (scontrol requeue by a user, preemption, the
wrapper's exit 75 with healthy nodes) is not touched. Each recovery becomes an event.

:func:`plan` is pure (table-tested); :class:`Watcher` is the thin loop around the adapter.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from slurmguard.atomic import write_atomic
from slurmguard.errors import SlurmguardError
from slurmguard.job.requeue_path import RequeuePath, job_expedited
from slurmguard.nodeset import expand, fold

log = logging.getLogger("slurmguard.job.requeue")

ACTIVE = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}
# States of a run that is ending: Slurm may already have released (or lost) some of its nodes,
# so what they show is added to what we saw, never a replacement.
ENDING = {"COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"}
# Waiting to run again: PENDING, or (Slurm 25.11+) EXPEDITING, a job that Slurm's expedited
# requeue put back after a node fault (seen on 26.05.5: EligibleTime = requeue time, no
# ExcNodeList, tests/data/slurm/show-job-expedite-requeued-26.05.5.txt).
WAITING = {"PENDING", "EXPEDITING"}


class JobLike(Protocol):
    job_id: str
    state: str
    reason: str
    nodes: str
    restart_count: int
    eligible_time: float | None
    exc_nodes: str

    @property
    def held(self) -> bool: ...


class NodeLike(Protocol):
    name: str

    @property
    def down(self) -> bool: ...

    @property
    def drained(self) -> bool: ...

    @property
    def ours(self) -> bool: ...

    reason: str


@dataclass
class JobMemory:
    """What the watcher knows about a job across polls (and restarts of the watcher)."""

    nodes: str = ""  # nodes of its last run (Slurm clears NodeList at requeue)
    run_of: int = -1  # the restart count of the run that ``nodes`` belongs to
    restarts: int = 0  # restart count when last seen
    handled: int = -1  # restart count already acted upon (or judged not ours)
    hold_handled: int = -1  # restart count at which a launch-failure hold was acted upon
    expedited: int = 0  # how many times we sped it up
    requeued_at: float | None = None  # when we saw the requeue, for the recovery time
    failed: list[str] = field(default_factory=list)
    risk_handled: int = -1  # restart count at which the gate's risk refusals were acted upon


@dataclass(frozen=True)
class Action:
    job_id: str
    kind: str  # expedite | cap | unknown
    failed_nodes: tuple[str, ...] = ()
    exclude: str = ""  # the new ExcNodeList
    release: bool = False
    eligible_now: bool = False
    reason: str = ""
    path: str = "watcher"  # who makes it eligible: watcher | slurm-expedited (requeue_path.py)


def _nodes(nodeset: str, source: str) -> list[str]:
    """Node names of a job's node list as Slurm wrote it (empty is a normal answer)."""
    return expand(nodeset, source=source, allow_empty=True)


def node_failed(node: NodeLike | None) -> bool:
    """A node counts as the cause when it is gone, down/not responding, or drained by anyone
    (a drain notice ends the run on any drain: slurmguard.job.respond)."""
    if node is None:
        return True
    return bool(node.down or node.drained)


def _launch_failed_hold(job: JobLike) -> bool:
    """Held by Slurm after a launch (Prolog) failure. scontrol says so in Reason
    (``launch_failed_requeued_held``); squeue --json in ``state_description`` (its
    ``state_reason`` then reads JobHeldUser)."""
    raw = getattr(job, "raw", None) or {}
    desc = raw.get("state_description", "") if isinstance(raw, dict) else ""
    text = f"{job.reason} {desc}".lower().replace("_", " ")
    return job.held and "launch failed" in text


def plan(jobs: Iterable[JobLike], nodes: Mapping[str, NodeLike], memory: dict[str, JobMemory],
         now: float, max_requeues: int, slurm_expedites: bool = False,
         refused: Mapping[str, Iterable[str]] | None = None,
         ) -> tuple[list[Action], dict[str, JobMemory]]:
    """Decide what to do for each job; returns the actions and the updated memory.
    ``slurm_expedites``: Slurm makes jobs flagged for expedited requeue eligible itself.
    ``refused``: job id -> the nodes the gate refused it for node risk (risk.gate_max_nodes;
    the store's ``risk_refused`` events): excluded like failed nodes, once per restart."""
    mem = {k: JobMemory(**asdict(v)) for k, v in memory.items()}
    actions: list[Action] = []
    seen = set()
    for job in jobs:
        jid = str(job.job_id)
        seen.add(jid)
        m = mem.setdefault(jid, JobMemory(restarts=job.restart_count, handled=job.restart_count))
        if job.state in ACTIVE | ENDING:
            _remember_run(job, m)
            continue
        if job.state not in WAITING:
            continue
        excluded = set(_nodes(job.exc_nodes, "ExcNodeList"))
        risky = tuple(sorted(set((refused or {}).get(jid, ())) - excluded))
        a = _decide(job, m, nodes, risky, now, max_requeues, slurm_expedites)
        if a is not None:
            actions.append(a)
    for jid in list(mem):
        if jid not in seen:
            del mem[jid]  # gone from the queue
    return actions, mem


def _remember_run(job: JobLike, m: JobMemory) -> None:
    if job.nodes:
        if job.state in ENDING or job.restart_count == m.run_of:
            m.nodes = fold([*_nodes(m.nodes, "NodeList"), *_nodes(job.nodes, "NodeList")])
        else:  # a new run: forget the nodes of the previous one
            m.nodes = job.nodes
            m.run_of = job.restart_count
    if job.state not in ENDING:
        m.restarts = job.restart_count


def _triggers(job: JobLike, m: JobMemory, risky: Iterable[str]) -> tuple[bool, bool, bool]:
    """(requeued since last handled, held after a launch failure, refused for risk anew):
    what makes :func:`_decide` look at a waiting job at all."""
    requeued = job.restart_count > m.handled and job.restart_count > 0
    risk_new = bool(tuple(risky)) and m.risk_handled < job.restart_count
    return requeued, _launch_failed_hold(job), risk_new


def wants_decision(job: JobLike, memory: Mapping[str, JobMemory],
                   refused: Mapping[str, Iterable[str]] | None) -> bool:
    """Whether :func:`plan` would judge this job now (a superset: the risk refusals before
    the job's exclusions are taken off). The watcher reads the node table and the job's
    full record only then, not on every poll of a busy queue."""
    if job.state not in WAITING:
        return False
    m = memory.get(str(job.job_id)) or JobMemory(restarts=job.restart_count,
                                                  handled=job.restart_count)
    requeued, held, risk_new = _triggers(job, m, (refused or {}).get(str(job.job_id), ()))
    return requeued or (held and m.hold_handled < job.restart_count) or risk_new


def _decide(job: JobLike, m: JobMemory, nodes: Mapping[str, NodeLike], risky: tuple[str, ...],
            now: float, max_requeues: int, slurm_expedites: bool) -> Action | None:
    """One waiting job: recover it from a node fault or a risk refusal, or leave it."""
    jid = str(job.job_id)
    requeued, held, risk_new = _triggers(job, m, risky)
    if not requeued and not (held and m.hold_handled < job.restart_count) and not risk_new:
        return None
    # One decision per requeue, and per launch-failure hold at a restart count.
    m.handled = max(m.handled, job.restart_count)
    if held:
        m.hold_handled = job.restart_count
    if risk_new:
        m.risk_handled = job.restart_count
    m.restarts = job.restart_count
    if not m.nodes and not risky:
        return Action(jid, "unknown", reason="requeued, but the watcher never saw where it "
                      "ran: cause unknown, left alone")
    faults = tuple(n for n in _nodes(m.nodes, "NodeList") if node_failed(nodes.get(n)))
    failed = tuple(sorted(set(faults) | set(risky)))
    if not failed:
        return None  # requeued for another reason (user, preemption, app): not ours to speed up
    if faults and m.expedited >= max_requeues:  # risk refusals are bounded by the gate
        return Action(jid, "cap", failed, reason=f"already recovered {m.expedited} times "
                      f"(requeue.max_requeues {max_requeues}): left to Slurm")
    m.expedited += 1
    m.requeued_at = now
    m.failed = list(failed)
    exclude = fold([*_nodes(job.exc_nodes, "ExcNodeList"), *failed])
    by_slurm = slurm_expedites and job_expedited(job)
    eligible_now = not by_slurm and (job.eligible_time is None or job.eligible_time > now)
    why = "; ".join(w for w in (f"node fault on {fold(faults)}" if faults else "",
                                f"refused by the gate for node risk on {fold(risky)}" if risky
                                else "") if w)
    return Action(jid, "expedite", failed, exclude=exclude, release=held,
                  eligible_now=eligible_now or held, reason=why,
                  path="slurm-expedited" if by_slurm else "watcher")


class SlurmJobs(Protocol):
    def jobs(self) -> list[Any]: ...
    def job(self, job_id: str | int) -> Any: ...
    def nodes(self, nodeset: str | None = None) -> list[Any]: ...
    def update_job(self, job_id: str | int, **fields: str | int) -> None: ...
    def release(self, job_id: str | int) -> None: ...


class Watcher:
    """Polls Slurm, plans, applies, remembers (in ``state_path`` when given)."""

    def __init__(self, slurm: SlurmJobs, *, max_requeues: int = 3, state_path: str | None = None,
                 record: Callable[[dict[str, Any]], None] | None = None,
                 metrics: Any = None, metrics_path: str = "",
                 path: RequeuePath | None = None,
                 refusals: Callable[[], Mapping[str, Iterable[str]]] | None = None) -> None:
        self.slurm = slurm
        # job id -> nodes the gate refused it for node risk (the store's ledger), or None
        self.refusals = refusals
        # Slurm's expedited requeue where the running Slurm has it on (25.11+), else ours
        self.path = path or RequeuePath(False)
        # slurmguard.metrics.registry.RequeueMetrics (prometheus_client), or None: no metrics
        self.metrics = metrics
        self.metrics_path = metrics_path
        self.max_requeues = max_requeues
        self.state_path = state_path
        self.record = record or (lambda ev: log.info("%s", json.dumps(ev)))
        self.memory: dict[str, JobMemory] = self._load()
        self._seen = 0.0  # when the last poll's job list arrived

    def _load(self) -> dict[str, JobMemory]:
        if not self.state_path or not os.path.exists(self.state_path):
            return {}
        try:
            with open(self.state_path) as fh:
                raw = json.load(fh)
            return {str(k): JobMemory(**v) for k, v in raw.items()}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("requeue watcher state %s unreadable (%s): starting fresh",
                        self.state_path, exc)
            return {}

    def _save(self) -> None:
        if not self.state_path:
            return
        # Every poll writes it: not fsynced (a power loss of the controller ends the jobs too).
        write_atomic(self.state_path, json.dumps({k: asdict(v) for k, v in self.memory.items()}),
                     durable=False)

    def poll(self, now: float | None = None) -> list[Action]:
        """One pass: read jobs and nodes, act on what :func:`plan` says, emit events."""
        now = time.time() if now is None else now
        jobs = self._queue()
        self._seen = time.time()  # every requeue in this answer was revoked by now
        before = {k: v.requeued_at for k, v in self.memory.items()}
        waiting = any(j.state in WAITING for j in jobs)
        refused = self._refused() if waiting else None
        judged = {str(j.job_id) for j in jobs if wants_decision(j, self.memory, refused)}
        if judged and not self.path.slurm_expedites:
            # The brief queue has no ExcNodeList: the full record of each job judged (one
            # REQUEST_JOB_INFO_SINGLE each). One that cannot be read fails the poll (retried
            # in `interval`) rather than have its exclusions overwritten by ours alone.
            jobs = [self.slurm.job(j.job_id) if str(j.job_id) in judged else j for j in jobs]
        # The node table only when a job is judged: a busy queue always has jobs waiting.
        nodes = {n.name: n for n in self.slurm.nodes()} if judged else {}
        actions, self.memory = plan(jobs, nodes, self.memory, now, self.max_requeues,
                                    self.path.slurm_expedites, refused)
        for a in actions:
            self._apply(a, now)
        # Recovery time: first poll that sees an expedited job running again.
        for j in jobs:
            m = self.memory.get(str(j.job_id))
            if m and m.requeued_at and j.state in ACTIVE and before.get(str(j.job_id)):
                self.record({"event": "requeue-recovered", "job_id": str(j.job_id),
                             "nodes": j.nodes, "restart": j.restart_count,
                             "seconds": round(now - m.requeued_at, 3), "failed": m.failed})
                if self.metrics is not None:
                    self.metrics.recovery.observe(max(0.0, now - m.requeued_at))
                m.requeued_at = None
        self._save()
        if self.metrics is not None:
            self.metrics.polls.labels(result="ok").inc()
            self.metrics.last_poll.set(now)
            self._write_metrics()
        return actions

    def _queue(self) -> list[Any]:
        """The queue: ``squeue -O`` (SlurmCLI.queue), or ``squeue --json`` where Slurm
        expedites requeues itself (25.11+): only the JSON carries the job's expedite flag."""
        brief = getattr(self.slurm, "queue", None)
        return self.slurm.jobs() if brief is None or self.path.slurm_expedites else brief()

    def _refused(self) -> Mapping[str, Iterable[str]] | None:
        if self.refusals is None:
            return None
        try:
            return self.refusals()
        except SlurmguardError as exc:  # the store is down: node faults are still handled
            log.warning("requeue watcher: risk refusals unreadable: %s", exc.message)
            return None

    def _write_metrics(self) -> None:
        try:
            self.metrics.write(self.metrics_path)
        except OSError as exc:
            log.warning("requeue watcher: metrics file %s: %s", self.metrics_path, exc)

    def _apply(self, a: Action, now: float) -> None:
        ev: dict[str, Any] = {"event": f"requeue-{a.kind}", "job_id": a.job_id, "time": now,
                              "failed_nodes": list(a.failed_nodes), "reason": a.reason}
        if a.kind == "expedite":
            held_before = len(getattr(self.slurm, "withheld", ()))
            try:
                self.slurm.update_job(a.job_id, ExcNodeList=a.exclude)
                if a.release:
                    self.slurm.release(a.job_id)
                if a.eligible_now:
                    # Not in the second the previous run ended: slurmd kills a launch whose
                    # credential was made in the second the job's last one was revoked ("Job
                    # credential revoked"), as when a run ended by exit 75 just now. Wait for
                    # the second after the job list came (0.5 s on average, once per poll),
                    # then "now": "now+1" would leave the start to the next scheduler pass,
                    # tens of seconds later.
                    time.sleep(max(0.0, math.floor(self._seen) + 1.02 - time.time()))
                    self.slurm.update_job(a.job_id, EligibleTime="now")
            except SlurmguardError as exc:  # the job may have ended meanwhile
                ev["event"], ev["error"] = "requeue-failed", exc.message
            ev.update(exclude=a.exclude, released=a.release, path=a.path)
            if len(getattr(self.slurm, "withheld", ())) > held_before:
                # Observe mode (policy.mode): the adapter withheld the calls (their
                # would-events are in the ledger); nothing was excluded or sped up, and the
                # job's next run is Slurm's own, not a recovery of ours.
                ev["event"] = "requeue-would-expedite"
                m = self.memory.get(a.job_id)
                if m is not None:
                    m.requeued_at = None
        if self.metrics is not None:
            self.metrics.requeues.labels(action=ev["event"].removeprefix("requeue-")).inc()
        self.record(ev)

    def watch(self, interval: float = 2.0, stop: Callable[[], bool] = lambda: False) -> None:
        """Poll until ``stop()``; an unreachable slurmctld is logged and retried, not fatal."""
        while not stop():
            t0 = time.monotonic()
            try:
                self.poll()
            except SlurmguardError as exc:
                log.warning("requeue watcher: %s", exc.message)
                if self.metrics is not None:
                    self.metrics.polls.labels(result="failed").inc()
                    self._write_metrics()
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
