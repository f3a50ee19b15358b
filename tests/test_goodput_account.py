"""Goodput accounting (slurmguard.goodput.account): a table of jobs, and properties that hold
for every job Hypothesis can build: the parts add up to the wall time, none is negative, and
time no source describes is never productive."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard.goodput.account import (
    PARTS,
    Allocation,
    Fault,
    JobInputs,
    Params,
    RunRecord,
    account,
    combine,
    paint,
)

N2 = ("n1", "n2")


def run(restart: int, started: float, ended: float, resume: int | None, verdict: str,
        first: tuple[float, int], last: tuple[float, int], med: float = 1.0, samples: int = 10,
        ckpts: tuple = (), stalls: tuple = (), **kw: object) -> RunRecord:
    return RunRecord(restart, started, ended, resume, verdict, first, last, med, samples,
                     ckpts, stalls, **kw)  # type: ignore[arg-type]


# Two runs: the first loses n2 after step 12 (checkpoint at 10), the second resumes at 10.
R0 = run(0, 1.0, 60.0, None, "cancelled", (6.0, 1), (17.0, 12),
         ckpts=((15.5, 10, 0.5), (10.5, 5, 0.5)))
R1 = run(1, 71.0, 149.0, 10, "success", (76.0, 11), (106.0, 40), ckpts=((106.5, 40, 0.5),),
         stalls=((90.0, 95.0),))
A0 = Allocation(0.0, 60.0, N2, 8, "NODE_FAIL")
A1 = Allocation(70.0, 150.0, ("n1", "n3"), 8, "COMPLETED")

CASES = {
    # name: (inputs, expected parts (seconds; parts left out are 0), steps lost)
    "clean run": (JobInputs("1", (Allocation(0, 50, N2, 8, "COMPLETED"),),
                            (run(0, 1, 49, None, "success", (6, 1), (45, 40)),), (),
                            state="COMPLETED"),
                  {"restart": 5, "productive": 40, "other": 5}, 0),
    "node lost, resumed": (JobInputs("2", (A0, A1), (R0, R1), (), state="COMPLETED"),
                           {"restart": 10, "productive": 36, "lost_work": 2, "checkpoint_save": 1.5,
                            "stall": 4, "drained_node": 43, "requeue_wait": 10, "other": 43.5}, 2),
    "torn newest: resumed from an older one": (
        JobInputs("3", (A0, A1), (R0, run(1, 71.0, 149.0, 5, "success", (76.0, 6), (110.0, 40))),
                  (), state="COMPLETED"),
        {"restart": 10, "productive": 4 + 35, "lost_work": 7, "checkpoint_save": 1.0,
         "drained_node": 43, "requeue_wait": 10, "other": 40}, 7),
    "fault from the store, not from Slurm": (
        JobInputs("4", (Allocation(0.0, 60.0, N2, 8, "REQUEUED"), A1), (R0, R1),
                  (Fault("n2", 75.0, "state_change (requeue)"),), state="COMPLETED"),
        {"restart": 10, "productive": 36, "lost_work": 2, "checkpoint_save": 1.5, "stall": 4,
         "drained_node": 43, "requeue_wait": 10, "other": 43.5}, 2),
    "no store: a failed run's end is unknown": (
        JobInputs("5", (Allocation(0.0, 60.0, N2, 8, "REQUEUED"), A1), (R0, R1), (),
                  state="COMPLETED", store=False),
        {"restart": 10, "productive": 36, "lost_work": 2, "checkpoint_save": 1.5, "stall": 4,
         "unknown": 43, "requeue_wait": 10, "other": 43.5}, 2),
    "a run without the wrapper is unknown": (
        JobInputs("6", (A0, A1), (R1,), (), state="COMPLETED"),
        {"unknown": 60, "restart": 5, "productive": 27, "stall": 4, "checkpoint_save": 0.5,
         "other": 43.5, "requeue_wait": 10}, 0),
    "no wrapper at all": (JobInputs("7", (A0,), (), (), state="FAILED"), {"unknown": 60}, 0),
    "slower on other nodes: straggler": (
        JobInputs("8", (Allocation(0, 50, N2, 8, "NODE_FAIL"), Allocation(50, 150, N2, 8, "COMPLETED")),
                  (run(0, 0, 50, None, "cancelled", (6, 1), (25, 20), ckpts=((25, 20, None),)),
                   run(1, 50, 150, 20, "success", (57, 21), (97, 40), med=2.0)),
                  (), state="COMPLETED"),
        {"restart": 5 + 5, "productive": 20 + 22, "straggler": 20, "drained_node": 25,
         "other": 53}, 0),
    "long gap between steps without a stall timeout": (
        JobInputs("9", (Allocation(0, 250, N2, 8, "COMPLETED"),),
                  (run(0, 0, 250, None, "success", (6, 1), (245, 40)),), (), state="COMPLETED"),
        # 240 s of stepping for 40 steps of 1 s (median): beyond 5 x 40 s is a stall
        {"restart": 5, "productive": 200, "stall": 40, "other": 5}, 0),
    "a stall into a node fault is the fault's; before the first step it is the restart": (
        JobInputs("11", (A0, A1), (
            run(0, 1.0, 60.0, None, "cancelled", (6.0, 1), (17.0, 12),
                ckpts=((15.5, 10, 0.5), (10.5, 5, 0.5)), stalls=((1.0, 6.0), (17.0, 60.0))),
            R1), (), state="COMPLETED"),
        {"restart": 10, "productive": 36, "lost_work": 2, "checkpoint_save": 1.5,
         "stall": 4, "drained_node": 43, "requeue_wait": 10, "other": 43.5}, 2),
    "a final failure loses the steps after the last checkpoint": (
        JobInputs("10", (Allocation(0, 50, N2, 8, "FAILED"),),
                  (run(0, 1, 49, None, "app", (6, 1), (35, 30), ckpts=((25, 20, None),)),), (),
                  state="FAILED"),
        {"restart": 5, "productive": 20, "lost_work": 10, "other": 15}, 10),
}


@pytest.mark.parametrize("name", list(CASES))
def test_breakdown_table(name: str) -> None:
    job, want, lost = CASES[name]
    b = account(job)
    got = {k: round(v, 6) for k, v in b.parts.items() if abs(v) > 1e-9}
    assert got == {k: v for k, v in want.items() if v}, name
    assert b.steps_lost == lost
    assert math.isclose(sum(b.parts.values()), b.wall_s)


def test_unknown_is_explained() -> None:
    b = account(CASES["a run without the wrapper is unknown"][0])
    assert any("no wrapper record" in u for u in b.unknown)
    b = account(CASES["no store: a failed run's end is unknown"][0])
    assert any("no node-state store" in u for u in b.unknown)
    b = account(JobInputs("x", (), (), ()))
    assert b.wall_s == 0 and b.ettr is None and "no allocation known" in b.unknown[0]
    b = account(JobInputs("y", (A0,), (R0,), (), accounting=False, state="FAILED"))
    assert any("no Slurm accounting" in u for u in b.unknown)


def test_gpu_hours_and_ettr() -> None:
    b = account(CASES["node lost, resumed"][0])
    d = b.to_dict()
    assert d["ettr"] == round(36 / 150, 4)
    assert d["allocated_gpu_hours"] == round(150 * 8 / 3600, 4)
    assert d["held_gpu_hours"] == round(140 * 8 / 3600, 4)  # requeue wait holds no GPU
    assert d["productive_gpu_hours"] == round(36 * 8 / 3600, 4)
    t = combine([b, account(CASES["clean run"][0])])
    assert t["jobs"] == 2 and t["ettr"] == round((36 + 40) / 200, 4)


def test_paint_priority() -> None:
    assert paint(0, 10, [(2, 4, "a"), (3, 6, "b"), (0, 10, "base")]) == {"a": 2, "b": 2, "base": 6}
    assert paint(5, 5, [(0, 10, "x")]) == {}


# ---------------------------------------------------------------------------------------------
# properties

times = st.floats(min_value=0, max_value=1e5, allow_nan=False, allow_infinity=False)


@st.composite
def jobs(draw: st.DrawFn) -> JobInputs:
    n = draw(st.integers(0, 4))
    allocs, runs = [], []
    t = draw(times)
    step = 0
    for i in range(n):
        t += draw(st.floats(0, 500))
        dur = draw(st.floats(0, 2000))
        a = Allocation(t, t + dur, tuple(draw(st.sets(st.sampled_from(["n1", "n2", "n3"]),
                                                      min_size=1, max_size=3))),
                       draw(st.integers(0, 8)), draw(st.sampled_from(["REQUEUED", "NODE_FAIL",
                                                                      "COMPLETED", "FAILED"])))
        allocs.append(a)
        if draw(st.booleans()):
            resume = draw(st.integers(0, step)) if step else draw(st.none() | st.just(0))
            first_t = draw(st.floats(-10, dur + 10)) + t
            last_t = first_t + draw(st.floats(0, dur + 10))
            first_n = (resume or 0) + draw(st.integers(0, 5))
            last_n = first_n + draw(st.integers(0, 100))
            step = max(step, last_n)
            ck = tuple((t + draw(st.floats(-5, dur + 5)), draw(st.integers(0, last_n)),
                        draw(st.none() | st.floats(0, 100)))
                       for _ in range(draw(st.integers(0, 3))))
            stalls = tuple((s, s + draw(st.floats(0, 500)))
                           for s in [t + draw(st.floats(-5, dur)) for _ in range(draw(st.integers(0, 2)))])
            runs.append(RunRecord(
                i, t + draw(st.floats(0, 2)), t + dur, resume,
                draw(st.sampled_from(["success", "cancelled", "infra", "app"])),
                draw(st.none() | st.just((first_t, first_n))), (last_t, last_n),
                draw(st.none() | st.floats(0, 50)), draw(st.integers(0, 20)), ck, stalls,
                {"n1": draw(st.floats(0, 5))}, draw(st.sampled_from([(), ("n1",)]))))
        t += dur
        if draw(st.booleans()):  # sometimes overlapping records
            t -= draw(st.floats(0, 100))
    faults = tuple(Fault(draw(st.sampled_from(["n1", "n2"])), draw(times))
                   for _ in range(draw(st.integers(0, 2))))
    return JobInputs("j", tuple(allocs), tuple(runs), faults,
                     state=draw(st.sampled_from(["COMPLETED", "FAILED", ""])),
                     store=draw(st.booleans()), accounting=draw(st.booleans()))


@settings(max_examples=400, deadline=None)
@given(jobs(), st.floats(1.0, 3.0), st.floats(1.0, 10.0))
def test_parts_add_up_and_are_never_negative(job: JobInputs, strag: float, stall: float) -> None:
    b = account(job, Params(straggler_factor=strag, stall_factor=stall))
    assert set(b.parts) == set(PARTS)
    assert all(v >= -1e-9 for v in b.parts.values()), b.parts
    assert all(v >= -1e-9 for v in b.gpu_seconds.values())
    assert math.isclose(sum(b.parts.values()), b.wall_s, rel_tol=1e-9, abs_tol=1e-6)
    assert b.wall_s >= b.held_s - 1e-6
    if b.ettr is not None:
        assert 0 <= b.ettr <= 1 + 1e-9


@settings(max_examples=200, deadline=None)
@given(jobs())
def test_unknown_never_counted_productive(job: JobInputs) -> None:
    b = account(job)
    with_progress = sum(r.end - r.start for r, rr in zip(b.runs, [x.restart for x in b.runs],
                                                         strict=True)
                        if rr is not None and r.parts["unknown"] < (r.end - r.start) - 1e-9)
    assert b.parts["productive"] <= with_progress + 1e-6
    for r in b.runs:
        if r.restart is None:  # an allocation no wrapper run describes
            assert r.parts["productive"] == 0 and math.isclose(r.parts["unknown"], r.end - r.start)
    if not job.runs:
        assert b.parts["productive"] == 0
