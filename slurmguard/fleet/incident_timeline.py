"""An incident's timeline: each step with its time, its lane (the node, or one job) and the
source it was read from. Pure, like :mod:`slurmguard.fleet.incidents`, which calls it.

The node lane comes from the store: the first bad signal, the drain and who drained, the
ledger's repair steps (rungs, proof, verification, return or ticket), the return and
probation. A job lane comes from goodput's breakdown of the job: Slurm accounting's runs
(start, end, state, the next run elsewhere) and the wrapper's reports (the drain notice and
its latency, the checkpoint-now save, the steps redone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmguard.fleet.incidents import Hit, Incident, Job



@dataclass(frozen=True)
class Step:
    at: float
    lane: str  # "node" or "job <id>"
    what: str
    source: str  # store (runs, ledger), sacct, wrapper

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "lane": self.lane, "what": self.what, "source": self.source}


PROBATION_S = 7 * 86400.0
# Ledger events worth a line on the node lane, and how to say them.
NODE_KINDS = {
    "drain": "drained", "clear": "returned (drain cleared)", "drain_refused": "drain refused",
    "drain_held": "drain held for a second look",
    "drain_failed": "drain failed", "reboot_request": "reboot asked", "lemon": "marked a lemon",
    "suspect": "named slow by a job", "repair_start": "repair: evidence collected",
    "repair_rung": "repair rung", "repair_outcome": "repair proof", "repair_burnin":
    "repair verification: quick burn-in", "repair_return": "repair: verified, returned",
    "repair_ticket": "repair: ticket", "repair_observe": "repair (observe)",
    "probation_start": "probation started", "probation_end": "probation ended",
    "lemon_cleared": "lemon cleared",
}


def _node_steps(inc: Incident, events: Mapping[str, Sequence[Any]], until: float,
                next_begins: Mapping[str, float]) -> list:
    out = [Step(inc.first_signal.at, "node", f"first bad signal: {inc.first_signal.what}",
                inc.first_signal.source)]
    for ep in inc.episodes:
        end = ep.out_until(until)
        # After the return, only the probation that follows it (PROBATION_S at most), and
        # nothing from the node's next incident on: that is the next incident's.
        stop = min(end + PROBATION_S, next_begins.get(ep.node, math.inf))
        for e in events.get(ep.node, ()):
            during = ep.drained_at <= e.at <= end and e.at < stop
            after = (ep.returned_at is not None and end < e.at < stop
                     and e.kind in ("probation_start", "probation_end"))
            if e.kind not in NODE_KINDS or not (during or after):
                continue
            who = getattr(e, "actor", "") or e.actor_kind
            text = f"{NODE_KINDS[e.kind]}"
            if e.kind in ("drain", "clear"):
                text += f" by {e.actor_kind}" + (f" ({who})" if who != e.actor_kind else "")
            if e.reason:
                text += f": {e.reason}"
            prefix = f"{ep.node}: " if len(inc.nodes) > 1 else ""
            out.append(Step(e.at, "node", prefix + text, "store: ledger"))
        if ep.returned_at is None:
            out.append(Step(until, "node", f"{ep.node}: still out", "store: ledger"))
    return out


def _hit_steps(h: Hit, job: Job | None, drained_at: float) -> list:
    lane = f"job {h.job_id}"
    r = job.runs[h.run] if job else None
    nodes = ",".join(r.nodes) if r else h.node
    out = [Step(h.start, lane, f"run {h.run} started on {nodes} ({h.gpus} GPUs)", "sacct")]
    infra = r.infra if r else {}
    for lat in infra.get("notice_latency_s") or []:
        if lat is not None:
            out.append(Step(drained_at + lat, lane,
                            f"drain notice arrived {lat:.1f} s after the drain", "wrapper"))
    for secs in infra.get("checkpoint_now_s") or []:
        if secs is not None:
            out.append(Step(h.end, lane, f"checkpoint-now save, {secs:.2f} s", "wrapper"))
    redone = f"{h.steps_redone} step(s) to redo"
    if h.step_time_s:
        redone += f" x {h.step_time_s:.2f} s"
    if r is not None and r.resume_step is not None:
        redone += f" (it had resumed from step {r.resume_step})"
    out.append(Step(h.end, lane, f"run {h.run} ended {h.state or '?'} on {nodes}; {redone}",
                    "sacct, wrapper"))
    if h.next_start is not None:
        wait = h.next_start - h.end
        out.append(Step(h.next_start, lane, f"ran again on {','.join(h.next_nodes)} after "
                                            f"{wait:.0f} s waiting", "sacct"))
        nxt = job.runs[h.run + 1] if job else None
        if nxt is not None and nxt.parts.get("restart"):
            out.append(Step(h.next_start + nxt.parts["restart"], lane,
                            f"first step again (start-up {nxt.parts['restart']:.1f} s)", "wrapper"))
    else:
        out.append(Step(h.end, lane, "did not run again", "sacct"))
    return out


def _ticketed(inc: Incident, repairs: Mapping[str, Sequence[Any]], until: float) -> bool:
    """Whether repair ticketed one of the incident's drains: a repair episode
    (slurmguard.repair.ledger) of its node, begun by that drain, that ended in a ticket."""
    for ep in inc.episodes:
        end = ep.out_until(until)
        if any(r.outcome == "ticketed" and ep.drained_at - 1.0 <= r.first_at <= end
               for r in repairs.get(ep.node, ())):
            return True
    return False


def timeline(inc: Incident, jobs: Mapping[str, Job], events: Mapping[str, Sequence[Any]],
             until: float, by_node: Mapping[str, Sequence[tuple[Job, int]]],
             next_begins: Mapping[str, float] | None = None,
             repairs: Mapping[str, Sequence[Any]] | None = None) -> None:
    """Fill ``inc.timeline`` (time order; the node lane first at equal times) and its
    outcome (``ticket`` when repair handed the node to people and it is still out).
    ``next_begins``: per node, when its next incident begins; the timeline ends there.
    ``repairs``: per node, its repair episodes (slurmguard.repair.ledger)."""
    steps = _node_steps(inc, events, until, next_begins or {})
    hit = {(h.job_id, h.run) for h in inc.hits}
    drains = {ep.node: ep.drained_at for ep in inc.episodes}
    for h in inc.hits:
        steps += _hit_steps(h, jobs.get(h.job_id), drains.get(h.node, inc.drained_at))
    for ep in inc.episodes:  # jobs on the node while it was failing that it did not end
        for job, i in by_node.get(ep.node, ()):
            r = job.runs[i]
            if (job.job_id, i) not in hit and r.start <= ep.drained_at and \
                    r.end >= inc.first_signal.at:
                steps.append(Step(max(r.start, inc.first_signal.at), f"job {job.job_id}",
                                  f"ran on {ep.node} while it was failing; ended {r.state} "
                                  "(not by this fault)", "sacct"))
    if inc.returned_at is None and _ticketed(inc, repairs or {}, until):
        inc.outcome = "ticket"
    steps.sort(key=lambda s: (s.at, s.lane != "node"))
    inc.timeline = steps
