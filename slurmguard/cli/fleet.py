"""`slurmguard fleet report` and `slurmguard policy replay` (thin over slurmguard.fleet)."""

from __future__ import annotations

import time
from typing import Any

import click

from slurmguard.cli._common import iso, load_config, parse_since, warn
from slurmguard.output import Result, emit

DAY = 86400.0


def _open(cfg: Any) -> Any:
    from slurmguard.store import Store

    return Store.open(cfg)


def _partitions(cfg: Any) -> dict[str, tuple[str, ...]]:
    from slurmguard.adapters.slurm.commands import SlurmCLI

    return {i.name: i.partitions for i in SlurmCLI.from_config(cfg).nodes()}


def _replay_partitions(cfg: Any) -> dict[str, tuple[str, ...]]:
    """Slurm's partitions for replay's blast-radius scopes (the store does not hold them);
    when Slurm cannot be asked, none, said on stderr: partition caps are then not replayed."""
    from slurmguard.errors import SlurmguardError

    try:
        return _partitions(cfg)
    except SlurmguardError as exc:
        warn(f"policy replay: no partitions from Slurm ({exc}); the blast radius is replayed "
             "for the fleet and policy.groups only")
        return {}


@click.group("fleet")
def fleet_grp() -> None:
    """Fleet reliability figures and node risk from the store (docs/fleet.md).

    \b
    Example:
      slurmguard fleet report --since 30d --by group
      slurmguard fleet risk --curve --since 90d
    """


@fleet_grp.command("report")
@click.option("--since", default="30d", show_default=True, metavar="WHEN",
              help="Start of the window: 7d, 12w or an ISO time.")
@click.option("--until", metavar="WHEN", help="End of the window (default: now).")
@click.option("--by", type=click.Choice(["cause", "group", "partition", "model"]), default="cause",
              show_default=True, help="Also split failures per policy group, Slurm partition or "
                                       "GPU model ([fleet.models]).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Also draw out-of-service share and failures by cause (the `plot` extra).")
@click.pass_context
def report_cmd(ctx: click.Context, since: str, until: str | None, by: str, as_json: bool,
               plot_path: str | None) -> int:
    """Failures per 1,000 node-days (by cause, and per group, partition or GPU model), time
    between failures, time from drain to return (by cause and by who returned the node), and
    the share of nodes out of service. One failure is one drain episode of one node; a shared
    cause stopped by the blast-radius guard is one incident, not N failures (docs/fleet.md).

    \b
    Example:
      slurmguard fleet report
      slurmguard fleet report --since 90d --by model --json
      slurmguard fleet report --since 2026-01-01 --until 2026-04-01 --plot fleet.png
    """
    from slurmguard.cli.fleet_text import node_key, plot, report_text
    from slurmguard.errors import InputError
    from slurmguard.fleet import episodes, figures
    from slurmguard.store.fleet import load_history

    cfg = load_config(ctx)
    t_until = time.time() if until is None else parse_since(until)
    t_since = parse_since(since, now=t_until if until else None)
    if t_since >= t_until:
        raise InputError(f"--since: {iso(t_since)} is not before --until {iso(t_until)}")
    key = node_key(by, groups=cfg.section("policy")["groups"], models=cfg.section("fleet")["models"],
                   partitions=_partitions(cfg) if by == "partition" else {})
    store = _open(cfg)
    try:
        # A month before the window: nodes drained before it and still out count as out.
        h = load_history(store.engine, since=t_since, until=t_until, lookback=30 * DAY,
                         healthy=False)
    finally:
        store.close()
    eps = episodes.build(h, blast_window=cfg.section("policy")["blast_window"])
    rep = figures.report(eps, h.alerts, h.first_seen, t_since, t_until, key=key, by=by)
    emit(Result({**rep, "since": iso(t_since), "until": iso(t_until)}, [report_text(rep)]),
         as_json)
    if plot_path:
        plot(rep, plot_path)
        if not as_json:
            click.echo(f"plot: {plot_path}")
    return 0


@fleet_grp.command("risk")
@click.option("--curve", is_flag=True,
              help="Precision, recall and lead at each level on the site's own history.")
@click.option("--since", default="30d", show_default=True, metavar="WHEN",
              help="With --curve: start of the window judged (7d, 12w or an ISO time).")
