"""LazyPattern (slurmguard/lazyre.py) behaves as the re.Pattern it stands for, compiled once."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from slurmguard.adapters import kmsg
from slurmguard.checks import xid, xid_table
from slurmguard.lazyre import LazyPattern
from slurmguard.sources import xidline

# Every lazy pattern of the hook path, with the plain compiled pattern it must equal.
PATTERNS = [v for mod in (kmsg, xid, xid_table, xidline) for v in vars(mod).values()
            if isinstance(v, LazyPattern)]


def test_the_hook_path_patterns_are_lazy():
    assert len(PATTERNS) >= 19  # kmsg 8, xid + xidline 5, xid_table 6


@given(st.sampled_from(PATTERNS), st.text(alphabet="NVRM: Xid(PCI0a-f:.,)= 0123456789kernel[]<>-T",
                                          max_size=80))
def test_search_match_and_sub_equal_the_compiled_pattern(p, text):
    real = re.compile(p.pattern, p.flags)
    for method in ("search", "match", "fullmatch"):
        a, b = getattr(p, method)(text), getattr(real, method)(text)
        assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups()))
    assert p.sub("", text, count=1) == real.sub("", text, count=1)


def test_compiled_once_and_identity():
    p = LazyPattern(r"x(\d+)", re.IGNORECASE)
    assert p._compiled is None  # nothing compiled at definition
    m = p.search("aX12")
    assert m is not None and m.group(1) == "12" and m.re is p.compiled
    assert p.compiled is p.compiled and p.flags & re.IGNORECASE
    assert repr(p) == "LazyPattern('x(\\\\d+)', re.IGNORECASE)"
