"""`slurmguard burnin submit|worker|report`: nightly fleet burn-in (docs/burnin.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from slurmguard.cli._common import load_config, open_store, parse_since, slurm_of, warn
from slurmguard.output import Result, Table, emit
from slurmguard.wouldledger import watch_withheld

if TYPE_CHECKING:
    from slurmguard.config import Config


@click.group("burnin")
def burnin_grp() -> None:
    """Nightly fleet burn-in: measure nodes under load, find stragglers, keep them out.

    \b
    Example:
      slurmguard burnin submit --idle              # one exclusive job per idle node
      slurmguard burnin report --since 1d          # stragglers per group, per metric
      slurmguard burnin report --apply             # drain failed/slow nodes, return passed ones
    """




@burnin_grp.command("submit")
@click.argument("nodeset", required=False)
@click.option("--idle", is_flag=True, help="Every node idle now, plus drained nodes awaiting burn-in.")
@click.option("--reservation", metavar="R", help="Submit into this reservation (burnin.reservation).")
@click.option("--level", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: burnin.quick_seconds per load, dcgmi -r 1; full: full_seconds, -r 3.")
@click.option("--wait", "do_wait", is_flag=True,
              help="Wait for the jobs to end (at most burnin.wait_timeout seconds).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def submit_cmd(ctx: click.Context, nodeset: str | None, idle: bool, reservation: str | None,
               level: str, do_wait: bool, as_json: bool) -> int:
    """Submit one exclusive burn-in job per node (sbatch --nodelist --exclusive).

    Jobs run with burnin.nice (and burnin.partition/qos) so production wins; they are not
    requeued: a cancelled or preempted one is recorded as partial, never as a failure. Nodes
    awaiting burn-in go first; those drained by slurmguard are opened inside a MAINT
    reservation of their own (docs/burnin.md). Exit 7 when some node was skipped.

    \b
    Example:
      slurmguard burnin submit --idle
      slurmguard burnin submit 'gpu[001-016]' --level full --json
      slurmguard burnin submit --idle --wait && slurmguard burnin report --apply
    """
    from slurmguard.burnin import submit as sm
    from slurmguard.burnin.bar import bar
    from slurmguard.errors import EXIT_OK, EXIT_REFUSED, InputError

    if bool(nodeset) == bool(idle):
        raise InputError("burnin submit: give a NODESET or --idle (not both)")
    nodes = None
    if nodeset:
        from slurmguard.nodeset import expand

        nodes = expand(nodeset)
    if reservation:
        from slurmguard.adapters.slurm.burnin import validate_reservation

        validate_reservation(reservation)
    cfg = load_config(ctx)
    store = open_store(cfg)
    slurm = slurm_of(cfg)
    watch_withheld(slurm, store, "burnin")  # observe mode: what was withheld, to the ledger
    root = ctx.find_root().obj or {}
    done = sm.submit(cfg, store, slurm, nodes, level=level, reservation=reservation,
                     config_path=root.get("config_path"),
                     progress=lambda xs: bar(xs, total=len(xs), desc="sbatch"))
    left: list[int] = []
    if do_wait:
        left = sm.wait(cfg, store, slurm, [d.run_id for d in done if d.run_id is not None],
                       float(cfg["burnin.wait_timeout"]))
    emit(Result({"submitted": [d.to_dict() for d in done], "still_running": left},
                [Table([[d.node, d.job_id or "-", d.reservation or "-", d.note] for d in done],
                       ["node", "job", "reservation", "note"])]), as_json)
    if left and not as_json:
        warn(f"{len(left)} burn-in run(s) still running after burnin.wait_timeout")
    return EXIT_REFUSED if any(d.job_id is None and not d.observed for d in done) else EXIT_OK


@burnin_grp.command("worker")
@click.option("--level", type=click.Choice(["quick", "full"]), default="quick", show_default=True)
@click.option("--node", "node_flag", metavar="NODE",
              help="Node name when not in a Slurm job ($SLURMD_NODENAME wins).")
@click.pass_context
def worker_cmd(ctx: click.Context, level: str, node_flag: str | None) -> int:
    """The burn-in job's body: health checks, measurements, health checks (on the node).

    Each measurement runs in a child process with burnin.measurement_timeout; values go to
    the store as each ends. Exit 0 complete, 1 failed (a health check or a hard
    measurement failure), 3 refused at start (a GPU load needs torch and the node has only
    cupy; recorded as partial), 143 cut short by SIGTERM (recorded as partial).

    \b
    Example:
      sbatch --nodelist=gpu017 --exclusive --wrap 'slurmguard burnin worker'
      slurmguard burnin worker --node gpu017 --level full     # by hand, outside Slurm
    """
    from slurmguard.burnin.worker import main_entry

    if node_flag:
        from slurmguard.nodeset import validate_node_name

        validate_node_name(node_flag)
    return main_entry(load_config(ctx), node_flag, level)


@burnin_grp.command("report")
@click.option("--since", default="7d", show_default=True, metavar="WHEN",
              help="Each node's latest run since then: 36h, 7d or an ISO time.")
@click.option("--node", "node", metavar="NODE", help="Only this node (all its metrics).")
@click.option("--metric", "metric", metavar="METRIC", help="Only this metric.")
@click.option("--plot", "plot", metavar="FILE.png", type=click.Path(dir_okay=False),
              help="Write a PNG: each metric's distribution with flagged nodes marked "
                   "(with --node: that node's history). Needs the plot extra (matplotlib).")
@click.option("--apply", "do_apply", is_flag=True,
              help="Act on the verdicts: drain failed/flagged nodes (blast-radius guard), "
                   "leave suspects in service for their re-run (burnin submit takes them "
                   "first), return passed nodes awaiting burn-in, record partial runs.")
@click.option("--all", "show_all", is_flag=True,
              help="List every node (default: only nodes that did not pass, and the counts).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (every node).")
@click.pass_context
def report_cmd(ctx: click.Context, since: str, node: str | None, metric: str | None,
               plot: str | None, do_apply: bool, show_all: bool, as_json: bool) -> None:
    """Judge each node's latest burn-in against its comparison group.

    Per group (same GPU model and count, a Slurm feature, or a configured NodeSet) and
    metric: median and MAD; a node's score is its value over the median (inverted where
    lower is better); out of bounds below burnin.threshold (0.90) or beyond the robust z
    limit. Flagged (drained by --apply) when corroborated: on 2 metrics, clearly, or again on
    a suspect's re-run; one metric out on one run makes a suspect, re-run first by `burnin
    submit`. Groups smaller than burnin.min_group give no verdict. Without --apply nothing
    changes.

    \b
    Example:
      slurmguard burnin report                 # groups, counts, nodes that did not pass
      slurmguard burnin report --all
      slurmguard burnin report --metric host_cpu_gflops --plot cpu.png
      slurmguard burnin report --node gpu017 --plot gpu017.png
      slurmguard burnin report --apply --json
    """
    from slurmguard.burnin import apply as ap
    from slurmguard.burnin.bar import bar
    from slurmguard.burnin.render import ReportView
    from slurmguard.nodeset import validate_node_name

    if node:
        validate_node_name(node)
    cfg = load_config(ctx)
    store = _report_store(cfg, read_only=not do_apply and not (plot and node))
    start = parse_since(since)
    slurm = _slurm_if_up(cfg, needed=do_apply)
    if do_apply:
        watch_withheld(slurm, store, "burnin")  # observe mode: what was withheld, to the ledger
    report, runs = ap.build(cfg, store, start, slurm=slurm, mark_vanished=do_apply)
    outcomes = ap.apply(cfg, store, report, runs, slurm) if do_apply else []
    verdicts = [v for v in bar(report.nodes.values(), total=len(report.nodes), desc="nodes")
                if node is None or v.node == node]
    if metric is not None:
        verdicts = [v for v in verdicts if any(j.metric == metric for j in v.judgements)
                    or v.verdict in ("failed", "partial", "pending")]
    view = ReportView(report, verdicts, start, node=node, metric=metric, outcomes=outcomes,
                      plot=plot, show_all=show_all)
    if plot:
        from slurmguard.burnin.plot import plot_history, plot_report

        if node:
            plot_history(store, node, metric, plot, start)
        else:
            plot_report(report, plot, metric)
    emit(view, as_json)


def _report_store(cfg: Config, read_only: bool) -> Any:
    """Reading only (no --apply, no history plot) from SQLite: the stdlib reader, without
    importing SQLAlchemy (~0.5 s; docs/burnin.md, "Report at fleet scale")."""
    if read_only:
        from slurmguard.store.burnin_read import SqliteBurninReader

        reader = SqliteBurninReader.open(cfg.section("store"))
        if reader is not None:
            return reader
    return open_store(cfg)


def _slurm_if_up(cfg: Config, needed: bool) -> Any:
    """Slurm, or None when it does not answer (the report works from the store alone)."""
    slurm = slurm_of(cfg)
    if slurm.ping():
        return slurm
    warn("warning: Slurm unavailable (scontrol ping); open runs shown as they are")
    if needed:
        from slurmguard.errors import SlurmguardError

        raise SlurmguardError("burnin report --apply: Slurm is needed to act on the verdicts")
    return None
