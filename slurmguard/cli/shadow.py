"""`slurmguard shadow report`: observe mode's would-events against what happened in Slurm
(thin over slurmguard.shadow.report; docs/policy.md "Observe mode", docs/install.md
"Rollout: observe, compare, act")."""

from __future__ import annotations

import time
from typing import Any

import click

from slurmguard.cli._common import iso, load_config, open_store, parse_since, warn
from slurmguard.output import Block, Result, Table, emit

_KINDS = ["would_drain", "would_drain_refused", "would_end"]


@click.group("shadow")
def shadow_grp() -> None:
    """What observe mode would have done, against the checks a site already runs.

    \b
    Example:
      slurmguard shadow report --since 7d
    """


def _incumbent(cfg: Any, store: Any, slurm: Any, since: float, until: float,
               source: str) -> tuple[list[Any], str]:
    """The incumbent's out-of-service spans: Slurm accounting's node events where it answers
    (``source`` auto or accounting), else serve's node-state history."""
    from slurmguard.contract import REASON_PREFIX
    from slurmguard.errors import SlurmguardError
    from slurmguard.shadow.report import OutEvent, out_events

    if source in ("auto", "accounting"):
        try:
            evs = slurm.node_events(since, until)
            return ([OutEvent(e.node, e.start, e.end, e.reason, e.user) for e in evs
                     if not e.reason.startswith(REASON_PREFIX)], "sacctmgr show event")
        except SlurmguardError as exc:
            if source == "accounting":
                raise
            warn(f"shadow report: no Slurm accounting ({exc.message}); using serve's node-state "
                 "history")
    rows = store.nodes.events(since=since - 30 * 86400.0, kinds=["state_change"], limit=1_000_000)
    spans = [e for e in out_events(r for r in rows if r.actor_kind == "slurm")
             if (e.end is None or e.end >= since) and e.start <= until]
    return spans, "serve's node-state history"


def _jobs(slurm: Any, since: float, until: float) -> tuple[list[Any], str]:
    from slurmguard.errors import SlurmguardError
    from slurmguard.nodeset import expand
    from slurmguard.shadow.report import JobRun

    try:
        recs = slurm.accounting(since=since, until=until)
    except SlurmguardError as exc:
        warn(f"shadow report: no job accounting ({exc.message}); GPU-hours not counted")
        return [], f"none ({exc.message})"
    runs = []
    for r in recs:
        if r.start is None or not r.nodes or r.nodes in ("None assigned", "(null)"):
            continue
        nodes = expand(r.nodes, allow_empty=True)
        per = r.gpus / max(1, r.node_count or len(nodes))
        runs += [JobRun(r.job_id, n, r.start, r.end, r.state.split()[0], per) for n in nodes]
    return runs, "sacct"


def _sightings(store: Any, rows: list[dict[str, Any]], window: float) -> list[tuple[str, str, float]]:
    """(node, check, when) of slurmguard's failing results of the check each only-incumbent
    row names, on its node, from ``window`` before it (the store's node history)."""
    from slurmguard.shadow.report import NO_CHECK

    out = []
    for r in rows:
        if r["check"] == NO_CHECK:
            continue
        for item in store.nodes.history(r["node"], since=r["at"] - window, limit=10_000):
            if item.kind == "result" and r["check"] in item.checks:
                out.append((r["node"], r["check"], item.at))
    return out


@shadow_grp.command("report")
@click.option("--since", default="7d", show_default=True, metavar="WHEN",
              help="Start of the window: 7d, 12h or an ISO time.")
@click.option("--until", metavar="WHEN", help="End of the window (default: now).")
@click.option("--match-window", default="1h", show_default=True, metavar="DURATION",
              help="Two sightings on one node this close (or overlapping) are one fault.")
@click.option("--incumbent", type=click.Choice(["auto", "accounting", "history"]), default="auto",
              show_default=True, help="Where the incumbent's drains come from: Slurm accounting "
                                       "(sacctmgr show event), serve's node-state history, or the "
                                       "first that answers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Also draw each node's would-episodes and the incumbent's drains (the `plot` "
                   "extra).")
