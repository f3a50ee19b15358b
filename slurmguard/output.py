"""What a command prints, one way: a result renders itself as text (tables and lines) or as JSON.

Every command ends with ``emit(result, as_json)``. A result is anything with ``to_text()``
and ``to_json()`` (:class:`Result` covers most commands: a JSON document and the text
blocks that show it; a command with a cheaper or streamed rendering writes its own class,
as `burnin report` does). Library code that renders a report (goodput) uses :func:`table`
from here, never from ``cli/``: this module sits below both.

Two JSON shapes, no others: a document (:func:`to_json`: keys sorted, indent 2, anything
unknown as ``str``) and a stream of one compact line per event (:func:`json_line`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Block", "Result", "Table", "emit", "iso", "json_line", "lines_json", "table", "to_json"]


class Renders(Protocol):
    """What :func:`emit` prints: each rendering is computed only when asked for."""

    def to_text(self) -> str: ...

    def to_json(self) -> str: ...


def to_json(data: Any) -> str:
    """A JSON document as every command writes one: keys sorted, indent 2, ``default=str``."""
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def json_line(data: Any) -> str:
    """One compact JSON line, keys sorted (streams: one event per line)."""
    return json.dumps(data, sort_keys=True, default=str)


def lines_json(data: dict[str, Any], prerendered: dict[str, list[str]] | None = None) -> str:
    """The document :func:`to_json` writes, except that each item of a top-level list sits on
    one compact line. ``json.dumps(indent=...)`` runs the pure-Python encoder (the C one never
    indents): over 10,000 nodes x 10 metrics that alone took 6-7 s of `burnin report --json`;
    one compact ``dumps`` per item runs in C. ``prerendered``: a key's items already encoded
    (docs/burnin.md, "Report at fleet scale")."""
    parts = []
    for key in sorted(data):
        value = data[key]
        lines = (prerendered or {}).get(key)
        if lines is None and isinstance(value, list) and value:
            lines = list(map(json_line, value))
        if lines:
            body = ",\n    ".join(lines)
            parts.append(f"  {json_line(key)}: [\n    {body}\n  ]")
        else:
            parts.append(f"  {json_line(key)}: {json_line(value)}")
    return "{\n" + ",\n".join(parts) + "\n}"


@dataclass(frozen=True)
class Table:
    """Rows under headers, laid out as tabulate's "simple" format by :func:`table`."""

    rows: Sequence[Sequence[Any]]
    headers: Sequence[str]
    wrap: Sequence[int | None] | None = None  # a column's wrap width (None: never wrapped)

    def __str__(self) -> str:
        return table(self.rows, self.headers, wrap=self.wrap)


Block = str | Table  # one paragraph of a result's text


@dataclass
class Result:
    """A command's answer: the JSON document, and the text blocks (lines, tables) that show it.

    ``data`` may be a callable so that an expensive document is built only for ``--json``;
    the blocks are joined by ``sep`` (a blank line between tables by default)."""

    data: Any
    blocks: Iterable[Block] | Callable[[], Iterable[Block]] = ()
    sep: str = "\n"

    def to_json(self) -> str:
        return to_json(self.data() if callable(self.data) else self.data)

    def to_text(self) -> str:
        blocks = self.blocks() if callable(self.blocks) else self.blocks
        return self.sep.join(str(b) for b in blocks)


def emit(result: Renders, as_json: bool) -> None:
    """Print ``result`` on stdout: its JSON with ``--json``, its text otherwise (an empty
    text prints nothing, not an empty line)."""
    import click

    text = result.to_json() if as_json else result.to_text()
    if text:
        click.echo(text)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str],
          wrap: Sequence[int | None] | None = None) -> str:
    """A plain-text table: tabulate's "simple" format.

    Tables of plain cells (printable ASCII text, ints, None) are laid out here, the same
    text tabulate writes (tests/test_cli_table.py holds the two equal): importing tabulate
    costs ~70 ms (its version string alone imports importlib.metadata), a tenth of a fleet
    `burnin report`. Anything else (wide or non-ASCII text, newlines, floats, ragged rows)
    goes to tabulate itself, and so does a table with wrapped columns (``wrap``)."""
    fast = None if wrap else _simple_table(rows, headers)
    if fast is not None:
        return fast
    from tabulate import tabulate

    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True,
                    maxcolwidths=list(wrap) if wrap else None)


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


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ``2026-12-02T15:40:00Z`` (None stays None)."""
    import time

    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