@click.option("--until", metavar="WHEN", help="With --curve: end of the window (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def risk_cmd(ctx: click.Context, curve: bool, since: str, until: str | None, as_json: bool) -> int:
    """The nodes at risk now (score >= risk.level) and why; with --curve, how each level
    would have done on the site's own history: every node scored once a day over the
    window, each level's flags counted against the failures that followed with the one
    scorer (true: the node failed within risk.horizon_days; docs/fleet.md, "Choosing the
    level"). Reads the store, writes nothing.

    \b
    Example:
      slurmguard fleet risk
      slurmguard fleet risk --curve --since 90d
      slurmguard fleet risk --curve --since 2026-01-01 --until 2026-04-01 --json
    """
    from slurmguard.cli.fleet_text import at_risk_text, curve_text
    from slurmguard.errors import InputError
    from slurmguard.fleet import episodes
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store.fleet import load_history, node_risks

    cfg = load_config(ctx)
    rp = RiskParams.from_section(cfg.section("risk"))
    if not curve:
        store = _open(cfg)
        try:
            risks = node_risks(store.engine, rp)
        finally:
            store.close()
        emit(Result({"level": rp.level, "nodes": {n: {"risk": r.score, "why": r.why()}
                                                  for n, r in sorted(risks.items())
                                                  if r.score >= rp.level}},
                    [at_risk_text(risks, rp.level)]), as_json)
        return 0
    from slurmguard.fleet.curve import curve as risk_curve

    t_until = time.time() if until is None else parse_since(until)
    t_since = parse_since(since, now=t_until if until else None)
    if t_since >= t_until:
        raise InputError(f"--since: {iso(t_since)} is not before --until {iso(t_until)}")
    store = _open(cfg)
    try:
        h = load_history(store.engine, since=t_since, until=t_until,
                         lookback=max(rp.lookback_days * DAY, episodes.LOOKBACK), healthy=False)
    finally:
        store.close()
    eps = episodes.build(h, blast_window=cfg.section("policy")["blast_window"])
    c = risk_curve(h, eps, rp)
    emit(Result({**c, "since": iso(t_since), "until": iso(t_until)}, [curve_text(c)]), as_json)
    return 0


@click.group("policy")
def policy_grp() -> None:
    """Check fleet policy against the fleet's own history (docs/fleet.md).

    \b
    Example:
      slurmguard policy replay --since 30d --config candidate.toml
    """


@policy_grp.command("replay")
@click.option("--since", default="30d", show_default=True, metavar="WHEN",
              help="Start of the window replayed: 7d, 30d or an ISO time.")
@click.option("--until", metavar="WHEN", help="End of the window (default: now).")
@click.option("--config", "candidate", metavar="PATH", type=click.Path(dir_okay=False),
              help="A candidate config: replay it beside the current one and show both.")
@click.option("--count", type=click.Choice(["runs", "episodes"]), default="runs",
              show_default=True, help="Feed the lemon rule every failing run as recorded, or "
                                      "one per episode (docs/fleet.md, 'Counting rules').")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def replay_cmd(ctx: click.Context, since: str, until: str | None, candidate: str | None,
               count: str, as_json: bool) -> int:
    """Run the recorded history through the policy code (lemon, blast radius, probation, node
    risk, and repair in observe form) with the current config, and a candidate one, and report
    what each would have done: lemons, node-hours kept out, drains, refusals, alerts,
    probation, repairs (first rungs, held, stopped as lemons, returns that came back); and for
    the lemon rule and the risk level, precision and recall against what happened next (a
    flagged node that failed again within risk.horizon_days is a hit). Reads the store,
    writes nothing.

    \b
    Example:
      slurmguard policy replay --since 30d
      slurmguard policy replay --since 30d --config candidate.toml --json
    """
    from slurmguard import config
    from slurmguard.cli.fleet_text import replay_text
    from slurmguard.errors import InputError
    from slurmguard.fleet import episodes
    from slurmguard.fleet.params import RiskParams
    from slurmguard.fleet.replay import replay
    from slurmguard.policy.params import PolicyParams
    from slurmguard.policy.repair_params import RepairParams, available_rungs
    from slurmguard.store.fleet import load_history

    cfg = load_config(ctx)
    cfgs = {"current": cfg}
    if candidate:
        cfgs["candidate"] = config.load(candidate)
    t_until = time.time() if until is None else parse_since(until)
    t_since = parse_since(since, now=t_until if until else None)
    if t_since >= t_until:
        raise InputError(f"--since: {iso(t_since)} is not before --until {iso(t_until)}")
    params = {n: (PolicyParams.from_section(c.section("policy")), RiskParams.from_section(c.section("risk")))
              for n, c in cfgs.items()}
    lookback = max(max(p.window, rp.lookback_days * DAY, episodes.LOOKBACK) for p, rp in params.values())
    started = time.monotonic()
    store = _open(cfg)
    try:
        h = load_history(store.engine, since=t_since, until=t_until, lookback=lookback)
    finally:
        store.close()
    h.partitions = _replay_partitions(cfg)
    eps = episodes.build(h, blast_window=params["current"][0].blast_window)
    out = {n: replay(h, p, rp, count=count, eps=eps,
                     repair=RepairParams.from_section(cfgs[n].section("repair")),
                     available=available_rungs(cfgs[n].section("repair")))
           for n, (p, rp) in params.items()}
    warn(f"policy replay: {len(h.first_seen)} nodes, {iso(t_since)} .. {iso(t_until)} in "
         f"{time.monotonic() - started:.1f} s")
    emit(Result({n: {**r, "since": iso(r["since"]), "until": iso(r["until"])}
                 for n, r in out.items()}, [replay_text(out)]), as_json)
    return 0
