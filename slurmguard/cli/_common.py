"""Small helpers shared by the admin commands: config loading, warnings, times.

Output (tables, JSON, ``emit``) is :mod:`slurmguard.output`, below cli/ so that library
reports use it too."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from slurmguard import config
from slurmguard.output import iso

if TYPE_CHECKING:
    from slurmguard.adapters.slurm.commands import SlurmCLI
    from slurmguard.store.api import Store

__all__ = ["ago", "is_tty", "iso", "load_config", "open_store", "optional_store", "parse_since", "slurm_of", "warn"]


def load_config(ctx: click.Context) -> config.Config:
    """The validated config named by the global ``-c`` (or SLURMGUARD_CONFIG / the default)."""
    root = ctx.find_root()
    path = (root.obj or {}).get("config_path")
    return config.load(path)


def open_store(cfg: config.Config) -> Store:
    """The configured store (SQLAlchemy is imported here, when a command needs it)."""
    from slurmguard.store.api import Store

    return Store.open(cfg)


def optional_store(cfg: config.Config, say: Callable[[str], None]) -> Store | None:
    """The store for a command that works without one: None when the server extra
    (SQLAlchemy) is not installed (silently), or when the store is configured but unusable
    (``say`` is told why, in one line)."""
    from slurmguard.errors import SlurmguardError

    try:
        return open_store(cfg)
    except ImportError:
        return None
    except (SlurmguardError, KeyError) as exc:
        say(getattr(exc, "message", None) or str(exc))
        return None


def slurm_of(cfg: config.Config, *, person: bool = False) -> SlurmCLI:
    """The Slurm commands, with the paths and timeout of ``[slurm]`` and ``policy.mode``'s
    choke point; ``person``: an admin's own drain or resume, which observe mode does not
    withhold (docs/policy.md, "Observe mode")."""
    from slurmguard.adapters.slurm.commands import SlurmCLI

    return SlurmCLI.from_config(cfg, person=person)


def warn(message: str) -> None:
    click.echo(f"slurmguard: {message}", err=True)


def is_tty() -> bool:
    return sys.stderr.isatty()


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``90s``/``30m``/``1h``/``7d``/``2w`` ago, or an ISO 8601 time (UTC when no zone) -> epoch."""
    import re
    import time
    from datetime import UTC, datetime

    from slurmguard.errors import InputError

    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--since: expected a duration like 1h, 30m, 7d or an ISO time, got {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def ago(ts: float | None, now: float | None = None) -> str:
    """A short relative age for tables: ``42s``, ``5m``, ``3h``, ``2d`` ago; ``-`` for never."""
    import time

    if ts is None:
        return "-"
    d = max(0.0, (time.time() if now is None else now) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if d >= size:
            return f"{int(d // size)}{unit} ago"
    return f"{int(d)}s ago"
