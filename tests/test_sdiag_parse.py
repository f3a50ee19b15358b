"""`sdiag` parsing for the scale harness's footprint (tests/support/footprint.py): RPCs by
message type, only from that section, whatever else sdiag prints around it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from support.footprint import client_rpc_us, parse_sdiag, percentile, split_rpcs

SAMPLE = """*******************************************************
sdiag output at Sat Dec 05 01:21:25 2026 (1764897685)
Data since      Sat Dec 05 01:21:15 2026 (1764897675)
*******************************************************
Server thread count:  1
Jobs submitted: 1

Remote Procedure Call statistics by message type
	REQUEST_FED_INFO                        ( 2049) count:19     ave_time:145    total_time:2755
	REQUEST_NODE_INFO                       ( 2007) count:5      ave_time:1160   total_time:5800
	MESSAGE_EPILOG_COMPLETE                 ( 6012) count:1      ave_time:190    total_time:190

Remote Procedure Call statistics by user
	root            (       0) count:26     ave_time:336    total_time:8745

Pending RPC statistics
	No pending RPCs
"""


def test_the_by_type_section_is_read_and_the_by_user_one_is_not():
    got = parse_sdiag(SAMPLE)
    assert {t: c.count for t, c in got.items()} == {
        "REQUEST_FED_INFO": 19, "REQUEST_NODE_INFO": 5, "MESSAGE_EPILOG_COMPLETE": 1}
    assert got["REQUEST_NODE_INFO"].total_us == 5800
    assert "root" not in got
    assert split_rpcs(got) == (20, 5)  # FED_INFO and the epilog are Slurm's own
    assert client_rpc_us(got) == 5800  # the server time of the client's RPCs alone


def test_no_section_is_no_counts():
    assert parse_sdiag("sdiag: error: Unable to contact slurm controller\n") == {}


names = st.from_regex(r"[A-Z][A-Z_]{2,30}", fullmatch=True)


@given(st.dictionaries(names, st.tuples(st.integers(0, 10**6), st.integers(0, 10**9)), max_size=20),
       st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200))
def test_every_line_of_the_section_is_counted_and_nothing_else(rows, noise):
    body = "".join(f"\t{t:<40}( {i:4d}) count:{c:<6d} ave_time:{tt // max(c, 1)}  total_time:{tt}\n"
                   for i, (t, (c, tt)) in enumerate(rows.items()))
    # Noise before the section, and a by-user section after it shaped like the same lines.
    text = (noise.replace("Remote Procedure", "") + "\nRemote Procedure Call statistics by message type\n"
            + body + "\nRemote Procedure Call statistics by user\n\tBOGUS_USER  ( 0) count:9 ave_time:1 total_time:9\n")
    got = parse_sdiag(text)
    assert {t: (c.count, c.total_us) for t, c in got.items()} == rows


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50), st.floats(0, 1))
def test_a_percentile_is_one_of_the_values_and_ordered(xs, q):
    p = percentile(xs, q)
    assert p in xs and min(xs) <= p <= max(xs)
    assert percentile(xs, 1.0) == max(xs) and percentile(xs, 0.0) == min(xs)
