"""Collect goodput breakdowns from the sources, and render reports (table, JSON, plot).

    from slurmguard.goodput.report import collect
    breakdowns = collect(cfg, job_ids=["1234"], store=store, slurm=SlurmCLI(...))

Missing sources do not fail a report: each becomes a line in the breakdown's ``unknown``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurmguard.errors import SlurmguardError
from slurmguard.goodput import sources
from slurmguard.goodput.account import (
    CAUSES,
    PARTS,
    Breakdown,
    Fault,
    Params,
    account,
    infra_summary,
)
from slurmguard.output import iso, table


def params_of(section: Mapping[str, Any]) -> Params:
    return Params(drain_window=float(section.get("drain_window", 3600.0)),
                  straggler_factor=float(section.get("straggler_factor", 1.2)),
                  stall_factor=float(section.get("stall_factor", 5.0)))


def collect(section: Mapping[str, Any], *, job_ids: Sequence[str] | None = None,
            since: float | None = None, until: float | None = None,
            runs: Iterable[str] = (), store: Any = None, slurm: Any = None,
            skip_collected: bool = False) -> list[Breakdown]:
    """Breakdowns of the named jobs, or of the jobs that ended in [since, until].

    ``section``: the ``[goodput]`` config section. ``slurm``: a SlurmCLI (None: no
    accounting); ``store``: a Store (None: no drains known, nothing stored).
    """
    params = params_of(section)
    notes: list[str] = []
    acct = _accounting(slurm, job_ids, since, until, notes)
    patterns = [*runs, *section.get("run_dirs", [])]
    if acct is not None:
        for recs in acct.values():  # the job's working directory, too
            patterns += sorted({f"{r.workdir}" for r in recs if getattr(r, "workdir", "")})
    wanted = set(job_ids) if job_ids else None
    records = sources.read_runs(sources.runs_files(patterns), wanted)
    ids = _job_ids(job_ids, acct, records, since, until)
    if skip_collected and store is not None and ids:
        done = store.goodput.collected(ids)
        ids = [j for j in ids if j not in done]
    out = []
    for jid in ids:
        acct_recs = acct.get(jid, []) if acct is not None else None
        faults = None if store is None else _faults(store, acct_recs, records.get(jid, []),
                                                      params, notes)
        job_notes = list(notes)
        if jid not in records:
            job_notes.append("no wrapper records found for this job (searched: "
                             + (", ".join(patterns) or "nothing: give --runs DIR or "
                                "goodput.run_dirs") + ")")
        out.append(account(sources.job_inputs(
            jid, acct_recs, records.get(jid, []), faults, job_notes,
            progress=sources.progress_files(jid, records.get(jid, []))), params))
    return out


def _accounting(slurm: Any, job_ids: Sequence[str] | None, since: float | None,
                until: float | None, notes: list[str]) -> dict[str, list[Any]] | None:
    """sacct's records per job, or None (and why, in ``notes``) without accounting."""
    if slurm is None:
        notes.append("no Slurm accounting (not configured)")
        return None
    try:
        recs = slurm.accounting(list(job_ids) if job_ids else None, since=since, until=until)
    except SlurmguardError as exc:
        notes.append(f"no Slurm accounting ({exc.message})")
        return None
    acct: dict[str, list[Any]] = {}
    for r in recs:
        acct.setdefault(r.job_id, []).append(r)
    return acct


def _job_ids(job_ids: Sequence[str] | None, acct: Mapping[str, list[Any]] | None,
             records: Mapping[str, list[dict[str, Any]]], since: float | None,
             until: float | None) -> list[str]:
    """The jobs to account: those named, else those that ended in the window."""
    if job_ids:
        return list(dict.fromkeys(job_ids))
    if acct is not None:
        return [j for j, recs in acct.items()
                if all(r.end is not None for r in recs if r.start is not None)
                and any(r.start is not None for r in recs)]
    # no accounting: the jobs the wrapper recorded as ended in the window
    lo, hi = since or 0.0, until or time.time()
    return [j for j, recs in records.items()
            if any(isinstance(r.get("ended"), (int, float)) and lo <= r["ended"] <= hi
                   for r in recs)]


def _faults(store: Any, acct_recs: list[Any] | None, recs: list[dict[str, Any]], params: Params,
            notes: list[str]) -> list[Fault] | None:
    """The store's faults of the job's nodes over its time (None when the store fails: then
    ``notes`` says so, for this job and the ones after it)."""
    allocs = [r for r in acct_recs or [] if r.start is not None]
    nodes = sorted({n for r in allocs for n in sources.expand_nodes(r.nodes)})
    starts = [r.start for r in allocs] or [
        r["started"] for r in recs if isinstance(r.get("started"), (int, float))]
    ends = [r.end or time.time() for r in allocs] or [
        r["ended"] for r in recs if isinstance(r.get("ended"), (int, float))]
    if not nodes:
        nodes = sorted({str(r["node"]) for r in recs if r.get("node")})
    if not (starts and nodes):
        return []
    try:
        return [Fault(n, at, why) for n, at, why in store.goodput.node_faults(
            nodes, since=min(starts), until=max(ends) + params.drain_window)]
    except SlurmguardError as exc:
        notes.append(f"store unreadable ({exc.message})")
        return None


