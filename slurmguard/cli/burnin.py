"""`slurmguard burnin submit|worker|report`: nightly fleet burn-in (docs/burnin.md)."""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _quote
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
    from slurmguard.adapters.slurm.commands import SlurmCLI

    return SlurmCLI(cfg.section("slurm"))


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
    store = _store(cfg)
    slurm = _slurm(cfg)
    root = ctx.find_root().obj or {}
    done = sm.submit(cfg, store, slurm, nodes, idle=idle, level=level, reservation=reservation,
                     config_path=root.get("config_path"),
                     progress=lambda xs: bar(xs, total=len(xs), desc="sbatch"))
    left: list[int] = []
    if do_wait:
        left = sm.wait(cfg, store, slurm, [d.run_id for d in done if d.run_id is not None],
                       float(cfg["burnin.wait_timeout"]))
    if as_json:
        echo_json({"submitted": [d.to_dict() for d in done], "still_running": left})
    else:
        click.echo(table([[d.node, d.job_id or "-", d.reservation or "-", d.note] for d in done],
                         ["node", "job", "reservation", "note"]))
        if left:
            warn(f"{len(left)} burn-in run(s) still running after burnin.wait_timeout")
    return EXIT_REFUSED if any(d.job_id is None for d in done) else EXIT_OK


@burnin_grp.command("worker")
@click.option("--level", type=click.Choice(["quick", "full"]), default="quick", show_default=True)
@click.option("--node", "node_flag", metavar="NODE",
              help="Node name when not in a Slurm job ($SLURMD_NODENAME wins).")
