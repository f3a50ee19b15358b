"""The instants of a fleet-day run before its batch script's first line, each by the clock of
whoever lived it: slurmctld's allocation (its log, to the millisecond), slurmguard's Prolog on
each node (the hook's own timer, stored by serve), and the training program's first instant
(its own line). support/fleet_day_plan.py charges a run's GPUs from the allocation on and
splits the overhead by these instants.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from support.fleet_day_plan import Run

# slurmctld (22.05 to 26.05, LogTimeFormat's default iso8601_ms): the main scheduler's
# "sched: Allocate JobId=N NodeList=..." and the backfill scheduler's "Started JobId=N in ...".
_ALLOC = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})\] .*?"
                    r"(?:sched: Allocate|backfill: .*Started) JobId=(\d+)\b")


def allocations(log_text: str) -> dict[str, list[float]]:
    """Job id -> the epoch times slurmctld allocated it (one per run: a requeue allocates
    again), in order. slurmctld writes local time, on this host's clock."""
    out: dict[str, list[float]] = {}
    for ln in log_text.splitlines():
        m = _ALLOC.match(ln)
        if m:
            at = time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + int(m.group(2)) / 1000
            out.setdefault(m.group(3), []).append(at)
    return out


def began(text: str) -> list[tuple[float, str, int]]:
    """train_job's --began lines: "T JOBID RESTART"."""
    out = []
    for ln in text.splitlines():
        w = ln.split()
        if len(w) == 3:
            out.append((float(w[0]), w[1], int(w[2])))
    return out


def prologs(store: Any, since: float) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(job id, node) -> [(started, seconds)] of slurmguard's Prolog records since ``since``."""
    from sqlalchemy import text

    q = text("SELECT n.name, r.job_id, r.started, r.duration FROM runs r "
             "JOIN nodes n ON n.id = r.node_id WHERE r.hook = 'prolog' AND r.started >= :since")
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with store.engine.connect() as conn:
        for node, job, started, dur in conn.execute(q, {"since": since}):
            out.setdefault((str(job or ""), node), []).append((float(started), float(dur)))
    return out


def attach(runs: list[Run], allocs: dict[str, list[float]],
           programs: list[tuple[float, str, int]],
           pro: dict[tuple[str, str], list[tuple[float, float]]] | None = None,
           slack: float = 0.05) -> int:
    """Each run's allocation (the job's latest at or before its script's start), its program's
    first instant (one inside the run) and its Prolog (the slowest of its nodes, a record that
    started between the allocation and the script). Returns how many runs had no allocation
    line (their GPUs are then charged from the script's start, as before)."""
    missing = 0
    for r in runs:
        times = [a for a in allocs.get(r.job_id, []) if a <= r.start + slack]
        if times:
            r.alloc = min(times[-1], r.start)
        else:
            missing += 1
        inside = [t for t, job, _ in programs
                  if job == r.job_id and r.start <= t and (r.end is None or t <= r.end)]
        if inside:
            r.began = min(inside)
        if pro and r.alloc is not None:
            spans = [d for n in r.nodes for s, d in pro.get((r.job_id, n), [])
                     if r.alloc - slack <= s <= r.start]
            r.prolog_s = max(spans, default=0.0)
    return missing


def read(runs: list[Run], ctld_log: Path, began_logs: list[Path], store: Any = None,
         since: float = 0.0) -> int:
    """:func:`attach` from the files and store of one arm's day."""
    allocs = allocations(ctld_log.read_text(errors="replace")) if ctld_log.exists() else {}
    programs = [b for p in began_logs if p.exists() for b in began(p.read_text())]
    return attach(runs, allocs, programs, prologs(store, since) if store is not None else None)