# ---------------------------------------------------------------------------------------------
# rendering


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.3f}"


def job_table(d: Mapping[str, Any]) -> str:
    wall = d["wall_s"] or 0.0
    rows = [[p, f"{d['parts'][p]:.1f}", f"{d['gpu_hours'][p]:.3f}",
             f"{100 * d['parts'][p] / wall:.1f}%" if wall else "-"] for p in PARTS]
    ettr = "-" if d.get("ettr") is None else f"{d['ettr']:.3f}"
    head = (f"job {d['job_id']} ({d.get('user') or '?'}, {d.get('partition') or '?'}, "
            f"{d.get('state') or '?'}): {wall:.1f}s allocated over {len(d.get('runs') or [])} "
            f"run(s), ETTR {ettr}, {d.get('steps_lost', 0)} step(s) lost")
    out = [head, table(rows, ["part", "seconds", "GPU-hours", "share"])]
    out.append(_infra_line(d.get("infra") or infra_summary(
        [r.get("infra") or {} for r in d.get("runs") or []])))
    for why in d.get("unknown") or []:
        out.append(f"unknown: {why}")
    return "\n".join(out)


def _infra_line(f: Mapping[str, Any]) -> str:
    """The job's infrastructure figures in one line (drain notices: docs/requeue.md)."""
    lat = ("" if f.get("notice_latency_median_s") is None else
           f", arrived in {f['notice_latency_median_s']:.1f}s median "
           f"({f['notice_latency_max_s']:.1f}s max)")
    return (f"infrastructure: {f.get('steps_redone', 0)} step(s) redone; "
            f"{f.get('notices', 0)} drain notice(s){lat}; "
            f"{f.get('checkpoint_now', 0)} checkpoint-now save(s), "
            f"{f.get('checkpoint_now_s', 0.0):.1f}s; "
            f"{f.get('runs_ended_by_notice', 0)} run(s) ended by a notice")


def fleet_table(groups: Sequence[tuple[str, Mapping[str, Any]]], by: str, since: float) -> str:
    if not groups:
        return (f"no jobs in the store that ended since {iso(since)} (collect them with "
                "`slurmguard goodput --collect`)")
    if by == "cause":
        _, t = groups[0]
        wall = t["wall_s"] or 0.0
        rows = [[p, _h(t["parts"][p]), f"{t['gpu_hours'][p]:.3f}",
                 f"{100 * t['parts'][p] / wall:.1f}%" if wall else "-"] for p in PARTS]
        ettr = "-" if t["ettr"] is None else f"{t['ettr']:.3f}"
        out = [f"{t['jobs']} job(s) ended since {iso(since)}: ETTR {ettr}, "
               f"{t['allocated_gpu_hours']:.3f} GPU-hours allocated, "
               f"{t['productive_gpu_hours']:.3f} productive",
               table(rows, ["part", "hours", "GPU-hours", "share"])]
        if t["jobs_with_unknown"]:
            out.append(f"{t['jobs_with_unknown']} job(s) have unknown parts: "
                       "`slurmguard goodput --job ID` says why")
        return "\n".join(out)
    rows = []
    for g, t in groups:
        bad = {c: t["parts"][c] for c in CAUSES}
        top = max(bad, key=lambda c: bad[c])
        rows.append([g or "-", t["jobs"], _h(t["wall_s"]), f"{t['allocated_gpu_hours']:.3f}",
                     f"{t['productive_gpu_hours']:.3f}",
                     "-" if t["ettr"] is None else f"{t['ettr']:.3f}",
                     f"{top} {_h(bad[top])}h" if bad[top] > 0 else "-", t["jobs_with_unknown"]])
    return table(rows, [by, "jobs", "hours", "GPU-h", "productive GPU-h", "ETTR",
                        "top badput", "unknown"])


def plot(series: Sequence[tuple[float, Mapping[str, float]]], path: str, title: str) -> None:
    """A stacked bar chart of badput hours by cause per bucket, written to ``path`` (PNG)."""
    from slurmguard.plotting import pyplot, save_png

    plt = pyplot()
    from datetime import UTC, datetime

    xs = [datetime.fromtimestamp(t, UTC) for t, _ in series]
    fig, ax = plt.subplots(figsize=(10, 5))
    bottom = [0.0] * len(series)
    for cause in CAUSES:
        ys = [v.get(cause, 0.0) / 3600 for _, v in series]
        if any(ys):
            ax.bar(xs, ys, bottom=bottom, label=cause, width=0.8)
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
    ax.set_ylabel("badput (hours of job wall time)")
    ax.set_title(title)
    if any(bottom):
        ax.legend(loc="upper left", fontsize="small")
    save_png(fig, path, dates=True)
