"""The fleet day's fault queue and reboot physics (support/fleet_day_plan.py), pure: a fault
whose time passed while the harness's loop stalled comes late and is never lost, a fault that
must wait holds up no other, a late fault keeps its planned length."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st
from support import fleet_day_plan as plan
from support.fleet_day_plan import KINDS, REBOOT_CLEARS, Fault, FaultQueue, reboot_clears, schedule


def test_a_fault_that_must_wait_holds_up_no_later_fault():
    # The 512-node day: the flapping node's second fault waits for a return that never
    # comes (the fleet policy drained it as flapping); the thermal fault after it was never
    # injected.
    flap = Fault(785.9, "nvlink", "n131", None)
    thermal = Fault(813.6, "thermal", "n33", None)
    q = FaultQueue([flap, thermal])
    ready = lambda what, f: f is not flap  # noqa: E731
    assert q.due(790.0, ready) == []
    assert q.due(814.0, ready) == [("on", thermal)]
    assert q.due(2000.0, ready) == []
    assert q.due(2001.0) == [("on", flap)]  # once it may, it comes, late
    assert q.late[flap] == round(2001.0 - 785.9, 1) and len(q) == 0


def test_a_fault_whose_time_passed_in_a_stall_comes_late_with_its_lateness():
    a, b = Fault(600.8, "ecc", "n434", None), Fault(634.7, "gpu-lost", "n292", None)
    q = FaultQueue([a, b])
    assert q.due(500.0) == []
    assert q.due(1121.6) == [("on", a), ("on", b)]
    assert q.late == {a: 520.8, b: 486.9}


def test_a_late_fault_keeps_its_planned_length_and_never_clears_in_the_same_instant():
    # The 512-node baseline injected and cleared the 12-s filer hang at once (1025.0-1025).
    hang = Fault(370.7, "shared-fs", "", 382.7)
    q = FaultQueue([hang])
    assert q.due(1025.0) == [("on", hang)]
    assert q.due(1036.9) == []
    assert q.due(1037.0) == [("off", hang)]


def test_an_off_waits_for_its_on():
    flap = Fault(6.0, "nvlink", "n3", 13.2)
    q = FaultQueue([flap])
    assert q.due(20.0, lambda what, f: what == "off") == []
    assert q.due(21.0) == [("on", flap)]
    assert q.due(28.1) == [] and q.due(28.2) == [("off", flap)]


faults = st.lists(st.builds(
    lambda at, kind, node, length: Fault(at, kind, node, None if length is None else at + length),
    st.floats(0, 1000, allow_nan=False).map(lambda x: round(x, 1)),
    st.sampled_from(sorted(KINDS)), st.sampled_from(["n1", "n2", "n3", ""]),
    st.one_of(st.none(), st.floats(0.1, 200).map(lambda x: round(x, 1)))),
    max_size=12, unique_by=lambda f: (f.at, f.kind, f.node))


@given(faults, st.lists(st.floats(0, 1500, allow_nan=False), max_size=30),
       st.sets(st.integers(0, 11)))
def test_every_event_comes_once_on_after_off_none_before_its_time(fs, times, blocked):
    q = FaultQueue(fs)
    seen: list[tuple[str, Fault, float]] = []
    for t in sorted(times):
        ready = lambda what, f: fs.index(f) not in blocked  # noqa: E731
        for what, f in q.due(t, ready):
            assert fs.index(f) not in blocked
            seen.append((what, f, t))
    for end in (1e9, 3e9):  # the day goes on, everything may happen: nothing is lost (an
        for what, f in q.due(end):  # "off" comes in a later look than its "on")
            seen.append((what, f, end))
    assert len(q) == 0
    assert sorted((w, fs.index(f)) for w, f, _ in seen) == sorted(
        [("on", i) for i in range(len(fs))]
        + [("off", i) for i, f in enumerate(fs) if f.clear_at is not None])
    on = {f: t for w, f, t in seen if w == "on"}
    for what, f, t in seen:
        assert t >= (f.at if what == "on" else f.clear_at)
        if what == "off":
            assert t > on[f]  # never in the same instant as its on


def test_the_reboot_table_covers_every_kind_and_the_physics():
    assert set(REBOOT_CLEARS) == set(KINDS)
    assert {k for k in KINDS if reboot_clears(k)} == {"xid79", "gpu-lost", "ecc", "nvlink"}
    assert not reboot_clears("ib-link") and not reboot_clears("thermal")
    assert not reboot_clears("shared-fs")
    # Every seeded day has a kind a reboot clears and one it does not, in the long form.
    day = schedule(1, [f"n{i}" for i in range(1, 129)], 300.0, every_kind=True)
    kinds = {f.kind for f in day if f.node}
    assert any(reboot_clears(k) for k in kinds) and any(not reboot_clears(k) for k in kinds)


def test_every_figure_is_over_the_window_and_what_came_after_is_apart():
    """[t0, t0 + day_s] for every arm: a run past the day's end is clipped to it, one that
    started after it is not counted, a completion or a drain after it is reported apart."""
    t0, t_end = 1000.0, 1100.0
    fault = plan.Fault(10.0, "ecc", "n1", None)
    late_fault = plan.Fault(90.0, "ib-link", "n2", None)
    runs = [plan.Run("a", 1000.0, 1050.0, 0, ["n3"], [(1, 1020.0), (2, 1040.0)]),
            plan.Run("b", 1060.0, 1130.0, 0, ["n4"], [(1, 1090.0), (2, 1120.0)]),
            plan.Run("c", 1105.0, 1110.0, 0, ["n5"], [(1, 1108.0)])]
    drains = {"n1": [(1012.0, None)], "n2": [(1104.0, None)]}
    fig = plan.figures(runs, [fault, late_fault], t0, t_end, 1.0, 8, drains, [])
    assert fig["allocated_gpu_s"] == (50 + 40) * plan.GPUS_PER_NODE
    assert fig["useful_gpu_s"] == 3 * plan.GPUS_PER_NODE  # steps done by the day's end
    assert (fig["runs"], fig["jobs_completed"]) == (2, 1)
    assert fig["detect_s_by_cause"] == {"gpu-ecc": [2.0]}
    assert fig["undetected"] == ["ib-link@n2"]
    assert fig["node_s_out_of_service"] == 88.0
    after = plan.after_day(runs, [fault, late_fault], t0, t_end, drains, 30.0)
    assert after == {"ran_on_s": 30.0, "completions": 2, "detected": {"ib-link@n2": 14.0}}


def test_the_shared_hang_stalls_every_gpu_running_while_it_is_on_and_no_other():
    """The filer's hang (no node) is charged by how busy the fleet was: the GPUs of the runs
    alive while it was on, and each spanning step's time past nominal; a run before or after
    it and a step away from it count nothing."""
    t0, t_end = 0.0, 100.0
    hang = plan.Fault(40.0, "shared-fs", "", 52.0)
    caught = plan.Run("a", 0.0, 90.0, 0, ["n1", "n2"],
                      [(1, 38.0), (2, 39.0), (3, 53.0), (4, 54.0), (5, 57.0)])  # 13 s over
    other = plan.Run("b", 20.0, 80.0, 0, ["n3"], [(1, 45.0), (2, 60.0)])  # 14 s over
    before = plan.Run("c", 0.0, 30.0, 0, ["n4"], [(1, 10.0), (2, 25.0)])
    after = plan.Run("d", 60.0, 99.0, 0, ["n5"], [(1, 70.0), (2, 95.0)])
    fig = plan.figures([caught, other, before, after], [hang], t0, t_end, 1.0, 8, {}, [])
    assert fig["shared_fault"] == {"gpus_running": 3 * plan.GPUS_PER_NODE,
                                   "stall_gpu_s": (2 * 13 + 14) * plan.GPUS_PER_NODE}
    assert plan.figures([before], [], t0, t_end, 1.0, 8, {}, [])["shared_fault"] == {}


def test_the_arms_see_what_their_checks_read_and_nhc_sees_what_its_table_says():
    from support.fleet_day_arms import ARMS, FAULT_KINDS, stalls, visibility
    from support.nhc_node import SEES

    v = visibility()
    assert set(v) == set(ARMS) and all(set(v[a]) == set(FAULT_KINDS) for a in ARMS)
    assert all(v["slurmguard"].values()) and not any(v["slurm"].values())
    assert {k for k, s in v["nhc"].items() if s} == {k for k, (s, _) in SEES.items() if s}
    assert {k for k, s in v["oracle"].items() if s} == {"xid79", "gpu-lost", "ecc", "ib-link"}
    assert stalls([0.0, 1.0, 9.0, 9.5], 0.0, 1.0) == [[1.0, 8.0]]


def test_overhead_is_split_into_start_checkpoints_other_steps_and_exit():
    # Steps of 1 s, a checkpoint after step 2: start 3 s late, 0.5 s past nominal after the
    # checkpoint, 0.25 s after step 1, 2 s from the last step to the end.
    r = plan.Run("a", 0.0, 11.0, 0, ["n1"], [(1, 4.0), (2, 5.25), (3, 6.75), (4, 7.75), (5, 9.0)])
    fig = plan.figures([r], [], 0.0, 20.0, 1.0, 8, {}, [], every=2)
    g = plan.GPUS_PER_NODE
    parts = {k: v for k, v in fig["overhead_gpu_s_by_part"].items() if v}
    assert parts == {plan.RESUME: 3 * g, plan.CKPT: round(0.75 * g), plan.OTHER: 2,
                     plan.EXIT: 2 * g}
    assert fig["lost_gpu_s_by_cause"] == {"overhead": 6 * g}


def test_a_runs_gpus_are_charged_from_slurms_allocation_and_split_by_who_spent_them():
    """Allocated at 10, the Prolog 0.5 s of the 1.5 s before the script (at 11.5), the program's
    first instant at 12, its first 1-s step ended at 14: every part in its row, and the run's
    GPUs charged from the allocation."""
    from support import fleet_day_timeline as timeline

    log = ("[2026-12-06T19:31:17.732] _slurm_rpc_submit_batch_job: JobId=7 InitPrio=1\n"
           "[2026-12-06T19:31:20.000] sched: Allocate JobId=7 NodeList=n[1-2] #CPUs=2\n"
           "[2026-12-06T19:31:40.250] sched/backfill: _start_job: Started JobId=7 in gpu on n3\n"
           "garbage JobId=7\n")
    allocs = timeline.allocations(log)
    base = time.mktime(time.strptime("2026-12-06T19:31:20", "%Y-%m-%dT%H:%M:%S"))
    assert allocs == {"7": [base, base + 20.25]}
    r1 = plan.Run("a", base + 1.5, base + 5.0, 75, ["n1", "n2"], [(1, base + 4.0)], job_id="7")
    r2 = plan.Run("a", base + 21.0, base + 24.0, 0, ["n3"], [(2, base + 23.0)], job_id="7")
    lost = plan.Run("b", base + 30.0, base + 31.0, 0, ["n4"], [], job_id="8")
    programs = timeline.began(f"{base + 2.0} 7 0\n{base + 21.5} 7 1\nbad\n")
    pro = {("7", "n1"): [(base + 0.1, 0.5)], ("7", "n2"): [(base + 0.2, 0.25)],
           ("7", "n3"): [(base - 100, 9.0)]}  # an earlier job's record: not this run's
    assert timeline.attach([r1, r2, lost], allocs, programs, pro) == 1
    assert (r1.alloc, r1.began, r1.prolog_s) == (base, base + 2.0, 0.5)
    assert (r2.alloc, r2.began, r2.prolog_s) == (base + 20.25, base + 21.5, 0.0)
    assert lost.alloc is None and lost.first == lost.start
    fig = plan.figures([r1], [], base, base + 100, 1.0, 8, {}, [])
    g = 2 * plan.GPUS_PER_NODE
    assert fig["allocated_gpu_s"] == 5 * g
    parts = fig["overhead_gpu_s_by_part"]
    assert (parts[plan.PROLOG], parts[plan.LAUNCH], parts[plan.WRAPPER], parts[plan.RESUME]) == (
        0.5 * g, 1.0 * g, 0.5 * g, 1.0 * g)
    assert parts[plan.EXIT] == 1.0 * g and sum(parts.values()) == 4 * g
