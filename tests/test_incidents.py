"""Incidents (pure): which runs a fault ended, the four costs, the timeline, the sums
(slurmguard/fleet/incidents.py, docs/incidents.md)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurmguard.fleet import incidents
from slurmguard.fleet.episodes import Episode
from slurmguard.fleet.history import Ev
from slurmguard.fleet.incidents import Job, JobRun, Signal
from slurmguard.repair.ledger import episodes as repair_episodes
from slurmguard.store.rows import EventRow

H = 3600.0


def ep(node="n1", start=100.0, drained=110.0, back=5000.0, cause="gpu-xid", shared=None):
    return Episode(node, cause, start, drained, "slurmguard", back, "slurmguard" if back else None,
                   shared)


def run(start, end, nodes=("n1", "n2"), gpus=16, state="NODE_FAIL", **parts):
    return JobRun(start, end, tuple(nodes), gpus, state, {"productive": 10.0, **parts})


def job(jid, *runs, state="COMPLETED"):
    return Job(jid, state, tuple(runs))


def costs(inc):
    return {k: round(v, 6) for k, v in inc.cost.items()}


@pytest.mark.parametrize("runs, state, expected", [
    # the run on the node when it was drained: its lost work, its hang, the wait + start-up
    ([run(0, 120, lost_work=30, drained_node=10), run(150, 400, state="COMPLETED", restart=5)],
     "COMPLETED", {"redone": 30 * 16, "detect": 10 * 16, "waiting": (30 + 5) * 16}),
    # a run that ended within drain_window before the drain (the epilog found the Xid)
    ([run(0, 100, lost_work=30), run(150, 400, state="COMPLETED")], "COMPLETED",
     {"redone": 30 * 16, "detect": 0.0, "waiting": 50 * 16}),
    # the job's last run, completed: a drain after it ended it nothing
    ([run(0, 105, state="COMPLETED")], "COMPLETED", {"redone": 0.0, "detect": 0.0, "waiting": 0.0}),
    # the job failed for good on the node: no wait, it never ran again
    ([run(0, 120, state="FAILED", lost_work=40, drained_node=5)], "FAILED",
     {"redone": 40 * 16, "detect": 5 * 16, "waiting": 0.0}),
    # a run on other nodes is not this incident's
    ([run(0, 120, nodes=("n3",), lost_work=40)], "FAILED",
     {"redone": 0.0, "detect": 0.0, "waiting": 0.0}),
    # a run that started after the drain is not hit
    ([run(200, 300, lost_work=40)], "FAILED", {"redone": 0.0, "detect": 0.0, "waiting": 0.0}),
])
def test_job_costs_table(runs, state, expected):
    [inc] = incidents.build([ep()], [job("7", *runs, state=state)], until=10_000.0,
                            node_gpus={"n1": 8})
    got = costs(inc)
    assert {k: got[k] for k in expected} == pytest.approx(expected)
    assert got["out_of_service"] == (5000 - 110) * 8


def test_out_of_service_runs_to_the_window_end_while_out():
    [inc] = incidents.build([ep(back=None)], [], until=1110.0, node_gpus={"n1": 8})
    assert inc.cost["out_of_service"] == 1000 * 8 and inc.outcome == "out"
    assert inc.timeline[-1].what == "n1: still out"


def test_a_run_hit_by_two_drains_belongs_to_the_earliest():
    j = job("7", run(0, 120, lost_work=30), run(150, 200, state="COMPLETED"))
    a, b = incidents.build([ep("n1", drained=110), ep("n2", start=90, drained=115)], [j],
                           until=10_000.0)
    assert a.id == "n2-115" and b.id == "n1-110"  # n2's first signal is earlier
    assert b.cost["redone"] == 30 * 16 and a.cost["redone"] == 0.0


def test_shared_cause_is_one_incident_with_its_episodes():
    eps = [ep(f"n{i}", start=100 + i, drained=110 + i, cause="fs-mount", shared=0)
           for i in range(1, 4)] + [ep("n9", cause="gpu-xid")]
    incs = incidents.build(eps, [], until=10_000.0, node_gpus=dict.fromkeys(
        ["n1", "n2", "n3", "n9"], 4))
    shared = [i for i in incs if i.shared]
    assert len(incs) == 2 and len(shared) == 1
    [s] = shared
    assert s.nodes == ("n1", "n2", "n3") and s.id == "shared-fs-mount-111"
    assert s.cost["out_of_service"] == sum((5000 - 110 - i) * 4 for i in range(1, 4))


def test_first_signal_is_the_earliest_sign_within_the_lookback():
    sig = {"n1": [Signal(50.0, "burn-in verdict failed", "store: burn-in"),
                  Signal(110.0 - 2 * 86400, "too old", "store: burn-in")]}
    [inc] = incidents.build([ep(start=100)], [], until=9000.0, signals=sig)
    assert inc.first_signal.what == "burn-in verdict failed"
    [inc] = incidents.build([ep(start=110)], [], until=9000.0)
    assert inc.first_signal.source == "store: ledger"  # no failing run before the drain
    # a sign from before the node's previous return is the previous episode's
    old, new = ep(start=110, drained=110, back=400), ep(start=1010, drained=1010, back=5000)
    sig = {"n1": [Signal(105.0, "Xid 79", "kernel log"), Signal(990.0, "Xid 48", "kernel log")]}
    a, b = incidents.build([old, new], [], until=9000.0, signals=sig)
    assert (a.first_signal.what, b.first_signal.what) == ("Xid 79", "Xid 48")
    sig["n1"].pop()
    _, b = incidents.build([old, new], [], until=9000.0, signals=sig)
    assert b.first_signal.source == "store: ledger"


def test_timeline_has_the_node_lane_and_a_lane_per_job():
    r1 = JobRun(0, 120, ("n1", "n2"), 16, "REQUEUED", {"lost_work": 6.0, "drained_node": 2.0},
                3, 2.0, 0, 23, {"notice_latency_s": [0.8], "checkpoint_now_s": [0.1],
                                "steps_redone": 3})
    r2 = JobRun(140, 300, ("n2", "n3"), 16, "COMPLETED", {"restart": 4.0})
    evs = {"n1": [Ev(110, "drain", "slurmguard", "gpu-xid", "slurmguard: gpu-xid: Xid 79"),
                  Ev(200, "repair_rung", "slurmguard", "", "reboot (attempt 1)"),
                  Ev(300, "repair_ticket", "slurmguard", "", "permanent"),
                  Ev(9000, "probation_start", "slurmguard", "probation", "x")]}
    # what the repair ledger's reader makes of the same steps (the outcome reads it)
    ledger = [EventRow(1, 110, "n1", "drain", "slurmguard", "slurmguard", "gpu-xid", "", {}),
              EventRow(2, 200, "n1", "repair_rung", "slurmguard", "slurmguard", "", "",
                       {"episode": 1, "rung": "reboot"}),
              EventRow(3, 300, "n1", "repair_ticket", "slurmguard", "slurmguard", "", "",
                       {"episode": 1})]
    repairs = {"n1": repair_episodes(ledger)}
    [inc] = incidents.build([ep(back=None)], [Job("7", "COMPLETED", (r1, r2))], until=5000.0,
                            events=evs, repairs=repairs)
    lanes = {s.lane for s in inc.timeline}
    assert lanes == {"node", "job 7"}
    whats = [s.what for s in inc.timeline]
    assert whats[0] == "run 0 started on n1,n2 (16 GPUs)"  # the job was there before it
    assert [s.what for s in inc.timeline if s.lane == "node"][0].startswith("first bad signal")
    assert any(w.startswith("drained by slurmguard: slurmguard: gpu-xid") for w in whats)
    assert "drain notice arrived 0.8 s after the drain" in whats
    assert any(w.startswith("run 0 ended REQUEUED on n1,n2; 3 step(s) to redo") for w in whats)
    assert "ran again on n2,n3 after 20 s waiting" in whats
    assert inc.outcome == "ticket"
    evs["n1"].append(Ev(4000, "clear", "admin", "", "new GPU"))  # people fixed it: returned
    [inc] = incidents.build([ep(back=4000)], [Job("7", "COMPLETED", (r1, r2))], until=5000.0,
                            events=evs, repairs=repairs)
    assert inc.outcome == "returned"
    assert not any("probation" in w for w in whats)  # never returned: no probation of it
    assert [s.at for s in inc.timeline] == sorted(s.at for s in inc.timeline)


def test_sums_by_cause_and_week():
    incs = incidents.build([ep("n1"), ep("n2", start=8 * 86400, drained=8 * 86400 + 5,
                                         back=9 * 86400, cause="ib-link")], [], until=10 * 86400,
                           node_gpus={"n1": 8, "n2": 8})
    by_cause = incidents.sums(incs, "cause")
    assert set(by_cause) == {"gpu-xid", "ib-link"} and by_cause["ib-link"]["incidents"] == 1
    assert incidents.week(0) == "1970-W01" and len(incidents.sums(incs, "week")) == 2


# -- invariants -------------------------------------------------------------------------------
nodes = st.sampled_from(["n1", "n2", "n3", "n4"])


@st.composite
def histories(draw):
    eps = []
    for node in ["n1", "n2", "n3", "n4"]:
        t = 0.0
        for _ in range(draw(st.integers(0, 3))):
            start = t + draw(st.floats(1, 5000))
            drained = start + draw(st.floats(0, 500))
            back = drained + draw(st.floats(1, 5000))
            eps.append(Episode(node, "gpu-xid", start, drained, "slurmguard", back, "slurmguard",
                               draw(st.sampled_from([None, None, 0]))))
            t = back
    jobs = []
    for j in range(draw(st.integers(0, 6))):
        runs, t = [], draw(st.floats(0, 20000))
        for _ in range(draw(st.integers(1, 4))):
            d = draw(st.floats(10, 4000))
            parts = {k: draw(st.floats(0, d / 6)) for k in
                     ("lost_work", "drained_node", "restart", "stall", "other")}
            parts["productive"] = d - sum(parts.values())
            runs.append(JobRun(t, t + d, tuple(draw(st.sets(nodes, min_size=1, max_size=3))),
                               draw(st.integers(0, 16)), "NODE_FAIL", parts))
            t += d + draw(st.floats(0, 600))
        jobs.append(Job(str(j), draw(st.sampled_from(["COMPLETED", "FAILED"])), tuple(runs)))
    return eps, jobs


@settings(max_examples=150, deadline=None)
@given(histories())
def test_costs_are_non_negative_add_up_and_each_episode_and_run_is_counted_once(h):
    eps, jobs = h
    incs = incidents.build(eps, jobs, until=60000.0)
    assert sorted(id(e) for i in incs for e in i.episodes) == sorted(id(e) for e in eps)
    runs = [(x.job_id, x.run) for i in incs for x in i.hits]
    assert len(runs) == len(set(runs))
    for i in incs:
        assert all(v >= 0 and math.isfinite(v) for v in i.cost.values())
        for k in incidents.JOB_COSTS:
            assert i.cost[k] == pytest.approx(sum(x.cost[k] for x in i.hits))
    b = incidents.badput(jobs, incs)
    assert b["explained"] <= b["goodput_badput"] + 1e-6
    assert b["explained"] + b["no_incident"] == pytest.approx(b["goodput_badput"])
    total = incidents.sums(incs, "cause")
    assert sum(r["incidents"] for r in total.values()) == len(incs)
    assert sum(sum(r[k] for k in incidents.COSTS) for r in total.values()) == pytest.approx(
        sum(i.total for i in incs))


def test_the_stores_other_signals_are_burn_in_verdicts_and_slow_reports():
    from slurmguard.fleet.history import History
    from slurmguard.store.incidents import signals

    h = History(since=0, until=10)
    h.burnin = {"n1": [(5.0, "passed"), (6.0, "failed")], "n2": [(7.0, "flagged")]}
    h.events = {"n3": [Ev(8.0, "suspect", "slurmguard", "", "job 9: 1.8x slower"),
                       Ev(9.0, "drain", "slurmguard", "gpu-xid", "x")]}
    got = {n: [(s.at, s.what, s.source) for s in v] for n, v in signals(h).items()}
    assert got == {"n1": [(6.0, "burn-in verdict: failed", "store: burn-in")],
                   "n2": [(7.0, "burn-in verdict: flagged", "store: burn-in")],
                   "n3": [(8.0, "a job named it slow: job 9: 1.8x slower",
                           "store: ledger (suspect)")]}


def test_a_timeline_ends_where_the_nodes_next_incident_begins():
    # n1 fails, returns at 5,000 s, fails again 2 days later: the probation that follows the
    # second return (within the 7-day probation window of the first) is the second's step.
    first, second = ep(start=100, drained=110, back=5000), ep(start=2 * 86400, drained=2 * 86400 + 10,
                                                              back=2 * 86400 + 900)
    evs = {"n1": [Ev(110, "drain", "slurmguard"), Ev(5000, "clear", "admin"),
                  Ev(5000, "probation_start", "admin"), Ev(2 * 86400 + 10, "drain", "slurmguard"),
                  Ev(2 * 86400 + 900, "probation_start", "slurmguard")]}
    a, b = incidents.build([first, second], [], until=10 * 86400.0, events=evs)
    assert [s.at for s in a.timeline if s.lane == "node"] == [100, 110, 5000, 5000]
    assert max(s.at for s in a.timeline) < b.first_signal.at
    assert [s.what for s in b.timeline if s.lane == "node"][-1] == "probation started"


@settings(max_examples=300, deadline=None)
@given(histories(), st.floats(0, 6000), st.floats(0, 3000),
       st.dictionaries(nodes, st.lists(st.floats(0, 40000), max_size=3), max_size=4))
# a run that ended after an earlier signal (an Xid line 400 s before the first failing run)
# and long before the drain: on the timeline, never hit
@example(([ep("n1", start=1000.0, drained=1100.0, back=5000.0)],
          [job("a", run(200.0, 700.0, nodes=("n1",), gpus=8))]), 1000.0, 100.0, {"n1": [600.0]})
def test_the_jobs_near_the_episodes_give_the_same_incidents_as_every_job(h, lookback, window, sig):
    """A store reads only the jobs that touch an episode's span (job_spans, touches: what
    `incident list` reads at fleet size); the incidents, their hits, costs and timelines are
    those of every job, with the GPUs per node seen over every job."""
    eps, jobs = h
    spans = incidents.job_spans(eps, drain_window=window, lookback=lookback)
    near = [j for j in jobs if any(
        incidents.touches(n, min(r.start for r in j.runs), max(r.end for r in j.runs), spans)
        for n in {n for r in j.runs for n in r.nodes})]
    signals = {n: [Signal(t, f"sign at {t}", "test") for t in ts] for n, ts in sig.items()}
    kw = {"until": 60000.0, "node_gpus": incidents.gpus_seen(jobs), "signals": signals,
          "drain_window": window, "lookback": lookback}
    every = [i.to_dict() for i in incidents.build(eps, jobs, **kw)]
    assert [i.to_dict() for i in incidents.build(eps, near, **kw)] == every
    hit = {x for i in every for x in i["jobs"]}
    assert hit <= {j.job_id for j in near}


def test_a_job_touches_a_span_only_in_time_and_on_its_node():
    spans = incidents.job_spans([ep("n1", start=1000.0, drained=1200.0, back=9000.0),
                                 ep("n1", start=5000.0, drained=5100.0, back=9000.0)],
                                drain_window=100.0, lookback=300.0)
    assert spans == {"n1": [(900.0, 1200.0), (4800.0, 5100.0)]}
    assert incidents.touches("n1", 0.0, 900.0, spans)  # ends as the span begins
    assert not incidents.touches("n1", 0.0, 899.0, spans)
    assert not incidents.touches("n1", 1201.0, 4799.0, spans)  # between the two
    assert incidents.touches("n1", 5100.0, 9999.0, spans)
    assert not incidents.touches("n2", 0.0, 99999.0, spans)
