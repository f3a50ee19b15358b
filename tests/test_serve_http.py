"""serve's request-head parser (serve/httpd.parse_head), checked against the standard
library's (http.client.parse_headers, what the handlers used before) by Hypothesis, and its
refusals. The same heads sent to a real serve are in tests/faults/test_hostile_serve.py."""

from __future__ import annotations

import http.client
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.serve.httpd import parse_head

TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NAMES = st.one_of(st.sampled_from(["Authorization", "authorization", "Content-Length",
                                   "CONTENT-LENGTH", "Connection", "Expect", "Host"]),
                  st.text(TOKEN_CHARS, min_size=1, max_size=12))
# Field values: visible latin-1 and spaces, no CR or LF (those end the line).
VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                               blacklist_characters="\x7f"), max_size=30)


@given(st.lists(st.tuples(NAMES, VALUES), max_size=12), st.sampled_from([b"\r\n", b"\n"]))
def test_fields_are_read_as_the_standard_library_reads_them(fields, eol) -> None:
    block = eol.join(f"{n}: {v}".encode("latin-1") for n, v in fields)
    ours = parse_head(block)
    theirs = http.client.parse_headers(io.BytesIO(block + b"\r\n\r\n"))
    for name, _ in fields:
        for asked in (name, name.lower(), name.upper()):
            want = theirs.get(asked)
            assert ours.get(asked) == (want.strip(" \t") if want is not None else None)
    assert ours.get("X-Not-Sent-Here-At-All") is None
    assert ours.get("X-Not-Sent-Here-At-All", "dflt") == "dflt"


def test_folded_repeated_and_odd_fields() -> None:
    h = parse_head(b"Host: a\r\nAuthorization: Bearer\r\n  tok123\r\n"
                   b"authorization: Bearer other\r\nX-Empty:\r\nX-Tabs:\t v \t")
    assert h.get("AUTHORIZATION") == "Bearer tok123"  # folded, and the first of two
    assert h.get("x-empty") == "" and h.get("X-Tabs") == "v"
    assert "host" in h and "Host" in h and "Nope" not in h


@pytest.mark.parametrize("block", [
    b"Content-Length : 5",  # white space before the colon (RFC 9112: 400)
    b"no colon here",
    b": no name",
    b" folded before any field: x",
    b"Bad Name: x",
    b"X-\xff: latin-1 in a name",
    b"\r\n".join(b"X-%d: v" % i for i in range(101)),  # more than 100 fields
])
def test_malformed_heads_are_refused(block: bytes) -> None:
    with pytest.raises(ValueError):
        parse_head(block)


def test_a_hundred_fields_are_accepted() -> None:
    assert parse_head(b"\r\n".join(b"X-%d: v" % i for i in range(100))).get("x-99") == "v"