@click.pass_context
def worker_cmd(ctx: click.Context, level: str, node_flag: str | None) -> int:
    """The burn-in job's body: health checks, measurements, health checks (on the node).

    Each measurement runs in a child process with burnin.measurement_timeout; values go to
    the store as each ends. Exit 0 complete, 1 failed (a health check or a hard
    measurement failure), 143 cut short by SIGTERM (recorded as partial).

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


_float_repr = float.__repr__
_INFS = (math.inf, -math.inf)
_EMPTY = '""'
_NUMBER_TYPES = {float, int, type(None)}
_JSON_WORDS = {"None": "null", "nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


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


def _js(x: Any) -> str:
    """``json.dumps(x, sort_keys=True, default=str)`` (the C string encoder for a str)."""
    if type(x) is str:
        return _quote(x)
    return json.dumps(x, sort_keys=True, default=str)


def _jf(x: Any) -> str:
    """A number as ``json.dumps`` writes it (float repr when finite; NaN, Infinity, null)."""
    if type(x) is float and x - x == 0:
        return _float_repr(x)
    return json.dumps(x, sort_keys=True, default=str)


def _numbers(xs: list[Any]) -> list[str]:
    """Each number of ``xs`` as ``json.dumps`` writes it: one C ``repr`` of the list, split
    (float repr is most of the JSON's cost; nan, inf and None spelled as JSON spells them)."""
    if not xs:
        return []
    if not set(map(type, xs)) <= _NUMBER_TYPES:
        return [_jf(x) for x in xs]
    text = repr(xs)[1:-1]
    toks = text.split(", ")
    if "n" in text:  # None, nan, inf (no finite float or int repr has an "n")
        toks = [_JSON_WORDS.get(t, t) for t in toks]
    return toks


def _node_line(v: Any, units: dict[str, str], metric: str | None,
               names: dict[str, tuple[str, str]]) -> str:
    """``json.dumps(_node_json(v, units, metric), sort_keys=True, default=str)``, written
    directly: 10,000 nodes x 10 metrics a report, and building 110,000 dicts for the encoder
    to sort cost more than the encoding (tests/test_burnin_vector.py holds the two equal)."""
    js = [j for j in v.judgements if metric is None or j.metric == metric]
    nums: list[Any] = []
    for j in js:
        sc = j.score
        nums += (j.value, None if sc is None or sc in _INFS else sc, j.z)
    toks = _numbers(nums)
    items = []
    i = 0
    for j in js:
        m = j.metric
        qm = names.get(m)
        if qm is None:  # the metric's name and unit, encoded once a report
            qm = names[m] = (_js(m), _js(units.get(m, "")))
        f, why = j.flagged, j.why
        flag = "true" if f is True else "false" if f is False else _js(f)
        items.append(f'{{"flagged": {flag}, "metric": {qm[0]}, "score": {toks[i + 1]}, '
                     f'"unit": {qm[1]}, "value": {toks[i]}, '
                     f'"why": {_js(why) if why else _EMPTY}, "z": {toks[i + 2]}}}')
        i += 3
    scores = ", ".join(f"{_js(m)}: [{', '.join(_numbers(list(s)))}]"
                       for m, s in sorted(v.scores.items()))
    return (f'{{"degrading": [{", ".join(map(_js, v.degrading))}], "group": {_js(v.group)}, '
            f'"metric": {_js(v.metric)}, "metrics": [{", ".join(items)}], "node": {_js(v.node)}, '
            f'"reason": {_js(v.reason)}, "run_id": {_jf(v.run_id)}, "scores": {{{scores}}}, '
            f'"status": {_js(v.status)}, "verdict": {_js(v.verdict)}, "why": {_js(v.why)}}}')


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
@click.option("--all", "show_all", is_flag=True,
              help="List every node (default: only nodes that did not pass, and the counts).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (every node).")
@click.pass_context
def report_cmd(ctx: click.Context, since: str, node: str | None, metric: str | None,
               plot: str | None, do_apply: bool, show_all: bool, as_json: bool) -> None:
    """Judge each node's latest burn-in against its comparison group.

    Per group (same GPU model and count, a Slurm feature, or a configured NodeSet) and
    metric: median and MAD; a node's score is its value over the median (inverted where
    lower is better); flagged below burnin.threshold (0.90) or beyond the robust z limit.
    Groups smaller than burnin.min_group give no verdict. Without --apply nothing changes.

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
    from slurmguard.nodeset import validate_node_name

    if node:
        validate_node_name(node)
    cfg = load_config(ctx)
    # Reading only (no --apply, no history plot) from SQLite: the stdlib reader, without
    # importing SQLAlchemy (~0.5 s; docs/burnin.md, "Report at fleet scale").
    store = None
    if not do_apply and not (plot and node):
        from slurmguard.store.burnin_read import SqliteBurninReader

        store = SqliteBurninReader.open(cfg.section("store"))
    if store is None:
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
        names: dict[str, tuple[str, str]] = {}
        _echo_report_json({"since": iso(start), "counts": report.counts(),
                   "groups": [{"group": g.group, "metric": g.metric, "n": g.n, "median": g.median,
                               "mad": g.mad, "unit": report.units.get(g.metric, ""),
                               "verdict": g.verdict, "why": g.why} for g in groups],
                   "nodes": [], "applied": [o.to_dict() for o in outcomes], "plot": plot},
                  nodes=[_node_line(v, report.units, metric, names) for v in verdicts])
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
        if not show_all:
            verdicts = [v for v in verdicts if v.verdict != "pass"]
        for v in sorted(verdicts, key=lambda v: (v.group, _order(v.verdict), v.node)):
            worst = min((j for j in v.judgements if j.score is not None
                         and (metric is None or j.metric == metric)),
                        key=lambda j: j.score, default=None)
            rows.append([v.group, v.node, v.status, v.verdict,
                         f"{worst.metric} {_num(worst.score)}" if worst else "-",
                         v.reason or v.why])
        counts = report.counts()
        click.echo("nodes: " + (", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=_order))
                                or "no burn-in run since then"))
        if rows:
            click.echo(table(rows, ["group", "node", "run", "verdict", "lowest score", "why"]))
    if outcomes:
        click.echo()
        click.echo(table([[o.node, o.action, o.detail] for o in outcomes],
                         ["node", "action", "detail"]))
    if plot:
        click.echo(f"plot: {plot}")


def _echo_report_json(data: dict[str, Any], nodes: list[str] | None = None) -> None:
    """The report as JSON: the same document as ``echo_json`` (keys sorted), but each item of
    a top-level list on one line. ``json.dumps(indent=2)`` runs the pure-Python encoder (the C
    one never indents): over 10,000 nodes x 10 metrics that alone took 6-7 s of the report;
    one compact ``dumps`` per node runs in C (docs/burnin.md, "Report at fleet scale")."""
    def one(x: Any) -> str:
        return json.dumps(x, sort_keys=True, default=str)

    parts = []
    for key in sorted(data):
        value = data[key]
        lines = nodes if key == "nodes" and nodes is not None else None
        if lines is None and isinstance(value, list) and value:
            lines = list(map(one, value))
        if lines:
            body = ",\n    ".join(lines)
            parts.append(f"  {one(key)}: [\n    {body}\n  ]")
        else:
            parts.append(f"  {one(key)}: {one(value)}")
    click.echo("{\n" + ",\n".join(parts) + "\n}")


def _order(verdict: str) -> int:
    order = ("failed", "flagged", "suspect", "degrading", "partial", "pending", "no_verdict",
             "pass")
    return order.index(verdict) if verdict in order else 9
