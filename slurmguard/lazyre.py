"""Regular expressions compiled on first use, for modules on the hook path.

The kernel-log and Xid parsers hold about twenty patterns; compiling them all at import costs
a few ms of every prolog, and a healthy node's hook (no new Xid line) uses none of them. A
``LazyPattern`` reads like the ``re.Pattern`` it stands for (``P.search(text)``, ``P.sub(...)``,
``P.pattern``); ``P.compiled`` is the real pattern where one is needed (``m.re is
P.compiled``, ``re.sub(P.compiled, ...)``).
"""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)``, done the first time the pattern is used."""

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:  # two threads may both compile: the same pattern either way
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def __getattr__(self, name: str) -> Any:  # search, match, sub, finditer, pattern, flags...
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._pattern!r}, {self._flags!r})"
