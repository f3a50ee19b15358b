"""Small helpers shared by the admin commands: config loading, output formatting."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from slurmguard import config


def load_config(ctx: click.Context) -> config.Config:
    """The validated config named by the global ``-c`` (or SLURMGUARD_CONFIG / the default)."""
    root = ctx.find_root()
    path = (root.obj or {}).get("config_path")
    return config.load(path)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table (tabulate, imported only when a table is printed)."""
    from tabulate import tabulate

    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)


def warn(message: str) -> None:
    click.echo(f"slurmguard: {message}", err=True)


def is_tty() -> bool:
    return sys.stderr.isatty()
