"""[[group]] node patterns on the hook path: slurmguard.nodeset's own parser of the common forms
agrees with ClusterShell (which the hook path no longer imports for them), property-tested."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet, NodeSetParseError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmguard.nodeset import check, contains, names, parse_simple

prefix = st.sampled_from(["n", "gpu", "node-", "a1b", "dgx.h100-", "c"])
suffix = st.sampled_from(["", "", "-ib", "a"])


@st.composite
def a_range(draw) -> str:
    width = draw(st.integers(1, 4))
    lo = draw(st.integers(0, 120))
    hi = lo + draw(st.integers(0, 30))
    padded = draw(st.booleans())
    if padded and width > 1:
        return f"{lo:0{width}d}" + (f"-{hi:0{width}d}" if hi != lo else "")
    return f"{lo}" + (f"-{hi}" if hi != lo else "")


@st.composite
def a_pattern(draw) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            items.append(draw(prefix) + str(draw(st.integers(0, 200))) + draw(suffix))
        else:
            ranges = ",".join(draw(st.lists(a_range(), min_size=1, max_size=3)))
            items.append(f"{draw(prefix)}[{ranges}]{draw(suffix)}")
    return ",".join(items)


@st.composite
def a_node(draw) -> str:
    digits = draw(st.sampled_from(["{}", "{:02d}", "{:03d}", "{:04d}"])).format(draw(st.integers(0, 160)))
    return draw(prefix) + digits + draw(suffix)


@settings(max_examples=400, deadline=None)
@given(a_pattern(), st.lists(a_node(), min_size=1, max_size=6))
def test_membership_matches_clustershell(pattern: str, nodes: list[str]) -> None:
    assert parse_simple(pattern) is not None, pattern
    ns = NodeSet(pattern)
    for node in nodes + list(ns)[:3]:
        assert contains(pattern, node) == (node in ns), (node, pattern)


@settings(max_examples=300, deadline=None)
@given(a_pattern())
def test_names_without_clustershell_are_clustershells(pattern: str) -> None:
    """The fallback cap expands a partition's node set on the hook path (nodeset.names):
    the same members as ClusterShell, each once."""
    assert sorted(names(pattern)) == sorted(NodeSet(pattern))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="n0123456789[]-,@!&^ ab", min_size=1, max_size=16))
def test_whatever_the_simple_parser_accepts_clustershell_accepts(pattern: str) -> None:
    simple = parse_simple(pattern)
    assume(simple is not None)
    try:
        ns = NodeSet(pattern)
    except (NodeSetParseError, ValueError) as exc:  # pragma: no cover - the property failing
        raise AssertionError(f"{pattern!r} accepted here, refused by ClusterShell: {exc}") from None
    assert len(ns) >= 0


def test_other_forms_go_to_clustershell() -> None:
    assert parse_simple("n[1-2]x[3-4]") is None
    assert parse_simple("@rack1") is None
    assert parse_simple("n[1-8]!n3") is None
    assert contains("n[1-2]x[3-4]", "n1x3") and not contains("n[1-8]!n3", "n3")


def test_check_refuses_what_expand_refuses() -> None:
    import pytest

    from slurmguard.errors import InputError

    check("gpu[001-064],cpu7", source="group[0].nodes")
    for bad in ("n[1-", "-x[1-2]", "a..b[1-2]", "n[3-1]"):
        with pytest.raises(InputError):
            check(bad, source="group[0].nodes")
