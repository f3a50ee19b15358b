"""`slurmguard reconcile`: keep the Slurm and Kubernetes views of the same nodes true."""

from __future__ import annotations

import signal
from typing import Any

import click

from slurmguard.errors import EXIT_EXTERNAL, EXIT_OK
from slurmguard.output import Block, Result, Table, emit, json_line


def _text(r: Any) -> list[Block]:
    rows = [(a.node, a.slurm, a.kube, a.kind, a.why) for a in r.plan.actions]
    out: list[Block] = [Table(rows, ["node", "Slurm view", "Kubernetes view", "action", "why"])
                        if rows else "(no node seen on both sides)"]
    if r.plan.slurm_only:
        out.append("only in Slurm: " + ", ".join(r.plan.slurm_only))
    if r.plan.k8s_only:
        out.append("only in Kubernetes (or unmapped): " + ", ".join(r.plan.k8s_only))
    for alert in r.plan.alerts:
        out.append("ALERT: " + alert)
    for err in r.errors:
        out.append("FAILED CLOSED (nothing changed): " + err)
    for o in r.outcomes:
        if not o.ok:
            out.append(f"FAILED: {o.action.node}: {o.action.kind}: {o.error}")
    return out


@click.command("reconcile")
@click.option("--dry-run", "mode", flag_value="dry-run", default=True,
              help="Print the plan, change nothing (the default).")
@click.option("--once", "mode", flag_value="once", help="Plan and apply one round.")
@click.option("--watch", "mode", flag_value="watch",
              help="Run rounds forever, driven by Kubernetes watches and a Slurm poll.")
@click.option("--nodes", metavar="NODESET", help="Only these Slurm nodes (default: reconcile.nodes, or all).")
@click.option("--json", "as_json", is_flag=True, help="Print the round as JSON.")
@click.option("--rounds", type=click.IntRange(min=1), metavar="N",
              help="With --watch: stop after N rounds (tests, debugging).")
@click.pass_context
def reconcile_cmd(ctx: click.Context, mode: str, nodes: str | None, as_json: bool,
                  rounds: int | None) -> None:
    """Reconcile Slurm node state with Kubernetes Nodes (cordon/taint <-> drain).

    A Slurm drain or DOWN puts a cordon and the taint slurmguard.io/unhealthy=<check>:NoSchedule
    on the Node (NOT_RESPONDING alone, as after every undrain, does not); a Node NotReady past the grace period, cordoned by someone else, or with a
    problem condition drains the Slurm node with "slurmguard: k8s: <what>". Only our own marks
    are ever removed. If either side cannot be read, nothing changes (exit 4).
    Settings: the [reconcile] config section (docs/reconcile.md).

    \b
    Examples:
      slurmguard reconcile                     # dry run: the plan as a table
      slurmguard reconcile --dry-run --json    # the plan as JSON
      slurmguard reconcile --once --nodes 'gpu[001-064]'
      slurmguard reconcile --watch             # run as a service
    """
    from slurmguard import config
    from slurmguard.adapters.k8s import KubeNodes
    from slurmguard.errors import SlurmguardError

    try:
        from slurmguard.adapters.slurm.commands import SlurmCLI
    except ImportError as exc:
        raise SlurmguardError(f"the Slurm adapter is missing from this install: {exc}") from None
    from slurmguard.reconcile.apply import Reconciler, kube_observer
    from slurmguard.reconcile.metrics import Metrics

    cfg = config.load((ctx.obj or {}).get("config_path"))
    section = cfg.section("reconcile")

    def log(line: str) -> None:
        click.echo(line, err=True)

    store = None
    if mode != "dry-run":
        from slurmguard.store.api import Store

        try:  # the guard's ledger (docs/policy.md); without it the plan's views cap alone
            store = Store.open(section=cfg.section("store"))
        except SlurmguardError as exc:
            log(f"reconcile: no store ({exc}): drains capped from the two views only")
    rec = Reconciler(section, SlurmCLI.from_config(cfg), KubeNodes(
        section, observe=kube_observer(cfg)),
                     policy=cfg.section("policy"), nodeset=nodes,
                     log=log, metrics=Metrics(section["metrics_file"]), store=store)
    if mode != "watch":
        r = rec.round(apply=mode == "once")
        rec.metrics.write()
        emit(Result({"mode": mode, **r.to_dict()}, _text(r)), as_json)
        ctx.exit(EXIT_OK if r.ok else EXIT_EXTERNAL)

    from slurmguard.reconcile.watch import watch_loop

    stop = {"flag": False}

    def _term(_signum: int, _frame: Any) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, _term)

    def show(r: Any) -> None:
        if as_json:
            click.echo(json_line({"mode": "watch", **r.to_dict()}))

    watch_loop(rec, interval=float(section["interval"]), resync=float(section["resync"]),
               rounds=rounds, on_round=show, should_stop=lambda: stop["flag"])
