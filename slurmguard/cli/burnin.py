"""`slurmguard burnin submit|worker|report`: nightly fleet burn-in (docs/burnin.md)."""

from __future__ import annotations

import math
from typing import Any

import click

from slurmguard.cli._common import echo_json, iso, load_config, parse_since, table, warn


@click.group("burnin")
def burnin_grp() -> None:
    """Nightly fleet burn-in: measure nodes under load, find stragglers, keep them out.

    \b
    Example:
      slurmguard burnin submit --idle              # one exclusive job per idle node
      slurmguard burnin report --since 1d          # stragglers per group, per metric
      slurmguard burnin report --apply             # drain failed/slow nodes, return passed ones
    """


def _store(cfg: Any) -> Any:
    from slurmguard.store import Store

    return Store.open(cfg)


def _slurm(cfg: Any) -> Any:
    from slurmguard.adapters.slurm import SlurmCLI

    return SlurmCLI(cfg.section("slurm"))


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return fmt.format(x)


def _node_json(v: Any, units: dict[str, str], metric: str | None) -> dict[str, Any]:
    return {"node": v.node, "group": v.group, "run_id": v.run_id, "status": v.status,
            "verdict": v.verdict, "reason": v.reason, "why": v.why, "metric": v.metric,
            "degrading": list(v.degrading),
            "scores": {m: list(s) for m, s in v.scores.items()},
            "metrics": [{"metric": j.metric, "value": j.value, "unit": units.get(j.metric, ""),
                         "score": None if j.score is None or math.isinf(j.score) else j.score,
                         "z": j.z, "flagged": j.flagged, "why": j.why}
                        for j in v.judgements if metric is None or j.metric == metric]}


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
                   "return passed nodes awaiting burn-in, record partial runs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def report_cmd(ctx: click.Context, since: str, node: str | None, metric: str | None,
               plot: str | None, do_apply: bool, as_json: bool) -> None:
    """Judge each node's latest burn-in against its comparison group.

    Per group (same GPU model and count, a Slurm feature, or a configured NodeSet) and
    metric: median and MAD; a node's score is its value over the median (inverted where
    lower is better); flagged below burnin.threshold (0.90) or beyond the robust z limit.
    Groups smaller than burnin.min_group give no verdict. Without --apply nothing changes.

    \b
    Example:
      slurmguard burnin report
      slurmguard burnin report --metric host_cpu_gflops --plot cpu.png
      slurmguard burnin report --node gpu017 --plot gpu017.png
      slurmguard burnin report --apply --json
    """
    from slurmguard.burnin import apply as ap
    from slurmguard.burnin.progress import bar
    from slurmguard.nodeset import validate_node_name

    if node:
        validate_node_name(node)
    cfg = load_config(ctx)
    store = _store(cfg)
    start = parse_since(since)
    slurm = _slurm(cfg)
    if not slurm.ping():  # report works from the store alone
        warn("warning: Slurm unavailable (scontrol ping); open runs shown as they are")
        slurm = None
    if do_apply and slurm is None:
        from slurmguard.errors import SlurmguardError

        raise SlurmguardError("burnin report --apply: Slurm is needed to act on the verdicts")
    report, runs = ap.build(cfg, store, start, slurm=slurm, mark_vanished=do_apply)
    outcomes = ap.apply(cfg, store, report, runs, slurm) if do_apply else []
    verdicts = [v for v in bar(report.nodes.values(), total=len(report.nodes), desc="nodes")
                if node is None or v.node == node]
    groups = [g for g in report.groups if metric is None or g.metric == metric]
    if metric is not None:
        verdicts = [v for v in verdicts if any(j.metric == metric for j in v.judgements)
                    or v.verdict in ("failed", "partial", "pending")]
    if plot:
        from slurmguard.burnin.plot import plot_history, plot_report

        if node:
            plot_history(store, node, metric, plot, start)
        else:
            plot_report(report, plot, metric)
    if as_json:
        echo_json({"since": iso(start), "counts": report.counts(),
                   "groups": [{"group": g.group, "metric": g.metric, "n": g.n, "median": g.median,
                               "mad": g.mad, "unit": report.units.get(g.metric, ""),
                               "verdict": g.verdict, "why": g.why} for g in groups],
                   "nodes": [_node_json(v, report.units, metric) for v in verdicts],
                   "applied": [o.to_dict() for o in outcomes], "plot": plot})
        return
    if groups:
        click.echo(table([[g.group, g.metric, g.n, _num(g.median, "{:.4g}"), _num(g.mad, "{:.3g}"),
                           report.units.get(g.metric, ""), "" if g.verdict else g.why]
                          for g in groups],
                         ["group", "metric", "nodes", "median", "MAD", "unit", "note"]))
        click.echo()
    if node:
        for v in verdicts:
            click.echo(f"node {v.node} (group {v.group}): {v.verdict}: {v.reason or v.why}")
            click.echo(table([[j.metric, _num(j.value, "{:.4g}"), report.units.get(j.metric, ""),
                               _num(j.score), _num(j.z, "{:.1f}"), j.why or "-"]
                              for j in v.judgements if metric is None or j.metric == metric],
                             ["metric", "value", "unit", "score", "robust z", "flag"]))
    else:
        rows = []
        for v in sorted(verdicts, key=lambda v: (v.group, _order(v.verdict), v.node)):
            worst = min((j for j in v.judgements if j.score is not None
                         and (metric is None or j.metric == metric)),
                        key=lambda j: j.score, default=None)
            rows.append([v.group, v.node, v.status, v.verdict,
                         f"{worst.metric} {_num(worst.score)}" if worst else "-",
                         v.reason or v.why])
        click.echo(table(rows, ["group", "node", "run", "verdict", "lowest score", "why"]))
    if outcomes:
        click.echo()
        click.echo(table([[o.node, o.action, o.detail] for o in outcomes],
                         ["node", "action", "detail"]))
    if plot:
        click.echo(f"plot: {plot}")


def _order(verdict: str) -> int:
    return ["failed", "flagged", "degrading", "partial", "pending", "no_verdict", "pass"].index(
        verdict) if verdict in ("failed", "flagged", "degrading", "partial", "pending",
                                "no_verdict", "pass") else 9
