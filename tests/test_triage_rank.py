"""The pure ranking of `slurmguard triage`: a table of inputs -> order and evidence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slurmguard.store.api import AlertRow, NodeSummary
from slurmguard.triage.rank import rank, slow_nodes

NOW = 1_800_000_000.0


def summ(name: str, *, failures: int = 0, lemon: bool = False, burnin: bool = False,
         last: str = "healthy", failing: tuple[str, ...] = ()) -> NodeSummary:
    return NodeSummary(name=name, last_seen=NOW, last_health=last, last_hook="healthcheck",
                       last_reason=f"{failing[0]}: bad" if failing else "", failing_checks=failing,
                       failures=failures, lemon=lemon, lemon_reason="3 failures in 1h" if lemon else None,
                       burnin_required=burnin, probation=False, probation_passes=0)


def alert(i: int, cause: str, nodes: str, count: int) -> AlertRow:
    return AlertRow(i, NOW, NOW, None, cause, "partition:gpu", nodes, count, f"{cause} failing")


def test_table() -> None:
    summaries = [
        summ("n1"),  # nothing against it: not listed
        summ("n2", failures=2),
        summ("n3", failures=4, lemon=True, last="unhealthy", failing=("gpu-xid",)),
        summ("n4", failures=1, last="unhealthy", failing=("fs-mount",)),
        summ("n5", failures=1, last="unhealthy", failing=("fs-mount",)),
        summ("n6", burnin=True),
    ]
    speeds = {"healthcheck": {"n1": 2.0, "n2": 2.1, "n4": 2.0, "n5": 1.9, "n7": 9.0}}
    out = rank(summaries, [alert(7, "fs-mount", "n[4-5]", 2)], speeds)
    order = [s.node for s in out]
    assert order == ["n3", "n7", "n2", "n6", "n4", "n5"]
    by = {s.node: s for s in out}
    assert by["n3"].score == 50 + 40 + 15
    assert any("lemon" in e for e in by["n3"].evidence)
    assert any("failing now: gpu-xid" == e for e in by["n3"].evidence)
    assert by["n4"].score == (10 + 15) / 2 and by["n4"].alerts == (7,)
    assert any("fleet alert #7" in e and "shared cause" in e for e in by["n4"].evidence)
    assert any(e.startswith("slow: healthcheck takes 9.0s") for e in by["n7"].evidence)
    assert "n1" not in by


def test_slow_needs_enough_nodes_and_absolute_gap() -> None:
    assert slow_nodes({"prolog": {"a": 0.1, "b": 9.0}}) == {}  # two nodes: no fleet baseline
    assert slow_nodes({"prolog": {"a": 0.1, "b": 0.1, "c": 0.5}}) == {}  # 5x but only 0.4 s
    assert slow_nodes({"prolog": {"a": 1.0, "b": 1.0, "c": 3.5}}) == {"c": ("prolog", 3.5, 1.0)}


@given(st.integers(0, 30), st.integers(0, 30), st.booleans(), st.booleans())
def test_more_failures_never_rank_lower(f1: int, extra: int, lemon: bool, unhealthy: bool) -> None:
    last = "unhealthy" if unhealthy else "healthy"
    a = summ("a", failures=f1, lemon=lemon, last=last)
    b = summ("b", failures=f1 + extra, lemon=lemon, last=last)
    scores = {s.node: s.score for s in rank([a, b])}
    assert scores.get("b", 0) >= scores.get("a", 0)


def test_a_node_at_risk_is_a_suspect_with_its_factors() -> None:
    """A risk score at or above the level adds a fifth of it (at most 20) and its top factors;
    below the level it adds nothing (docs/triage.md)."""
    from slurmguard.fleet.risk import RiskInputs, score

    hot = score(RiskInputs(failures=3, warning_days={"links": 1.5}))  # 45 + 15 = 60
    cool = score(RiskInputs(failures=2))  # 30: below 40
    out = rank([summ("n1"), summ("n2", failures=1)], [], {}, {"n1": hot, "n2": cool, "n3": hot},
               40.0)
    by = {s.node: s for s in out}
    assert by["n1"].score == 12 and by["n1"].evidence == ("risk 60: failures +45, links +15",)
    assert by["n2"].score == 10 and not any(e.startswith("risk") for e in by["n2"].evidence)
    assert [s.node for s in out] == ["n1", "n3", "n2"]
    top = score(RiskInputs(failures=5, burnin_failed=3, warning_days={"links": 9}))  # 100
    assert rank([], [], {}, {"n1": top}, 40.0)[0].score == 20
