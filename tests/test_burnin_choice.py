"""Which nodes `burnin submit` takes, opens and skips (slurmguard/burnin/submit.py `choose`):
a table over Slurm's node states as the adapter parses them. The acting half (reservation,
sbatch, the store) runs on a real cluster in tests/test_burnin_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest

from slurmguard.adapters.slurm.parse import NodeInfo
from slurmguard.burnin.submit import choose

INFOS = {i.name: i for i in (
    NodeInfo("n1", "idle"),
    NodeInfo("n2", "allocated"),
    NodeInfo("n3", "down"),
    NodeInfo("n4", "idle", frozenset({"NOT_RESPONDING"})),
    NodeInfo("n5", "idle", frozenset({"DRAIN"}), reason="bad DIMM, ticket 4711"),
    NodeInfo("n6", "idle", frozenset({"DRAIN"}), reason="slurmguard: gpu-xid: Xid 79"),
    NodeInfo("n7", "idle", frozenset({"DRAIN"}), reason="slurmguard: fs-mount: gone"),
    NodeInfo("n8", "idle"),
    NodeInfo("n9", "idle"),
    NodeInfo("n10", "idle"),
)}
FACTS: dict[str, Any] = {"awaiting": {"n6", "n10"}, "probation": {"n1"}, "suspects": {"n8", "n9"},
                         "rerun": {"n9"}, "at_risk": {"n1": 3.0}}
AWAITING, OPENED = "awaiting burn-in", "awaiting burn-in: opened in the reservation"
SUSPECT, RERUN = ("suspect: named slow by several jobs",
                  "re-run: a burn-in suspect, this run confirms or clears it")


@pytest.mark.parametrize("nodes, order, todo, reserve, skipped, notes", [
    # --idle: every idle node, and the drained ones of ours awaiting burn-in; awaiting
    # first, then suspects, then at risk; busy, DOWN, others' drains and ours not awaiting
    # are not even considered.
    (None, ["n10", "n6", "n8", "n9", "n1", "n4"], ["n10", "n6", "n8", "n9", "n1"], ["n6"],
     {"n4": "DOWN or not responding: skipped"},
     {"n10": AWAITING, "n6": OPENED, "n8": SUSPECT, "n9": RERUN, "n1": "submitted"}),
    # A NODESET: what was asked, once each, ordered the same way; each one that cannot run
    # a burn-in skipped with its reason (a busy node is submitted: its job waits).
    (["ghost", "n2", "n3", "n5", "n7", "n2", "n1"], ["n1", "ghost", "n2", "n3", "n5", "n7"],
     ["n1", "n2"], [],
     {"ghost": "not known to Slurm: skipped", "n3": "DOWN or not responding: skipped",
      "n5": "drained by someone else (bad DIMM, ticket 4711): skipped",
      "n7": "drained by slurmguard (slurmguard: fs-mount: gone) and not awaiting burn-in: skipped"},
     {"n1": "submitted", "n2": "submitted"}),
    # A drained node of ours awaiting burn-in, asked by name: opened in a reservation.
    (["n6", "n9"], ["n6", "n9"], ["n6", "n9"], ["n6"], {}, {"n6": OPENED, "n9": RERUN}),
    ([], [], [], [], {}, {}),
])
def test_choose(nodes: list[str] | None, order: list[str], todo: list[str], reserve: list[str],
                skipped: dict[str, str], notes: dict[str, str]) -> None:
    c = choose(INFOS, nodes, **FACTS)
    assert list(c.order) == order
    assert list(c.todo) == todo and list(c.reserve) == reserve
    assert dict(c.skipped) == skipped and [n for n, _ in c.skipped] == [
        n for n in order if n in skipped]
    assert dict(c.notes) == notes
    assert set(c.todo) | set(dict(c.skipped)) == set(c.order)  # every node accounted for once
