"""The `slurmguard` command: a thin click front over the library.

Commands are loaded lazily (only the module of the command being run is imported), so
`slurmguard prolog` pays for nothing but the hook path. Expected errors become one line,
``slurmguard: error: <message>``, and their documented exit code here, in one place; ``-v``
shows the traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from slurmguard import __version__
from slurmguard.errors import EXIT_CHECKER, SlurmguardError

# command name -> "module:attribute". One line per command; order is the help order.
COMMANDS: dict[str, str] = {
    "setup": "slurmguard.cli.setup:setup_cmd",
    "doctor": "slurmguard.cli.doctor:doctor_cmd",
    "check": "slurmguard.cli.hooks:check_cmd",
    "prolog": "slurmguard.cli.hooks:prolog_cmd",
    "epilog": "slurmguard.cli.hooks:epilog_cmd",
    "healthcheck": "slurmguard.cli.hooks:healthcheck_cmd",
    "agent": "slurmguard.cli.agent:agent_cmd",
    "checks": "slurmguard.cli.hooks:checks_cmd",
    "config": "slurmguard.cli.hooks:config_cmd",
    "db": "slurmguard.cli.db:db_cmd",
    "serve": "slurmguard.cli.serve:serve_cmd",
    "gate": "slurmguard.cli.gate:gate_cmd",
    "nodes": "slurmguard.cli.admin:nodes_cmd",
    "node": "slurmguard.cli.admin:node_cmd",
    "drain": "slurmguard.cli.admin:drain_cmd",
    "resume": "slurmguard.cli.admin:resume_cmd",
    "events": "slurmguard.cli.admin:events_cmd",
    "triage": "slurmguard.cli.triage:triage_cmd",
    "run": "slurmguard.cli.run:run_cmd",
    "requeue": "slurmguard.cli.requeue:requeue_grp",
    "shadow": "slurmguard.cli.shadow:shadow_grp",
    "reconcile": "slurmguard.cli.reconcile:reconcile_cmd",
    "burnin": "slurmguard.cli.burnin:burnin_grp",
    "goodput": "slurmguard.cli.goodput:goodput_cmd",
    "incident": "slurmguard.cli.incident:incident_grp",
    "fleet": "slurmguard.cli.fleet:fleet_grp",
    "policy": "slurmguard.cli.fleet:policy_grp",
    "repair": "slurmguard.cli.repair:repair_grp",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug logging.")
@click.option("-c", "--config", "config_path", metavar="PATH", envvar="SLURMGUARD_CONFIG",
              help="Config file (default /etc/slurmguard/slurmguard.toml; env SLURMGUARD_CONFIG).")
@click.version_option(__version__, prog_name="slurmguard")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, config_path: str | None) -> None:
    """Keep GPU time useful: node health checks, fleet policy and safe requeue for Slurm.

    \b
    Example:
      slurmguard check            # check this node with the built-in defaults
      slurmguard check --json     # the same, as JSON
    """
    ctx.obj = {"verbose": verbose, "config_path": config_path}


def main(argv: list[str] | None = None) -> None:
    verbose = "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    try:
        rv: Any = cli.main(args=argv, prog_name="slurmguard", standalone_mode=False)
    except SlurmguardError as exc:
        if verbose:
            raise
        click.echo(f"slurmguard: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("slurmguard: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug in slurmguard: one line, a distinct code
        if verbose:
            raise
        click.echo(f"slurmguard: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)", err=True)
        sys.exit(EXIT_CHECKER)
    sys.exit(rv if isinstance(rv, int) else 0)
