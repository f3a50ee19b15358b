"""A tqdm progress bar on stderr when it is a terminal; a plain iterator otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def bar(items: Iterable[T], *, total: int | None = None, desc: str = "",
        enabled: bool | None = None) -> Iterator[T]:
    """Iterate ``items`` with a progress bar when stderr is a TTY (and tqdm is installed)."""
    on = sys.stderr.isatty() if enabled is None else enabled
    if on:
        try:
            from tqdm import tqdm
        except ImportError:
            on = False
    if not on:
        yield from items
        return
    yield from tqdm(items, total=total, desc=desc, file=sys.stderr, leave=False,
                    disable=False, mininterval=0.2)
