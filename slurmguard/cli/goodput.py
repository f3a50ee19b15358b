"""`slurmguard goodput`: useful GPU time and where the rest went (thin over slurmguard.goodput)."""

from __future__ import annotations

import time
from typing import Any

import click

from slurmguard.cli._common import echo_json, iso, load_config, parse_since, warn


def _store(cfg: Any) -> Any:
    from slurmguard.errors import SlurmguardError

    try:
        from slurmguard.store import Store
    except ImportError:
        return None
    try:
        return Store.open(cfg)
    except SlurmguardError as exc:
        warn(f"goodput: no store ({exc.message})")
        return None


def _slurm(cfg: Any) -> Any:
    from slurmguard.adapters.slurm.commands import SlurmCLI

    return SlurmCLI(cfg.section("slurm"))


def _nothing_known(b: Any) -> str:
    """Why one job's breakdown is empty: no accounting, or a job accounting does not know."""
    no_acct = next((u for u in b.unknown if u.startswith("no Slurm accounting")), "")
    why = no_acct or "Slurm accounting has no such job"
    return (f"--job {b.job_id}: nothing to account: {why}, and no wrapper record "
            "(--runs DIR, goodput.run_dirs) nor stored breakdown")


@click.command("goodput")
@click.option("--since", default="7d", show_default=True, metavar="WHEN",
              help="Jobs that ended since: 90m, 12h, 7d, 2w or an ISO time.")
@click.option("--job", "jobs", multiple=True, metavar="ID",
              help="One job's breakdown, from the live sources (repeatable).")
@click.option("--by", type=click.Choice(["cause", "partition", "user", "node"]), default="cause",
              show_default=True, help="Fleet report: split by cause, or per partition/user/node.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Also draw badput by cause over time (needs the `plot` extra: matplotlib).")
@click.option("--runs", multiple=True, metavar="DIR",
              help="Where to find the wrapper's records (checkpoint dirs, globs; with "
                   "goodput.run_dirs).")
@click.option("--collect", is_flag=True,
              help="First account the jobs that ended in the window and are not stored yet "
                   "(sacct + wrapper records + store), then report.")
@click.pass_context
def goodput_cmd(ctx: click.Context, since: str, jobs: tuple[str, ...], by: str, as_json: bool,
                plot_path: str | None, runs: tuple[str, ...], collect: bool) -> int:
    """Goodput: allocated and productive GPU-hours, ETTR (productive / allocated wall time),
    and badput by cause: lost work, requeue wait, restart, stalls, checkpoint saves, nodes
    found faulty, stragglers. Parts no source can explain are reported as unknown. A --job
    that no source knows (no accounting, an unknown job) is said so, exit 6.

    \b
    Example:
      slurmguard goodput --job 1234 --json        # one job, from sacct + runs.jsonl + store
      slurmguard goodput --since 7d --by partition
      slurmguard goodput --since 30d --collect --plot badput.png
    """
    from slurmguard.errors import EXIT_INPUT, InputError
    from slurmguard.goodput.report import collect as do_collect
    from slurmguard.goodput.report import fleet_table, job_table, plot

    cfg = load_config(ctx)
    section = cfg.section("goodput")
    t_since = parse_since(since)
    store = _store(cfg)
    try:
        if jobs:
            from slurmguard.adapters.slurm.commands import validate_job_id

            ids = [validate_job_id(j) for j in jobs]
            found = do_collect(section, job_ids=ids, runs=runs, store=store, slurm=_slurm(cfg))
            out, empty = [], []
            for b in found:
                d = b.to_dict()
                if b.start is None and store is not None:
                    stored = store.goodput_job(b.job_id)
                    if stored is not None:  # the sources are gone; the store remembers
                        d = stored
                if d.get("start") is None and not d.get("stored"):
                    empty.append(_nothing_known(b))
                    continue
                out.append(d)
            if not out:  # a table of zeros would read as a job that did nothing
                raise InputError(empty[0])
            for line in empty:
                warn(f"slurmguard: error: {line}")
            if store is not None:
                store.record_goodput([d for d in out if not d.get("stored")])
            if as_json:
                echo_json(out[0] if len(out) == 1 else out)
            else:
                click.echo("\n\n".join(job_table(d) for d in out))
            if plot_path:
                raise InputError("--plot: draws the fleet over time; leave out --job")
            return EXIT_INPUT if empty else 0
        if store is None:
            raise InputError("goodput: the fleet report reads the node-state store: configure "
                             "[store] (or give --job ID for one job from the live sources)")
        if collect:
            found = do_collect(section, since=t_since, runs=runs, store=store,
                               slurm=_slurm(cfg), skip_collected=True)
            n = store.record_goodput([b.to_dict() for b in found])
            warn(f"goodput: accounted {n} job(s) newly ended since {iso(t_since)}")
        groups = store.goodput_totals(since=t_since, by=by)
        if as_json:
            echo_json({"since": iso(t_since), "until": iso(time.time()), "by": by,
                       "groups": {g: t for g, t in groups}} if by != "cause" else
                      {"since": iso(t_since), "until": iso(time.time()), "by": by,
                       **(groups[0][1] if groups else {"jobs": 0})})
        else:
            click.echo(fleet_table(groups, by, t_since))
        if plot_path:
            span = time.time() - t_since
            bucket = 3600.0 if span <= 3 * 86400 else 86400.0
            plot(store.goodput_series(since=t_since, bucket=bucket), plot_path,
                 f"slurmguard badput by cause since {iso(t_since)}")
            if not as_json:
                click.echo(f"plot: {plot_path}")
        return 0
    finally:
        if store is not None:
            store.close()