@click.pass_context
def report_cmd(ctx: click.Context, since: str, until: str | None, match_window: str,
               incumbent: str, as_json: bool, plot_path: str | None) -> None:
    """Join the would-events of observe mode with what happened to each node in Slurm.

    Per node and cause: caught by both (slurmguard's lead or lag; a second fault on a node
    slurmguard would have had out already, seen by its check, says `within`), only by
    slurmguard (the GPU-hours of the jobs that ran there meanwhile and how they ended), only
    by the incumbent (NHC, admins, Slurm: with the check that would have seen it), and
    would-have-been-false (every job there completed, nobody drained it). The summary
    first: what acting would have saved and cost, in GPU-hours and nodes out.

    \b
    Example:
      slurmguard shadow report --since 7d
      slurmguard shadow report --since 14d --json | jq .summary
      slurmguard shadow report --plot shadow.png
    """
    from slurmguard.adapters.slurm.commands import SlurmCLI
    from slurmguard.shadow.report import build, would_episodes

    cfg = load_config(ctx)
    now = time.time()
    t0 = parse_since(since, now)
    t1 = parse_since(until, now) if until else now
    window = now - parse_since(match_window, now)
    store = open_store(cfg)
    slurm = SlurmCLI.from_config(cfg)
    would = [w for w in would_episodes(store.nodes.events(since=t0, kinds=_KINDS, limit=1_000_000))
             if w.start <= t1]
    spans, where = _incumbent(cfg, store, slurm, t0, t1, incumbent)
    jobs, jobs_from = _jobs(slurm, t0, t1)
    rep = build(would, spans, jobs, since=t0, until=t1, match_window=window)
    seen = _sightings(store, rep.only_incumbent, window)
    if seen:  # a second fault on a node already in a would-episode: slurmguard's check saw it
        rep = build(would, spans, jobs, since=t0, until=t1, match_window=window, sightings=seen)
    data = {**rep.to_dict(), "incumbent_from": where, "jobs_from": jobs_from}
    if plot_path:
        from slurmguard.shadow.plot import draw

        draw(rep, would, spans, plot_path)
    emit(Result(data, _text(rep, where)), as_json)


def _text(rep: Any, where: str) -> list[Block]:
    s = rep.summary
    lead = "-" if s["median_lead_s"] is None else f"{s['median_lead_s'] / 60:+.1f} min"
    out: list[Block] = [
        f"shadow report {iso(rep.since)} .. {iso(rep.until)} (incumbent: {where})",
        f"acting would have saved {s['saved_gpu_hours']:g} GPU-hours and cost "
        f"{s['cost_gpu_hours']:g}; nodes out: {s['nodes_out']} "
        f"({s['nodes_out_false']} of them false); median lead over the incumbent: {lead}",
        f"caught by both {s['both']}, only slurmguard {s['only_slurmguard']}, only the "
        f"incumbent {s['only_incumbent']}, would have been false {s['would_have_been_false']}", ""]
    out += ["caught by both", Table(
        [[r["node"], r["cause"], iso(r["at"]), f"{r['lead_s'] / 60:+.1f} min",
          r["incumbent_reason"][:50]] for r in rep.both],
        ["node", "cause", "slurmguard", "lead", "incumbent's reason"]), ""]
    out += ["only slurmguard", Table(
        [[r["node"], r["cause"], iso(r["at"]), r["gpu_hours"],
          ", ".join(f"{k} {v}" for k, v in r["ended"].items()) or "no job"]
         for r in rep.only_slurmguard], ["node", "cause", "since", "GPU-h", "jobs ended"]), ""]
    out += ["only the incumbent", Table(
        [[r["node"], iso(r["at"]), r["by"] or "-", r["reason"][:50], r["check"]]
         for r in rep.only_incumbent], ["node", "at", "by", "reason", "slurmguard check"]), ""]
    out += ["would have been false", Table(
        [[r["node"], r["cause"], iso(r["at"]), len(r["jobs"]), r["gpu_hours"]] for r in rep.false],
        ["node", "cause", "since", "jobs completed", "GPU-h"])]
    return out
