"""Node names and node sets (``gpu[001-064],cpu7``): the one place they are parsed and checked.

Every command and library function that takes a node list expands it with :func:`expand`,
which validates: a malformed set or a hostile name is an :class:`~slurmguard.errors.InputError`
naming where the value came from (``NODESET``, ``SLURM_JOB_NODELIST``, a config key) and the
value, in one line. An empty set is an error too, unless the caller says an empty list is a
normal answer (``allow_empty=True``: an empty ``ExcNodeList``, an alert with no members).

The node-name rule: letters, digits, ``.``, ``_``, ``-``; starting with a letter or digit
(``-x`` would read as an option, ``.x`` as a hidden or parent path); no ``..``; at most 128
characters. Names also become directory names in triage bundles and words on remote command
lines, so nothing else passes.

A set names at most :data:`MAX_NODES` (100,000) nodes: more than any cluster slurmguard
is built for, and few enough to expand in well under a second. The size is counted from
the text before anything is expanded (``n[1-99999999]`` is refused at once, where
expanding it took ClusterShell ten minutes of CPU).

Standard library only at import time (it is on the hook path); ClusterShell is imported when
a set is actually expanded or folded.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurmguard.errors import InputError
from slurmguard.lazyre import LazyPattern

_NODE_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
# A node set as Slurm writes it: n[1-4,7],gpu001 -- no spaces, no shell characters.
_NODESET_RE = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9_.,\-\[\]]{0,4095}")
MAX_NODES = 100_000
_BRACKET_RE = LazyPattern(r"\[([^\[\]]*)\]")


def is_node_name(name: object) -> bool:
    return isinstance(name, str) and bool(_NODE_RE.fullmatch(name)) and ".." not in name


def validate_node_name(name: object) -> str:
    """Return ``name`` when it is a plausible Slurm node name, else raise InputError."""
    if not is_node_name(name):
        raise InputError(f"node name: not a valid Slurm node name: {_show(name)}")
    return name  # type: ignore[return-value]


def validate_nodeset(nodeset: object) -> str:
    """Return ``nodeset`` (``gpu[001-064],cpu1``) when plausible, else raise InputError.

    A cheap textual check for passing a set on to Slurm unexpanded; :func:`expand` is the
    full one."""
    if not isinstance(nodeset, str) or not _NODESET_RE.fullmatch(nodeset):
        raise InputError(f"node set: not a valid Slurm node list: {_show(nodeset)}")
    return nodeset


def expand(nodeset: str, *, source: str = "NODESET", allow_empty: bool = False) -> list[str]:
    """The node names of ``nodeset``, sorted as ClusterShell sorts them, each validated.

    ``source`` names where the value came from in the error. Raises InputError for a
    malformed set, a hostile name, or (unless ``allow_empty``) an empty set.
    """
    if not nodeset or not nodeset.strip():
        if allow_empty:
            return []
        raise InputError(f"{source}: empty node set: {nodeset!r}")
    check_size(nodeset, source=source)
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        names = list(NodeSet(nodeset))
    except (NodeSetParseError, ValueError) as exc:
        raise InputError(f"{source}: not a node set: {nodeset!r} ({exc})") from None
    if not names and not allow_empty:
        raise InputError(f"{source}: empty node set: {nodeset!r}")
    for name in names:
        validate_node_name(name)
    return names


def size_bound(nodeset: str) -> int:
    """At least the number of names ``nodeset`` expands to, counted from its text: per
    comma-separated item, the product of its bracket groups' range sizes (an item without
    brackets counts 1). Never expands anything."""
    total, depth, start = 0, 0, 0
    parts = []
    for i, ch in enumerate(nodeset):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(nodeset[start:i])
            start = i + 1
    parts.append(nodeset[start:])
    for part in parts:
        count = 1
        for body in _BRACKET_RE.findall(part):
            size = 0
            for r in body.split(","):
                span, _, step = r.partition("/")  # ClusterShell's n[1-9/2]
                lo, dash, hi = span.partition("-")
                if lo.isdigit() and dash and hi.isdigit():
                    size += max(0, int(hi) - int(lo)) // (int(step) if step.isdigit()
                                                          and int(step) > 0 else 1) + 1
                else:
                    size += 1
            count *= max(1, size)
        total += count
    return total


def check_size(nodeset: str, *, source: str = "NODESET") -> None:
    """InputError naming ``source`` and the bound when ``nodeset`` names more than
    :data:`MAX_NODES` nodes."""
    n = size_bound(nodeset)
    if n > MAX_NODES:
        raise InputError(f"{source}: node set {_show(nodeset)} names {n:,} nodes, more than "
                         f"the bound of {MAX_NODES:,}")


def contains(pattern: str, node: str) -> bool:
    """Whether ``node`` is in the set ``pattern`` (without expanding it: cheap for
    ``gpu[0001-4096]`` on the hook path). ``pattern`` is assumed checked by :func:`check`.

    The common forms (:func:`parse_simple`) are matched here: ClusterShell's import costs
    the hook path about 10 ms on every job start; anything else goes to ClusterShell."""
    items = parse_simple(pattern)
    if items is None:
        from ClusterShell.NodeSet import NodeSet

        return node in NodeSet(pattern)
    for head, ranges, tail in items:
        if ranges is None:
            if node == head:
                return True
            continue
        if not (node.startswith(head) and node.endswith(tail)) or len(node) <= len(head) + len(tail):
            continue
        digits = node[len(head):len(node) - len(tail)]
        if not (digits.isascii() and digits.isdigit()):
            continue
        v = int(digits)
        for lo, hi in ranges:
            pad = len(lo) if lo[0] == "0" and len(lo) > 1 else 0
            if int(lo) <= v <= int(hi) and digits == str(v).zfill(pad):
                return True
    return False


def check(pattern: str, *, source: str = "NODESET") -> None:
    """Validate ``pattern`` as :func:`expand` does (InputError naming ``source``), without
    expanding (or importing ClusterShell for) the common forms."""
    check_size(pattern, source=source)
    items = parse_simple(pattern)
    if items is not None and all(_simple_names_ok(i) for i in items):
        return
    expand(pattern, source=source)


Simple = list[tuple[str, "list[tuple[str, str]] | None", str]]
_PART_RE = LazyPattern(r"[A-Za-z0-9_.\-]+")


def parse_simple(pattern: str) -> Simple | None:
    """The common node-set forms, parsed without ClusterShell: comma-separated ``name`` or
    ``prefix[1-4,07-09]suffix`` items, as (prefix, ranges or None, suffix). None for anything
    else (several bracket groups, nested brackets, @groups, operators): ClusterShell's job.
    Everything accepted here ClusterShell accepts with the same members (property-tested)."""
    items: Simple = []
    depth, start = 0, 0
    parts: list[str] = []
    for i, ch in enumerate(pattern):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        if depth not in (0, 1):
            return None
    parts.append(pattern[start:])
    if depth != 0:
        return None
    for part in parts:
        head, sep, rest = part.partition("[")
        if not sep:
            if not _PART_RE.fullmatch(part):
                return None
            items.append((part, None, ""))
            continue
        body, _, tail = rest.partition("]")
        if (not _PART_RE.fullmatch(head) or (tail and not _PART_RE.fullmatch(tail))
                or "[" in tail or "]" in tail):
            return None
        ranges = []
        for r in body.split(","):
            lo, dash, hi = r.partition("-")
            hi = hi if dash else lo
            if not (lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit()):
                return None
            if int(lo) > int(hi) or (lo[0] == "0" and len(lo) > 1 and len(hi) < len(lo)):
                return None
            ranges.append((lo, hi))
        items.append((head, ranges, tail))
    return items


def names(pattern: str, *, source: str = "NODESET") -> list[str]:
    """The names of ``pattern`` in its own order, each once; the common forms
    (:func:`parse_simple`) without ClusterShell (the hook path: the fallback cap expands a
    partition's node set), anything else through :func:`expand`."""
    items = parse_simple(pattern)
    if items is None or not all(_simple_names_ok(i) for i in items):
        return expand(pattern, source=source)
    check_size(pattern, source=source)
    out: dict[str, None] = {}
    for head, ranges, tail in items:
        if ranges is None:
            out[head] = None
            continue
        for lo, hi in ranges:
            pad = len(lo) if lo[0] == "0" and len(lo) > 1 else 0
            for v in range(int(lo), int(hi) + 1):
                out[f"{head}{str(v).zfill(pad)}{tail}"] = None
    return list(out)


def _simple_names_ok(item: tuple[str, list[tuple[str, str]] | None, str]) -> bool:
    head, ranges, tail = item
    if ranges is None:
        return is_node_name(head)
    # The shortest and longest names of the item pass the name rule: so do all between.
    return all(is_node_name(head + d + tail) for lo, hi in ranges for d in (lo, hi))


def fold(names: Iterable[str]) -> str:
    """The folded set of ``names`` (``n[1-3,7]``); "" for none."""
    names = list(names)
    if not names:
        return ""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(names))


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
