"""The shadow report's join, pure: slurmguard's would-episodes (observe mode's ledger) against
the incumbent's out-of-service events (NHC's, admins', Slurm's own drains and DOWNs) and the
jobs that ran on each node, over one window.

Per node and cause, four lists:

* ``both``: a would-episode and an incumbent event on the same node that overlap, or start
  within ``match_window`` of each other, unless the incumbent's reason names a check of
  another area of the node than the episode's cause (:func:`same_fault`: NHC's drain for a
  missing mount is not the ECC fault slurmguard saw on that node before it); ``lead_s`` =
  incumbent start - slurmguard's (positive: slurmguard saw it first).
* ``only_slurmguard``: a would-episode nobody else acted on, after which the node ran a job
  that did not complete (or no job at all): the GPU-hours of the jobs that ran on the node
  during the episode, and how they ended.
* ``only_incumbent``: an incumbent event slurmguard has no would-episode for; ``check`` names
  the slurmguard check that reads what the reason names, or says that none does. But when
  that check failed on the node meanwhile, inside another of the node's would-episodes (a
  second fault on a node slurmguard would have had out already), the event is ``both``, its
  row's ``within`` naming the open episode's cause (:func:`sighted`).
* ``false``: a would-episode nobody else acted on, after which every job on the node (to
  the window's end) completed: acting would have been a false drain; its GPU-hours are
  those jobs'.

A job still running at the window's end (no end in accounting) is neither: it does not make
its episode false (it may yet fail there) and is not a job lost to the fault (it has not
failed), so its GPU-hours are in neither sum. An unmatched episode with such a job stays in
``only_slurmguard`` (its ``ended`` says RUNNING) until a later report sees the job end.

The summary: ``saved_gpu_hours`` (jobs that ended other than COMPLETED on a node slurmguard
would have drained first: the whole episode for only-slurmguard, the lead for both),
``cost_gpu_hours`` (jobs that completed on would-have-been-false nodes: capacity acting would
have taken away), ``nodes_out`` (distinct nodes acting would have drained; a refused
would-drain is not one) and ``nodes_out_false``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmguard.contract import REASON_PREFIX

NO_CHECK = "no check of slurmguard's reads this"
# What an incumbent's reason names -> the slurmguard check that reads the same thing. NHC's
# check names first (its reasons start "NHC: check_...:"), then plain words admins use.
_CHECK_WORDS: tuple[tuple[str, str], ...] = (
    (r"check_fs_mount|\bnot mounted\b|\bmount\b", "fs-mount"),
    (r"check_fs_(free|used|inodes|ifree|iused|size)|\bfull\b|\bspace\b", "fs-mount"),
    (r"check_hw_physmem|check_hw_mem|\bmemory\b|\bdimm\b", "host-memory"),
    (r"check_hw_cpuinfo|\bcpus?\b|\bcores?\b", "host-cpus"),
    (r"check_hw_ib|infiniband|\bib\b|\bhca\b", "ib-link"),
    (r"check_nv_healthmon|check_nvsmi|\bgpus?\b|nvidia|\bxid\b", "gpu-count"),
    (r"\becc\b", "gpu-ecc"),
    (r"check_hw_mcelog|\bedac\b|\bmce\b", "host-edac"),
    (r"\bmunge\b", "host-munge"),
    (r"\bntp\b|\bchrony|\bclock\b", "host-timesync"),
)


@dataclass(frozen=True)
class WouldEpisode:
    node: str
    cause: str
    start: float
    end: float | None  # the node passed again (would_end); None: still failing
    refused: bool  # the guard would have refused the drain
    reason: str = ""


@dataclass(frozen=True)
class OutEvent:
    """The incumbent took ``node`` out of service (drain, DOWN, FAIL) from start to end."""

    node: str
    start: float
    end: float | None
    reason: str
    by: str = ""


@dataclass(frozen=True)
class JobRun:
    job: str
    node: str
    start: float
    end: float | None
    state: str  # COMPLETED, FAILED, NODE_FAIL, ...
    gpus: float  # GPUs on this node (0 where Slurm knows of none)


@dataclass
class Report:
    since: float
    until: float
    both: list[dict[str, Any]] = field(default_factory=list)
    only_slurmguard: list[dict[str, Any]] = field(default_factory=list)
    only_incumbent: list[dict[str, Any]] = field(default_factory=list)
    false: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "summary": self.summary,
                "both": self.both, "only_slurmguard": self.only_slurmguard,
                "only_incumbent": self.only_incumbent, "would_have_been_false": self.false}


def check_for(reason: str) -> str:
    """The slurmguard check that reads what ``reason`` names, else :data:`NO_CHECK`."""
    low = reason.lower()
    for pattern, check in _CHECK_WORDS:
        if re.search(pattern, low):
            return check
    return NO_CHECK


def _area(check: str) -> str:
    return check.split("-", 1)[0]


_AREAS = frozenset(_area(c) for _, c in _CHECK_WORDS)  # gpu, fs, host, ib


def same_fault(cause: str, reason: str) -> bool:
    """Whether an incumbent's drain for ``reason`` can be the fault slurmguard's ``cause``
    names: yes, unless the reason names a check of another area of the node (gpu, ib, fs,
    host). A reason that names no check (an admin's words) and a cause of no area (the
    policy's ``flapping``) can be any fault. The fleet day's shadow arm (tests/scale/
    test_fleet_day_shadow_small.py) has the case: n7's ECC would-episode, open from 10 s
    (NHC cannot see ECC), and NHC's drain of n7 for the filer's hang at 20 s; joined by node
    and time alone they were one fault, caught by both."""
    check = check_for(reason)
    if check == NO_CHECK or _area(cause) not in _AREAS:
        return True
    return _area(check) == _area(cause)


def _overlap(a0: float, a1: float | None, b0: float, b1: float | None, until: float,
             slack: float) -> bool:
    a1 = until if a1 is None else a1
    b1 = until if b1 is None else b1
    return a0 <= b1 + slack and b0 <= a1 + slack


def _jobs_in(jobs: Iterable[JobRun], node: str, t0: float, t1: float) -> list[dict[str, Any]]:
    out = []
    for j in jobs:
        end = t1 if j.end is None else j.end
        if j.node != node or j.start >= t1 or end <= t0:
            continue
        hours = (min(end, t1) - max(j.start, t0)) / 3600.0
        out.append({"job": j.job, "state": j.state, "end": j.end, "node_hours": round(hours, 4),
                    "gpu_hours": round(hours * j.gpus, 4)})
    return out


def _ended(runs: Sequence[dict[str, Any]]) -> dict[str, int]:
    got: dict[str, int] = {}
    for r in runs:
        got[r["state"]] = got.get(r["state"], 0) + 1
    return dict(sorted(got.items()))


def _lost(runs: Sequence[dict[str, Any]]) -> float:
    """GPU-hours of the jobs that ended other than COMPLETED (a running job has not)."""
    return sum(r["gpu_hours"] for r in runs if r["end"] is not None and r["state"] != "COMPLETED")


def build(would: Sequence[WouldEpisode], incumbent: Sequence[OutEvent], jobs: Sequence[JobRun],
          *, since: float, until: float, match_window: float = 3600.0,
          sightings: Sequence[tuple[str, str, float]] = ()) -> Report:
    """The four lists and the summary (module docstring). ``sightings``: (node, check, when)
    of slurmguard's failing check results, for the incumbent's events no would-episode
    matched (:func:`sighted`)."""
    rep = Report(since, until)
    matched: set[int] = set()
    saved = cost = 0.0
    for w in sorted(would, key=lambda w: (w.start, w.node, w.cause)):
        hit = next((i for i, e in enumerate(incumbent) if i not in matched and e.node == w.node
                    and _overlap(w.start, w.end, e.start, e.end, until, match_window)
                    and same_fault(w.cause, e.reason)), None)
        base = {"node": w.node, "cause": w.cause, "at": w.start, "end": w.end,
                "guard": "refused" if w.refused else "allowed", "reason": w.reason}
        if hit is not None:
            matched.add(hit)
            e = incumbent[hit]
            runs = _jobs_in(jobs, w.node, w.start, e.start) if e.start > w.start else []
            saved += 0.0 if w.refused else _lost(runs)
            rep.both.append({**base, "incumbent_at": e.start, "lead_s": round(e.start - w.start, 1),
                             "incumbent_reason": e.reason, "by": e.by,
                             "jobs_in_lead": runs})
            continue
        after = _jobs_in(jobs, w.node, w.start, until)  # what the node did next
        if after and all(r["end"] is not None and r["state"] == "COMPLETED" for r in after):
            row = {**base, "jobs": after, "ended": _ended(after),
                   "gpu_hours": round(sum(r["gpu_hours"] for r in after), 4),
                   "node_hours": round(sum(r["node_hours"] for r in after), 4)}
            cost += 0.0 if w.refused else row["gpu_hours"]
            rep.false.append(row)
            continue
        runs = _jobs_in(jobs, w.node, w.start, until if w.end is None else w.end)  # meanwhile
        row = {**base, "jobs": runs, "ended": _ended(runs),
               "gpu_hours": round(sum(r["gpu_hours"] for r in runs), 4),
               "node_hours": round(sum(r["node_hours"] for r in runs), 4)}
        saved += 0.0 if w.refused else _lost(runs)
        rep.only_slurmguard.append(row)
    for i, e in enumerate(incumbent):
        if i in matched:
            continue
        row = sighted(e, would, sightings, until, match_window)
        if row is not None:
            rep.both.append(row)
            continue
        rep.only_incumbent.append({"node": e.node, "at": e.start, "end": e.end,
                                   "reason": e.reason, "by": e.by, "check": check_for(e.reason)})
    rep.only_incumbent.sort(key=lambda r: (r["at"], r["node"]))
    drained = {w.node for w in would if not w.refused}
    leads = [r["lead_s"] for r in rep.both]
    rep.summary = {
        "saved_gpu_hours": round(saved, 4), "cost_gpu_hours": round(cost, 4),
        "nodes_out": len(drained),
        "nodes_out_false": len({r["node"] for r in rep.false if r["guard"] == "allowed"}),
        "both": len(rep.both), "only_slurmguard": len(rep.only_slurmguard),
        "only_incumbent": len(rep.only_incumbent), "would_have_been_false": len(rep.false),
        "median_lead_s": sorted(leads)[len(leads) // 2] if leads else None,
    }
    return rep


def sighted(e: OutEvent, would: Sequence[WouldEpisode], sightings: Sequence[tuple[str, str, float]],
            until: float, match_window: float) -> dict[str, Any] | None:
    """A ``both`` row for an incumbent event no would-episode matched, when slurmguard's check
    that reads its reason failed on the node meanwhile while another of the node's
    would-episodes was open: acting, slurmguard had the node out already, and a second fault
    writes no would-event of its own (one episode per node and cause; the record's drain
    names one cause). The fleet day's shadow arm: NHC drained a node for the filer's hang
    whose ECC fault slurmguard would have drained ten seconds before. None otherwise."""
    check = check_for(e.reason)
    end = until if e.end is None else e.end
    seen = sorted(t for n, c, t in sightings if n == e.node and c == check
                  and e.start - match_window <= t <= end)
    for t in seen:
        w = next((w for w in would if w.node == e.node
                  and w.start <= t and (w.end is None or t <= w.end)), None)
        if w is not None:
            return {"node": e.node, "cause": check, "at": t, "end": None,
                    "guard": "refused" if w.refused else "allowed", "reason": "",
                    "within": w.cause, "incumbent_at": e.start, "lead_s": round(e.start - t, 1),
                    "incumbent_reason": e.reason, "by": e.by, "jobs_in_lead": []}
    return None


def would_episodes(events: Iterable[Any]) -> list[WouldEpisode]:
    """Would-episodes from the ledger's would-events (any order): each would_drain or
    would_drain_refused starts one, ended by the node's next would_end."""
    evs = sorted(events, key=lambda e: (e.at, e.id))
    out = []
    for i, e in enumerate(evs):
        if e.kind not in ("would_drain", "would_drain_refused"):
            continue
        end = next((x.at for x in evs[i + 1:] if x.node == e.node and x.kind == "would_end"), None)
        out.append(WouldEpisode(e.node, e.source, e.at, end, e.kind == "would_drain_refused",
                                e.reason))
    return out


def out_events(events: Iterable[Any]) -> list[OutEvent]:
    """Incumbent out-of-service spans from serve's node-state history (state_change events
    of actor slurm): out -> the next in. slurmguard's own drains are left out. A new reason
    while the node is out is a sighting of its own (NHC's note for a second failing check),
    but not one the span already had: NHC marks a node again with its first check's note
    once the second passes, and that is no new fault."""
    evs = sorted(events, key=lambda e: (e.at, e.id))
    out: list[OutEvent] = []
    for i, e in enumerate(evs):
        if e.details.get("to") != "out" or e.details.get("ours") or e.reason.startswith(REASON_PREFIX):
            continue
        end = next((x.at for x in evs[i + 1:] if x.node == e.node and x.details.get("to") == "in"),
                   None)
        if any(o.node == e.node and o.end == end and o.reason == e.reason for o in out):
            continue  # the same span (the same return ends it), a reason it already gave
        out.append(OutEvent(e.node, e.at, end, e.reason, str(e.details.get("by") or "")))
    return out
