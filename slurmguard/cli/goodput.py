"""`slurmguard goodput`: useful GPU time and where the rest went (thin over slurmguard.goodput)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from slurmguard.cli._common import iso, load_config, optional_store, parse_since, slurm_of, warn
from slurmguard.output import Result, emit

if TYPE_CHECKING:
    from slurmguard.config import Config


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

    cfg = load_config(ctx)
    t_since = parse_since(since)
    # One job's breakdown needs no store.
    store = optional_store(cfg, lambda why: warn(f"goodput: no store ({why})"))
    try:
        if jobs:
            result, empty = _jobs_report(cfg, store, jobs, runs)
            emit(result, as_json)
            if plot_path:
                raise InputError("--plot: draws the fleet over time; leave out --job")
            return EXIT_INPUT if empty else 0
        if store is None:
            raise InputError("goodput: the fleet report reads the node-state store: configure "
                             "[store] (or give --job ID for one job from the live sources)")
        if collect:
            from slurmguard.goodput.report import collect as do_collect

            found = do_collect(cfg.section("goodput"), since=t_since, runs=runs, store=store,
                               slurm=slurm_of(cfg), skip_collected=True)
            n = store.goodput.record([b.to_dict() for b in found])
            warn(f"goodput: accounted {n} job(s) newly ended since {iso(t_since)}")
        emit(_fleet_report(store, t_since, by), as_json)
        if plot_path:
            _plot(store, t_since, plot_path, as_json)
        return 0
    finally:
        if store is not None:
            store.close()


def _jobs_report(cfg: Config, store: Any, jobs: tuple[str, ...],
                 runs: tuple[str, ...]) -> tuple[Result, list[str]]:
    """The named jobs from the live sources; the store's copy where the sources are gone.
    Also why each job no source knows is left out (all of them: InputError)."""
    from slurmguard.adapters.slurm.commands import validate_job_id
    from slurmguard.errors import InputError
    from slurmguard.goodput.report import collect as do_collect
    from slurmguard.goodput.report import job_table

    ids = [validate_job_id(j) for j in jobs]
    found = do_collect(cfg.section("goodput"), job_ids=ids, runs=runs, store=store,
                       slurm=slurm_of(cfg))
    out, empty = [], []
    for b in found:
        d = b.to_dict()
        if b.start is None and store is not None:
            stored = store.goodput.job(b.job_id)
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
        store.goodput.record([d for d in out if not d.get("stored")])
    return Result(out[0] if len(out) == 1 else out, [job_table(d) for d in out],
                  sep="\n\n"), empty


def _fleet_report(store: Any, t_since: float, by: str) -> Result:
    from slurmguard.goodput.report import fleet_table

    groups = store.goodput.totals(since=t_since, by=by)
    head = {"since": iso(t_since), "until": iso(time.time()), "by": by}
    data = ({**head, "groups": {g: t for g, t in groups}} if by != "cause" else
            {**head, **(groups[0][1] if groups else {"jobs": 0})})
    return Result(data, [fleet_table(groups, by, t_since)])


def _plot(store: Any, t_since: float, plot_path: str, as_json: bool) -> None:
    from slurmguard.goodput.report import plot

    span = time.time() - t_since
    bucket = 3600.0 if span <= 3 * 86400 else 86400.0
    plot(store.goodput.series(since=t_since, bucket=bucket), plot_path,
         f"slurmguard badput by cause since {iso(t_since)}")
    if not as_json:
        click.echo(f"plot: {plot_path}")
