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
    """A plain-text table: tabulate's "simple" format.

    Tables of plain cells (printable ASCII text, ints, None) are laid out here, the same
    text tabulate writes (tests/test_cli_table.py holds the two equal): importing tabulate
    costs ~70 ms (its version string alone imports importlib.metadata), a tenth of a fleet
    `burnin report`. Anything else (wide or non-ASCII text, newlines, floats, ragged rows)
    goes to tabulate itself."""
    fast = _simple_table(rows, headers)
    if fast is not None:
        return fast
    from tabulate import tabulate

    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)


def _plain(cell: Any) -> str | None:
    """A cell as tabulate writes it with numparse off, or None when it is not a plain cell."""
    if cell is None:
        return ""
    t = type(cell)
    if t is str:
        return cell.strip() if cell.isascii() and cell.isprintable() else None
    if t is int or t is bool:
        return str(cell)
    return None


def _simple_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str | None:
    heads = list(headers)  # headers are not stripped
    if not all(type(h) is str and h.isascii() and h.isprintable() for h in heads):
        return None
    body = []
    for row in rows:
        if len(row) != len(heads):
            return None
        cells = [_plain(c) for c in row]
        if None in cells:
            return None
        body.append(cells)
    widths = [len(h) + 2 for h in heads]  # tabulate pads headers by 2
    for cells in body:
        widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(heads, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
              for cells in body]
    return "\n".join(lines)


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


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ``2026-12-02T15:40:00Z`` (None stays None)."""
    import time

    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


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
