"""`slurmguard requeue watch`: the requeue watcher (thin over slurmguard.job.requeue)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from slurmguard.cli._common import optional_store
from slurmguard.output import json_line

if TYPE_CHECKING:
    from slurmguard.config import Config

log = logging.getLogger("slurmguard.job.requeue")


@click.group("requeue")
def requeue_grp() -> None:
    """Checkpoint-aware requeue: put jobs hit by a node fault back on healthy nodes fast.

    \b
    Example:
      slurmguard requeue watch                 # poll every requeue.interval seconds
      slurmguard requeue watch --once --json   # one pass, events as JSON lines
    """


def _open_store(cfg: Config, without: str) -> Any:
    """The node-state store, or None (logged: what the watcher does ``without`` it)."""
    return optional_store(cfg, lambda why: log.warning("requeue watcher: no store (%s): %s",
                                                        why, without))


def store_recorder(cfg: Config) -> Callable[[dict[str, Any]], None] | None:
    """Record recoveries in the node-state store when one is configured and reachable."""
    from slurmguard.errors import SlurmguardError

    store = _open_store(cfg, "recoveries are only logged")
    if store is None:
        return None

    def record(ev: dict[str, Any]) -> None:
        if ev["event"] not in ("requeue-expedite", "requeue-recovered", "requeue-cap"):
            return
        what = {"requeue-expedite": f"requeued ({ev.get('reason')}): excluded and made eligible now",
                "requeue-recovered": f"running again {ev.get('seconds')}s after the requeue",
                "requeue-cap": "requeue cap reached: left to Slurm"}[ev["event"]]
        for node in ev.get("failed_nodes") or ev.get("failed") or []:
            try:
                store.nodes.record_event(node, "state_change", "slurmguard", f"job {ev['job_id']} {what}",
                                         source="requeue", details=ev)
            except SlurmguardError as exc:
                log.warning("requeue watcher: store: %s", exc.message)

    return record


def store_refusals(cfg: Config) -> Callable[[], dict[str, set[str]]] | None:
    """With risk.gate_max_nodes on: job id -> the nodes the gate refused it for node risk in
    the last day (the store's risk_refused events), for the watcher to exclude."""
    if int(cfg["risk.gate_max_nodes"]) <= 0:
        return None
    store = _open_store(cfg, "risk refusals are not followed")
    if store is None:
        return None
    return lambda: {job: set(nodes) for job, nodes in
                    store.nodes.risk_refusals(time.time() - 86400.0).items()}


def _would_events(cfg: Config) -> Callable[[Any], None] | None:
    """Observe mode (policy.mode): what the watcher would have done, as would-events in the
    store's ledger (once per episode); None when nothing observes."""
    from slurmguard.observe import observing_groups

    if not observing_groups(cfg):
        return None
    store = _open_store(cfg, "would-events of observe mode are not written")
    if store is None:
        return None
    from slurmguard.wouldledger import ledger_writer

    return ledger_writer(store, "requeue")


@requeue_grp.command("watch")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=None, metavar="SECONDS",
              help="Seconds between polls (config requeue.interval).")
@click.option("--max-requeues", type=click.IntRange(min=0), default=None,
              help="Recoveries per job at most (config requeue.max_requeues).")
@click.option("--state-file", metavar="PATH", default=None,
              help="Where the watcher remembers jobs between runs (config requeue.state_file; "
                   "'' for none).")
@click.option("--json", "as_json", is_flag=True, help="Events as JSON lines on stdout.")
@click.pass_context
def watch_cmd(ctx: click.Context, once: bool, interval: float | None, max_requeues: int | None,
              state_file: str | None, as_json: bool) -> int:
    """Watch the queue: for jobs Slurm requeued because a node failed or was drained (by
    anyone: a drain notice ends the run for a requeue), exclude that node, release
    launch-failure holds and make the job eligible at once (EligibleTime=now).

    On Slurm 25.11+ with SlurmctldParameters=enable_expedited_requeue, jobs submitted with
    --requeue=expedite are made eligible by Slurm itself; the watcher says which path it
    takes at start and in each event (path=watcher or path=slurm-expedited).

    \b
    Example:
      slurmguard requeue watch --interval 1
      slurmguard requeue watch --once --state-file /var/lib/slurmguard/requeue.json --json
    """
    from slurmguard import config
    from slurmguard.errors import SlurmguardError
    from slurmguard.job.requeue import Watcher

    try:
        from slurmguard.adapters.slurm.commands import SlurmCLI
    except ImportError as exc:
        raise SlurmguardError(f"the Slurm adapter is missing from this install: {exc}") from None

    cfg = config.load((ctx.obj or {}).get("config_path"))
    sec = cfg.section("requeue")
    store_record = store_recorder(cfg)

    def record(ev: dict[str, Any]) -> None:
        if as_json:
            click.echo(json_line(ev))
        else:
            click.echo(f"job {ev['job_id']}: {ev['event']}: " + ", ".join(
                f"{k}={v}" for k, v in ev.items() if k not in ("event", "job_id", "time") and v))
        sys.stdout.flush()
        if store_record is not None:
            store_record(ev)

    metrics = None
    if sec["metrics_file"]:
        try:
            from slurmguard.metrics.registry import RequeueMetrics
        except ImportError as exc:
            raise SlurmguardError(f"requeue.metrics_file: needs prometheus_client (the server "
                                  f"extra): {exc}") from None
        metrics = RequeueMetrics()
    state_path = (sec["state_file"] if state_file is None else state_file) or None
    if state_path and not os.path.isdir(os.path.dirname(os.path.abspath(state_path))):
        from slurmguard.errors import ConfigError

        raise ConfigError(f"requeue.state_file: directory {os.path.dirname(state_path)} does "
                              "not exist; run: slurmguard setup controller (or --state-file '' "
                              "to keep the watcher's memory in the process only)")
    from slurmguard.job.requeue_path import detect

    slurm = SlurmCLI.from_config(cfg)
    slurm.on_withheld = _would_events(cfg)
    path = detect(slurm)
    click.echo(f"requeue watcher: path {path.name}: {path.why}", err=True)
    w = Watcher(slurm, metrics=metrics, metrics_path=sec["metrics_file"],
                max_requeues=sec["max_requeues"] if max_requeues is None else max_requeues,
                state_path=state_path, record=record, path=path, refusals=store_refusals(cfg))
    if once:
        w.poll()
        return 0
    w.watch(interval=sec["interval"] if interval is None else interval)
    return 0
