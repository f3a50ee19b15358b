"""Gather goodput inputs: Slurm accounting, the wrapper's run records, the store's faults.

Three sources, each optional; what is missing becomes an "unknown" note, never productive:

* **Slurm accounting** (``sacct -D -X --json``/``-P`` through :class:`SlurmCLI`): one record
  per run of a requeued job: its start, end, nodes, GPUs, state (NODE_FAIL ...), user and
  partition. Without slurmdbd, the wrapper's own run times stand in.
* **The wrapper's records** (``<checkpoint-dir>/.slurmguard/runs.jsonl``, one line per run):
  the resume step, the step frontier (first and last step and their times), the median step
  time, checkpoint saves with their durations, stalls, slow nodes. Found under the
  directories given with ``--runs`` and ``goodput.run_dirs`` (glob patterns), and in the job's
  working directory.
* **The node-state store**: faults of the job's nodes (slurmguard drains, failures the
  requeue watcher saw) during or after each run.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurmguard.goodput.account import Allocation, Fault, JobInputs, RunRecord

RUNS_FILE = "runs.jsonl"
STATE_DIR = ".slurmguard"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v


def _pair(v: Any) -> tuple[float, int] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        t, n = _num(v[0]), _int(v[1])
        if t is not None and n is not None:
            return (t, n)
    return None


def run_from_record(rec: Mapping[str, Any]) -> RunRecord | None:
    """A :class:`RunRecord` from one runs.jsonl line; None when the line is not a run record.

    Records of older wrappers (without the frontier fields) give a run with no progress
    reports, which the accounting counts as unknown.
    """
    started = _num(rec.get("started"))
    restart = _int(rec.get("restart"))
    if started is None or restart is None:
        return None
    resumed = rec.get("resumed_from")
    resume = _int(resumed.get("step")) if isinstance(resumed, dict) else None
    if resume is None and isinstance(rec.get("recovery"), dict) and resumed is None:
        resume = 0
    last_t, last_n = _num(rec.get("last_step_t")), _int(rec.get("frontier_step"))
    ckpts = []
    for c in rec.get("checkpoints") or []:
        if isinstance(c, (list, tuple)) and len(c) == 3 and _num(c[0]) is not None \
                and _int(c[1]) is not None:
            ckpts.append((float(c[0]), int(c[1]), _num(c[2])))
    stalls = []
    for s in rec.get("stalls") or []:
        if isinstance(s, (list, tuple)) and len(s) == 2 and None not in (_num(s[0]), _num(s[1])):
            stalls.append((float(s[0]), float(s[1])))
    meds = rec.get("node_median_step_s")
    return RunRecord(
        restart=restart, started=started, ended=_num(rec.get("ended")), resume_step=resume,
        verdict=str(rec.get("verdict") or ""), first_step=_pair(rec.get("first_step")),
        last_step=(last_t, last_n) if last_t is not None and last_n is not None else None,
        median_step_s=_num(rec.get("median_step_s")),
        step_samples=_int(rec.get("step_samples")) or 0, checkpoints=tuple(ckpts),
        stalls=tuple(stalls),
        node_median_step_s={str(k): float(v) for k, v in meds.items() if _num(v) is not None}
        if isinstance(meds, dict) else {},
        slow_nodes=tuple(str(n) for n in rec.get("slow_nodes") or []),
        notice_latencies=tuple(_num(n.get("latency_s")) for n in rec.get("notices") or []
                               if isinstance(n, dict)),
        checkpoint_now_s=tuple(_num(c.get("seconds")) for c in rec.get("checkpoint_now") or []
                               if isinstance(c, dict)),
        ended_by_notice=isinstance(rec.get("ended_by_notice"), dict))


def runs_files(paths: Iterable[str]) -> list[Path]:
    """runs.jsonl files under ``paths``: each a glob pattern naming checkpoint directories,
    their ``.slurmguard`` directories, or runs.jsonl files."""
    out: list[Path] = []
    seen: set[str] = set()
    for pattern in paths:
        if not pattern:
            continue
        for p in sorted(glob.glob(os.path.expanduser(pattern))) or []:
            path = Path(p)
            for cand in (path, path / RUNS_FILE, path / STATE_DIR / RUNS_FILE):
                if cand.name == RUNS_FILE and cand.is_file():
                    key = str(cand.resolve())
                    if key not in seen:
                        seen.add(key)
                        out.append(cand)
                    break
    return out


def read_runs(files: Iterable[Path], job_ids: set[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run records per job id from ``files`` (garbage lines skipped: records are advisory)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        try:
            with open(f, errors="replace") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(rec, dict) or rec.get("job_id") is None:
                        continue
                    jid = str(rec["job_id"])
                    if job_ids is None or jid in job_ids:
                        rec["_runs_file"] = str(f)  # where it was found (its progress beside it)
                        out.setdefault(jid, []).append(rec)
        except OSError:
            continue
    return out


def expand_nodes(nodeset: str) -> tuple[str, ...]:
    from slurmguard.errors import InputError
    from slurmguard.nodeset import expand

    try:
        return tuple(expand(nodeset, source="sacct NodeList", allow_empty=True))
    except InputError:
        return ()  # a node list we cannot trust: the nodes are unknown, the times still count


def progress_files(job_id: str, records: Sequence[Mapping[str, Any]]) -> list[Path]:
    """Where the job's progress events are: ``progress-<job>.jsonl`` beside the runs.jsonl
    its records were found in (the wrapper's default). A path a record names is not
    followed: the record is the user's file, and this runs as root."""
    out: list[Path] = []
    for rec in records:
        if isinstance(rec.get("_runs_file"), str):
            out.append(Path(rec["_runs_file"]).parent / f"progress-{job_id}.jsonl")
    seen: set[str] = set()
    return [p for p in out if not (str(p) in seen or seen.add(str(p))) and p.is_file()]


def run_from_progress(paths: Iterable[Path], start: float, end: float,
                      index: int) -> RunRecord | None:
    """A run summarised from the progress events of [start, end] (the ranks write them
    even when the wrapper died with its batch node and left no run record)."""
    from slurmguard.job.wrapper import Progress

    prog = Progress(last_event=start)
    for path in paths:
        try:
            with open(path, "rb") as fh:
                for line in fh:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    t = _num(ev.get("t")) if isinstance(ev, dict) else None
                    if t is not None and start - 1.0 <= t <= end + 1.0:
                        prog.feed(ev)
        except OSError:
            continue
    if prog.first_step is None or prog.frontier is None:
        return None
    return RunRecord(restart=index, started=start, ended=end, resume_step=None, verdict="",
                     first_step=prog.first_step, last_step=prog.frontier,
                     median_step_s=prog.median_step(), step_samples=len(prog.step_times),
                     checkpoints=tuple((c[0], c[1], c[2]) for c in prog.checkpoints),
                     node_median_step_s=prog.node_medians(), slow_nodes=tuple(prog.slow_nodes()))


def job_inputs(job_id: str, acct: Sequence[Any] | None, records: Sequence[Mapping[str, Any]],
               faults: Sequence[Fault] | None, notes: Sequence[str] = (),
               progress: Sequence[Path] = ()) -> JobInputs:
    """Put one job's sources together. ``acct``: its sacct records (None: no accounting);
    ``faults``: from the store (None: no store); ``progress``: the job's progress files, read
    only for an allocation that no run record describes."""
    runs = [r for r in (run_from_record(x) for x in records) if r is not None]
    notes = list(notes)
    user = partition = state = ""
    allocs: list[Allocation] = []
    node_fail: list[Fault] = []
    if acct is not None:
        for a in acct:
            if a.start is None:
                continue
            end = a.end if a.end is not None else None
            if end is None:
                notes.append(f"allocation at {a.start:.0f} has not ended: left out")
                continue
            allocs.append(Allocation(a.start, end, expand_nodes(a.nodes), a.gpus, a.state))
            user, partition, state = a.user or user, a.partition or partition, a.state
    else:
        # No accounting: each wrapper run stands for its allocation (nodes unknown beyond the
        # batch host).
        for r, x in zip(runs, [x for x in records if run_from_record(x) is not None], strict=True):
            end = r.ended if r.ended is not None else (r.last_step[0] if r.last_step else None)
            if end is not None and end > r.started:
                from slurmguard.nodeset import is_node_name

                node = x.get("node")  # the batch host; a record is the user's file: checked
                allocs.append(Allocation(r.started, end, (node,) if is_node_name(node) else (),
                                         0, ""))
        state = runs[-1].verdict if runs else ""
    if acct is not None and progress:
        from slurmguard.goodput.account import match_runs

        for i, (a, r) in enumerate(zip(allocs, match_runs(allocs, runs), strict=True)):
            if r is None and (got := run_from_progress(progress, a.start, a.end, i)) is not None:
                runs.append(got)
                notes.append(f"allocation at {a.start:.0f}: no wrapper record (its batch node "
                             "died with it?): steps read from the progress file, resume step "
                             "guessed from the first step reported")
    return JobInputs(job_id=job_id, allocations=tuple(allocs), runs=tuple(runs),
                     faults=tuple(faults or ()) + tuple(node_fail), user=user,
                     partition=partition, state=state, accounting=acct is not None,
                     store=faults is not None, notes=tuple(notes))
