"""The CLI's own layout of plain tables (slurmguard/output.py) is tabulate's "simple"
format, byte for byte; other tables go to tabulate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from slurmguard.output import _simple_table, table

text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
cell = st.one_of(text, st.sampled_from(["", " ", "  x  ", "-", "None"]), st.none(),
                 st.integers(-10**6, 10**9), st.booleans())


@st.composite
def tables(draw):
    headers = draw(st.lists(text, min_size=1, max_size=6))
    rows = draw(st.lists(st.lists(cell, min_size=len(headers), max_size=len(headers)),
                         max_size=8))
    return rows, headers


def _ref(rows, headers) -> str:
    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)


@settings(max_examples=400, deadline=None)
@given(tables())
def test_plain_tables_are_laid_out_as_tabulate_does(t) -> None:
    rows, headers = t
    fast = _simple_table(rows, headers)
    assert fast is not None
    assert fast == _ref(rows, headers)


@given(st.sampled_from([
    ([["caf\u00e9", "x"]], ["a", "b"]),          # non-ASCII: tabulate measures its width
    ([["two\nlines", "x"]], ["a", "b"]),          # multi-line cells
    ([["\x1b[1mbold\x1b[0m", "x"]], ["a", "b"]),  # ANSI colour codes
    ([[1.5, "x"]], ["a", "b"]),                   # floats
    ([["a"]], ["a", "b"]),                        # ragged rows
    ([["a", "b", "c"]], ["a", "b"]),
]))
def test_other_tables_go_to_tabulate(t) -> None:
    rows, headers = t
    assert _simple_table(rows, headers) is None
    assert table(rows, headers) == _ref(rows, headers)
