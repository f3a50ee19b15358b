"""Episodes (what one failure is) and the fleet figures built on them (pure; docs/fleet.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.contract import format_reason
from slurmguard.fleet import episodes, figures
from slurmguard.fleet.history import Alert, Ev, History, Run

H = 3600.0
D = 86400.0


def _drain(at, source="gpu-xid", actor="slurmguard"):
    reason = format_reason(source, "x") if actor == "slurmguard" else "bad fan"
    return Ev(at, "drain", actor, source if actor == "slurmguard" else "", reason)


def _clear(at, actor="admin"):
    return Ev(at, "clear", actor)


def _fail(at, check="gpu-xid"):
    return Run(at, "unhealthy", checks=(check,))


@pytest.mark.parametrize("runs, events, expected", [
    # one failure: first failing run -> drain -> return; later failing runs belong to it
    ([_fail(100), _fail(200), _fail(5000)], [_drain(110), _clear(9000)],
     [("gpu-xid", 100, 110, 9000, "admin")]),
    # a second drain while out (a lemon drain, an admin's re-drain) is the same episode
    ([_fail(100)], [_drain(110), _drain(500, "lemon"), _clear(9000, "slurmguard")],
     [("gpu-xid", 100, 110, 9000, "slurmguard")]),
    # a failing run of another check: the start is the cause's own first failing run
    ([_fail(50, "ib-link"), _fail(100)], [_drain(110)], [("gpu-xid", 100, 110, None, None)]),
    # a failing run more than a day before the drain is another story
    ([_fail(0)], [_drain(2 * D)], [("gpu-xid", 2 * D, 2 * D, None, None)]),
    # a drain by an admin (no slurmguard reason): the actor is the cause
    ([], [_drain(10, actor="admin"), _clear(20)], [("admin", 10, 10, 20, "admin")]),
    # autonomous repair's return closes it (repair resumes the node and writes no clear);
    # the node's next fault is a new episode
    ([_fail(100), _fail(900)], [_drain(110), Ev(600, "repair_return", "slurmguard"), _drain(901)],
     [("gpu-xid", 100, 110, 600, "slurmguard"), ("gpu-xid", 900, 901, None, None)]),
    # a clear without a drain, failing runs without a drain: no episode
    ([_fail(10)], [_clear(20)], []),
    # two episodes: the second starts after the first's return, not at its failing runs
    ([_fail(10), _fail(30), _fail(100)], [_drain(11), _clear(50), _drain(101), _clear(200)],
     [("gpu-xid", 10, 11, 50, "admin"), ("gpu-xid", 100, 101, 200, "admin")]),
])
def test_node_episodes_table(runs, events, expected):
    eps = episodes.node_episodes("n1", runs, events)
    assert [(e.cause, e.start, e.drained_at, e.returned_at, e.returned_by) for e in eps] == expected


def test_a_shared_cause_is_one_incident_not_n_failures():
    nodes = [f"n{i}" for i in range(1, 6)]
    h = History(since=0, until=10 * D, first_seen=dict.fromkeys(nodes, 0.0))
    for i, n in enumerate(nodes):  # fs-mount on five nodes at once; a gpu-xid on n1 later
        h.runs[n] = [_fail(D + i, "fs-mount")]
        h.events[n] = [_drain(D + i + 1, "fs-mount"), _clear(D + 2 * H, "slurmguard")]
    h.runs["n1"].append(_fail(5 * D))
    h.events["n1"] += [_drain(5 * D + 1), _clear(5 * D + 6 * H)]
    h.alerts = [Alert(D + 10, D + 60, D + 3 * H, "fs-mount", "group:rack1", frozenset(nodes))]
    eps = episodes.build(h)
    assert sum(1 for e in eps if e.shared is not None) == 5
    rep = figures.report(eps, h.alerts, h.first_seen, h.since, h.until)
    assert rep["failures"] == 1 and rep["by_cause"] == {
        "gpu-xid": {"failures": 1, "per_1000_node_days": 20.0}}
    assert rep["shared_incidents"] == 1 and rep["shared_episodes"] == 5
    assert rep["node_days"] == 50.0 and rep["per_1000_node_days"] == 20.0
    # the shared drains still kept nodes out: they are in MTTR and out-of-service
    assert rep["mttr_by_cause"]["fs-mount"]["returned"] == 5
    assert rep["out_of_service"]["max"] > 0


def test_figures_node_days_rates_mttr_and_out_of_service():
    first = {"a": 0.0, "b": 0.0, "c": 5 * D}  # c joined half-way
    h = History(since=0, until=10 * D, first_seen=first)
    h.runs = {"a": [_fail(D), _fail(4 * D, "ib-link")], "b": [_fail(2 * D)]}
    h.events = {"a": [_drain(D), _clear(D + 2 * H), _drain(4 * D, "ib-link"),
                      _clear(4 * D + 4 * H, "slurmguard")],
                "b": [_drain(2 * D), _clear(2 * D + 10 * H)]}
    eps = episodes.build(h)
    rep = figures.report(eps, [], first, 0, 10 * D, key=lambda n: "r1" if n == "a" else "r2",
                         by="group")
    assert rep["node_days"] == 25.0 and rep["failures"] == 3
    assert rep["per_1000_node_days"] == 120.0
    assert rep["groups"] == {"r1": {"node_days": 10.0, "failures": 2, "per_1000_node_days": 200.0},
                             "r2": {"node_days": 15.0, "failures": 1,
                                    "per_1000_node_days": 66.667}}
    assert rep["mttr_by_cause"]["gpu-xid"] == {"returned": 2, "median_h": 6.0, "p90_h": 9.2,
                                               "mean_h": 6.0}
    assert rep["mttr_by_returner"]["slurmguard"]["median_h"] == 4.0
    assert rep["between_failures"]["pairs"] == 1 and rep["between_failures"]["median_days"] == 3.0
    assert rep["between_failures"]["histogram"]["1-7d"] == 1
    series = dict(rep["out_of_service"]["series"])
    assert series[D] == pytest.approx(2 * H / (2 * D), abs=1e-5)  # day 2: a out 2 h of 2 node-days
    assert series[6 * D] == 0.0


_EVENT = st.tuples(st.floats(0, 1000), st.sampled_from(["drain", "clear", "drain_refused"]),
                   st.sampled_from(["slurmguard", "admin"]))


@given(st.lists(_EVENT, max_size=30), st.lists(st.floats(0, 1000), max_size=30))
def test_episodes_never_overlap_and_start_before_their_drain(evs, fails):
    events = [Ev(at, kind, actor, "gpu-xid", format_reason("gpu-xid", "x"))
              for at, kind, actor in sorted(evs)]
    runs = [_fail(t) for t in sorted(fails)]
    eps = episodes.node_episodes("n", runs, events)
    assert len(eps) <= sum(1 for e in events if e.kind == "drain")
    for a, b in zip(eps, eps[1:], strict=False):
        assert a.returned_at is not None and a.returned_at <= b.start
    for e in eps:
        assert e.start <= e.drained_at and (e.returned_at is None or e.drained_at <= e.returned_at)
