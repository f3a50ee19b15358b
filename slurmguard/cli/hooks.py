"""Node-side commands: `check`, `prolog`, `epilog`, `healthcheck`, `checks`, `config`."""

from __future__ import annotations

import os
import sys

import click

from slurmguard.node.hooks import run_hook
from slurmguard.output import Result, emit

_node_opt = click.option(
    "--node", metavar="NAME",
    help="Node name when $SLURMD_NODENAME is unset (default: the short hostname).")


def _finish(code: int) -> None:
    # Hooks leave at once: a gather thread stuck in the kernel must not delay the exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@click.command("check")
@_node_opt
@click.option("--json", "as_json", is_flag=True, help="Print the result record as JSON.")
@click.option("--only", multiple=True, metavar="CHECK", help="Run only these checks (repeatable).")
@click.option("--forget", multiple=True, metavar="CHECK",
              help="First drop this check's saved state (e.g. latched Xids after a GPU reset).")
@click.pass_obj
def check_cmd(obj: dict, node: str | None, as_json: bool, only: tuple[str, ...],
              forget: tuple[str, ...]) -> None:
    """Check this node now and print each result; never drains.

    Exit 0 when healthy (unsupported checks are fine), 1 when a check is unhealthy, 8 when
    slurmguard itself failed, 3 on a bad config.

    \b
    Example:
      slurmguard check
      slurmguard check --only gpu-xid --only ib-link --json
      slurmguard check --forget gpu-xid      # after `nvidia-smi -r` fixed the GPU
    """
    if forget:
        from slurmguard import config
        from slurmguard.node.hooks import node_identity
        from slurmguard.node.runner import forget_state

        name = node_identity(node)
        cfg = config.load(obj.get("config_path")).for_node(name)
        had = forget_state(cfg, forget, name)
        click.echo(f"forgot saved state of: {', '.join(had) or 'nothing (none saved)'}", err=True)
    code = run_hook("check", node_flag=node, config_path=obj.get("config_path"), only=only,
                    as_json=as_json)
    _finish(code)


def _hook_command(hook: str, summary: str, example: str) -> click.Command:
    @click.command(hook, help=f"{summary}\n\n\b\nExample:\n  {example}")
    @_node_opt
    @click.option("--json", "as_json", is_flag=True, help="Print the result record as JSON.")
    @click.option("--dry-run", is_flag=True, help="Decide but do not drain or undrain.")
    @click.pass_obj
    def cmd(obj: dict, node: str | None, as_json: bool, dry_run: bool) -> None:
        code = run_hook(hook, node_flag=node, config_path=obj.get("config_path"),
                        as_json=as_json, dry_run=dry_run)
        _finish(code)

    return cmd


prolog_cmd = _hook_command(
    "prolog",
    "Slurm Prolog: check this node before a job starts; drain it and exit 1 on a node fault "
    "(Slurm requeues the job elsewhere). Exits 0 when slurmguard itself fails, or when the "
    "drain is refused by the blast-radius guard or cannot be made (docs/hooks.md).",
    "Prolog=/usr/lib/slurmguard/prolog/slurmguard-prolog   (slurm.conf; runs `slurmguard prolog`)",
)
epilog_cmd = _hook_command(
    "epilog",
    "Slurm Epilog: check this node after a job (leftover processes too); drain it and exit 1 "
    "on a node fault; exits 0 where the prolog does.",
    "Epilog=/usr/lib/slurmguard/epilog/slurmguard-epilog   (slurm.conf; runs `slurmguard epilog`)",
)
healthcheck_cmd = _hook_command(
    "healthcheck",
    "Slurm HealthCheckProgram: check this node periodically; drain it on a node fault, and "
    "undrain it (UNDRAIN) when the check that slurmguard drained it for passes again.",
    "HealthCheckProgram=/usr/lib/slurmguard/prolog/slurmguard-healthcheck",
)


@click.command("checks")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def checks_cmd(as_json: bool) -> None:
    """List every check: name, area, sources, what it catches.

    \b
    Example:
      slurmguard checks
    """
    from slurmguard.checks import ALL_CHECKS

    rows = [{"name": c.name, "area": c.area, "sources": list(c.sources), "summary": c.summary}
            for c in ALL_CHECKS]
    width = max([len(r["name"]) for r in rows] + [4])
    emit(Result(rows, [f"{r['name']:<{width}}  {r['area']:<5}  {r['summary']}" for r in rows]),
         as_json)


@click.command("config")
@click.option("--defaults", is_flag=True, help="Show the built-in defaults, not the loaded files.")
@click.option("--node", metavar="NAME", help="Apply the [[group]] overrides for this node.")
@click.pass_obj
def config_cmd(obj: dict, defaults: bool, node: str | None) -> None:
    """Validate the configuration and print the effective values as JSON.

    Exits 3 with one line naming the key and the value when the config is invalid.

    \b
    Example:
      slurmguard config --node gpu017
      SLURMGUARD_CONFIG=./test.toml slurmguard config
    """
    from slurmguard import config

    if defaults:
        emit(Result(config.defaults()), as_json=True)
        return
    cfg = config.load(obj.get("config_path"))
    if node:
        cfg = cfg.for_node(node)
    out = {"files": cfg.sources, "config": cfg.as_dict()}
    emit(Result(out), as_json=True)
