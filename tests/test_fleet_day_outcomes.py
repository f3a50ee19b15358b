"""The fleet day's repair figures and prediction lead times (support/fleet_day_outcomes.py),
pure, on hand-made ledgers."""

from __future__ import annotations

from itertools import count

from hypothesis import given
from hypothesis import strategies as st
from support.fleet_day_outcomes import Injected, lead_times, repair_figures

from slurmguard.repair.ledger import episodes
from slurmguard.store.rows import EventRow


def ledger(*steps: tuple[float, str, str]) -> list:
    """serve's ledger of (at, node, kind) as the product's reader makes its repair episodes:
    each repair step names the node's last drain as its episode, as repair does."""
    ids, rows, last = count(1), [], {}
    for at, node, kind in sorted(steps):
        i = next(ids)
        if kind == "drain":
            last[node] = i
        details = {} if kind == "drain" else {"episode": last[node]}
        rows.append(EventRow(i, at, node, kind, "slurmguard", "slurmguard", "", "", details))
    return episodes(rows)


def test_a_repaired_fault_is_returned_after_one_reboot_and_an_ib_link_is_ticketed():
    xid = Injected("xid79", "n1", on=10.0, off=15.0, by_reboot=True)
    ib = Injected("ib-link", "n2", on=12.0, off=None)
    events = [(11.0, "n1", "drain"), (13.0, "n1", "repair_start"), (30.0, "n1", "repair_return"),
              (13.0, "n2", "drain"), (14.0, "n2", "repair_start"), (40.0, "n2", "repair_ticket")]
    fig = repair_figures([xid, ib], ledger(*events), [("n1", 15.0), ("n2", 20.0)])
    assert fig["returned"] == ["xid79@n1"] and fig["ticketed"] == ["ib-link@n2"]
    assert fig["drain_to_return_s_by_cause"] == {"gpu-xid:79": [19.0]}
    assert fig["rebooted_twice"] == [] and fig["returned_with_fault"] == []
    assert [r["reboots"] for r in fig["by_fault"]] == [1, 1]


def test_a_return_while_the_fault_persists_and_a_second_reboot_are_named():
    thermal = Injected("thermal", "n3", on=5.0, off=None)
    events = [(6.0, "n3", "drain"), (50.0, "n3", "repair_return")]
    fig = repair_figures([thermal], ledger(*events), [("n3", 10.0), ("n3", 30.0)])
    assert fig["returned_with_fault"] == ["n3@50.0"]
    assert fig["rebooted_twice"] == ["thermal@n3"]


def test_a_fault_gone_by_itself_is_back_by_itself_and_an_undrained_one_is_said():
    flap = Injected("nvlink", "n4", on=5.0, off=12.0, flap=True)
    lost = Injected("gpu-lost", "n5", on=5.0, off=None)
    fig = repair_figures([flap, lost], ledger((6.0, "n4", "drain")), [])
    assert [r["outcome"] for r in fig["by_fault"]] == ["back by itself", "not drained"]


def test_a_prediction_before_the_drain_is_a_lead_time_and_one_on_a_healthy_node_is_false():
    f = Injected("thermal", "n1", on=20.0, off=None)
    events = [(25.0, "n1", "drain")]
    out = lead_times([f], events, [("slow-node suspicion", "n1", 21.0),
                                   ("slow-node suspicion", "n1", 22.0), ("risk", "n9", 3.0)])
    assert out["by_fault"] == [{"fault": "thermal@n1", "predicted_by": "slow-node suspicion",
                                "lead_s": 4.0}]
    assert out["by_source"] == {
        "slow-node suspicion": {"made": 1, "came_true": 1, "false": 0, "not_borne_out": 0},
        "risk": {"made": 1, "came_true": 0, "false": 1, "not_borne_out": 0}}
    assert out["false_nodes"] == ["n9"] and out["predicted"] == 1


def test_a_probation_after_the_first_episode_predicts_the_second_not_the_first():
    first = Injected("nvlink", "n2", on=5.0, off=12.0, flap=True)
    second = Injected("nvlink", "n2", on=40.0, off=None, flap=True)
    events = [(6.0, "n2", "drain"), (41.0, "n2", "drain")]
    out = lead_times([first, second], events, [("probation", "n2", 14.0)])
    assert [r["lead_s"] for r in out["by_fault"]] == [None, 27.0]


@given(st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.floats(0, 100)), max_size=6))
def test_with_no_prediction_no_fault_has_a_lead_time(faults):
    fs = [Injected("xid79", n, on=t, off=None) for n, t in faults]
    out = lead_times(fs, [(t + 1.0, n, "drain") for n, t in faults], [])
    assert out["predicted"] == 0 and out["by_source"] == {}
    assert all(r["lead_s"] is None for r in out["by_fault"])
