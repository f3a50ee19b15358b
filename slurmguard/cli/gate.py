"""`slurmguard gate`: PrologSlurmctld backstop (see slurmguard/gate/answer.py and docs/serve.md)."""

from __future__ import annotations

import sys

import click


@click.command("gate")
@click.option("--dry-run", is_flag=True, help="Report refused nodes; drain nothing.")
@click.pass_context
def gate_cmd(ctx: click.Context, dry_run: bool) -> None:
    """Refuse a job's nodes that the store says must not run jobs (PrologSlurmctld).

    Reads SLURM_JOB_ID and SLURM_JOB_NODELIST; for each lemon, node awaiting burn-in, or node
    with a fresh unhealthy result (gate.fresh seconds), drains it with the reason and exits 1
    so Slurm requeues the job elsewhere. With risk.gate_max_nodes > 0, a job of more nodes is
    also refused its at-risk nodes (score >= risk.level), drained nothing; `requeue watch`
    excludes them. Store unreadable: gate.on_store_error = "open" (default: log, exit 0) or
    "closed" (exit 5, drain nothing).

    \b
    Example:
      # slurm.conf:  PrologSlurmctld=/usr/lib/slurmguard/prolog/slurmguard-gate
      SLURM_JOB_ID=42 SLURM_JOB_NODELIST='gpu[001-004]' slurmguard gate --dry-run
    """
    from slurmguard.gate.answer import main

    sys.exit(main((ctx.find_root().obj or {}).get("config_path"), dry_run=dry_run))
