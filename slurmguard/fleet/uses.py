"""Uses of the node risk score (each off by default; docs/fleet.md, "Uses"). Pure.

``risk.probation_mark``: an at-risk node carries the probation mark (``policy.probation_mark``:
the ``policy.probation_feature`` feature or the ``policy.probation_weight`` weight), so that
Slurm gives large jobs the safest nodes first. The mark is wanted while the node is on
probation *or* at risk; when neither holds any more it comes off (serve does it in its
policy pass). A node Slurm does not report is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def mark_changes(nodes: Iterable[str], *, probation: set[str], at_risk: set[str],
                 marked: Mapping[str, bool]) -> dict[str, bool]:
    """node -> True (put the mark on) or False (take it off), for the nodes whose mark must
    change; ``marked``: whether Slurm shows the mark now (absent: unknown, left alone)."""
    out: dict[str, bool] = {}
    for n in nodes:
        if n not in marked:
            continue
        want = n in probation or n in at_risk
        if want != marked[n]:
            out[n] = want
    return out
