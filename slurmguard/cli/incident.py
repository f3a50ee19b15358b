"""`slurmguard incident list|show`: every fault from its first bad signal to the node's
return, with its cost in GPU-hours (thin over slurmguard.fleet.incidents; docs/incidents.md)."""

from __future__ import annotations

import time
from typing import Any

import click

from slurmguard.cli._common import iso, load_config, open_store, parse_since, slurm_of, warn
from slurmguard.output import Result, emit

# goodput's stored parts are floats; its JSON rounds GPU-hours to 4 decimals: the sums of
# both sides agree to this per job (docs/incidents.md, "Agreement with goodput").
TOLERANCE_GPU_H_PER_JOB = 1e-4


def _load(cfg: Any, store: Any, since: float, until: float) -> Any:
    from slurmguard.store.incidents import load

    expected = int(cfg["checks.gpu.expected_count"])
    return load(store, since=since, until=until,
                drain_window=float(cfg["goodput.drain_window"]),
                blast_window=float(cfg["policy.blast_window"]),
                gpus_per_node=expected if expected > 0 else None)


@click.group("incident")
def incident_grp() -> None:
    """Incidents: each fault from its first bad signal to the node's return, and what it cost
    in GPU-hours (docs/incidents.md).

    \b
    Example:
      slurmguard incident list --since 7d
      slurmguard incident show n17-1796812345 --plot n17.png
    """


@incident_grp.command("list")
@click.option("--since", default="7d", show_default=True, metavar="WHEN",
              help="Incidents whose first signal is since: 12h, 7d, 4w or an ISO time.")
@click.option("--until", metavar="WHEN", help="End of the window (default: now).")
@click.option("--cause", "causes", multiple=True, metavar="CAUSE",
              help="Only this cause (gpu-xid:79, ib-link, admin, ...; gpu-xid matches every "
                   "gpu-xid:N; repeatable).")
@click.option("--collect", is_flag=True,
              help="First account the jobs that ended in the window and are not stored yet "
                   "(as `goodput --collect`: sacct + wrapper records + store).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(ctx: click.Context, since: str, until: str | None, causes: tuple[str, ...],
             collect: bool, as_json: bool) -> int:
    """Incidents of the window (one node episode, or one shared cause with its episodes) with
    their cost in GPU-hours: work redone, time to detect (jobs stuck on the failing node),
    jobs waiting to run again, the node out of service; summed by cause and by week, beside
    goodput's badput of the jobs that ended in the window.

    \b
    Example:
      slurmguard incident list
      slurmguard incident list --since 30d --cause gpu-xid --json
    """
    from slurmguard.errors import InputError

    cfg = load_config(ctx)
    t_until = time.time() if until is None else parse_since(until)
    t_since = parse_since(since, now=t_until if until else None)
    if t_since >= t_until:
        raise InputError(f"--since: {iso(t_since)} is not before --until {iso(t_until)}")
    store = open_store(cfg)
    try:
        if collect:
            from slurmguard.goodput.report import collect as do_collect

            found = do_collect(cfg.section("goodput"), since=t_since, runs=(), store=store,
                               slurm=slurm_of(cfg), skip_collected=True)
            n = store.goodput.record([b.to_dict() for b in found])
            warn(f"incident: accounted {n} job(s) newly ended since {iso(t_since)}")
        got = _load(cfg, store, t_since, t_until)
        # goodput's own fleet totals of the jobs that ended in the window: the badput to explain
        gp = dict(store.goodput.totals(since=t_since, until=t_until)).get("fleet", {})
    finally:
        store.close()
    incs = [i for i in got.incidents
            if not causes or i.cause in causes or i.cause.split(":")[0] in causes]
    emit(_list_result(incs, got.window_jobs, gp, t_since, t_until), as_json)
    return 0


def _gpu_h(row: dict[str, float]) -> dict[str, float]:
    from slurmguard.fleet.incidents import COSTS

    out = {k: round(row[k] / 3600, 4) for k in COSTS}
    out["total"] = round(sum(row[k] for k in COSTS) / 3600, 4)
    if "incidents" in row:
        out["incidents"] = int(row["incidents"])
    return out


def _list_result(incs: list[Any], window_jobs: set[str], gp: dict[str, Any], since: float,
                 until: float) -> Result:
    from slurmguard.cli.incident_text import list_text
    from slurmguard.fleet import incidents

    by_cause, by_week = incidents.sums(incs, "cause"), incidents.sums(incs, "week")
    total = {k: sum(i.cost.get(k, 0.0) for i in incs) for k in incidents.COSTS}
    badput = sum(v for k, v in (gp.get("gpu_hours") or {}).items() if k != "productive")
    explained = incidents.explained_by(incs, window_jobs) / 3600
    jobs = int(gp.get("jobs") or 0)
    doc = {"since": iso(since), "until": iso(until),
           "incidents": [i.to_dict(timeline=False) for i in incs],
           "by_cause": {k: _gpu_h(v) for k, v in by_cause.items()},
           "by_week": {k: _gpu_h(v) for k, v in by_week.items()},
           "total_gpu_hours": _gpu_h(total),
           "goodput": {"jobs": jobs, "badput_gpu_hours": round(badput, 4),
                       "explained_gpu_hours": round(explained, 4),
                       "no_incident_gpu_hours": round(badput - explained, 4),
                       "tolerance_gpu_hours": round(TOLERANCE_GPU_H_PER_JOB * jobs, 6)}}
    return Result(doc, list_text(doc, incs, by_cause, by_week))


@incident_grp.command("show")
@click.argument("incident_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Also draw the timeline: a lane for the node, one per job (the `plot` extra).")
@click.pass_context
def show_cmd(ctx: click.Context, incident_id: str, as_json: bool, plot_path: str | None) -> int:
    """One incident's timeline, each step with its time and source (the store's runs and
    ledger, Slurm accounting, the job wrapper's reports): the first bad signal, the drain and
    who drained, every job the fault ended (its drain notice, checkpoint-now save, steps to
    redo, wait, and where it ran again), repair's rungs, proof and verification, the return
    or the ticket, probation; and its cost in GPU-hours. An unknown ID: exit 6.

    \b
    Example:
      slurmguard incident show n17-1796812345
      slurmguard incident show shared-fs-mount-1796812345 --json
    """
    from slurmguard.errors import InputError

    drained = _drained_at(incident_id)
    cfg = load_config(ctx)
    store = open_store(cfg)
    try:
        # The first signal is at most a day before the drain (the episode rule's lookback).
        got = _load(cfg, store, drained - 2 * 86400.0, time.time())
    finally:
        store.close()
    inc = next((i for i in got.incidents if i.id == incident_id), None)
    if inc is None:
        raise InputError(f"incident: no incident {incident_id!r} in the store "
                         "(`slurmguard incident list` shows the IDs)")
    from slurmguard.cli.incident_text import plot, show_text

    emit(Result(inc.to_dict(), show_text(inc)), as_json)
    if plot_path:
        plot(inc, plot_path)
        if not as_json:
            click.echo(f"plot: {plot_path}")
    return 0


def _drained_at(incident_id: str) -> float:
    """The drain time an ID ends with (``NODE-EPOCH``, ``shared-CAUSE-EPOCH``)."""
    from slurmguard.errors import InputError

    head, _, tail = incident_id.rpartition("-")
    if not head or not tail.isdigit():
        raise InputError(f"ID: expected NODE-EPOCH or shared-CAUSE-EPOCH (as `incident list` "
                         f"prints), got {incident_id!r}")
    return float(tail)
