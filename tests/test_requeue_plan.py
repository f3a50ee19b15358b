"""The requeue watcher's planner (pure): which requeued jobs to speed up, exclude, release."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from slurmguard.job.requeue import JobMemory, node_failed, plan
from slurmguard.nodeset import expand

NOW = 1_000_000.0


@dataclass(frozen=True)
class J:
    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    restart_count: int = 0
    eligible_time: float | None = None
    exc_nodes: str = ""
    priority: int = 100
    raw: dict | None = None

    @property
    def held(self) -> bool:
        return self.priority == 0


@dataclass(frozen=True)
class N:
    name: str
    state: str = "idle"
    flags: frozenset[str] = frozenset()
    reason: str = ""

    @property
    def down(self) -> bool:
        return self.state == "down" or "NOT_RESPONDING" in self.flags

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def ours(self) -> bool:
        return self.reason.startswith("slurmguard:")


HEALTHY = {f"n{i}": N(f"n{i}") for i in range(1, 5)}


def nodes(**over: N) -> dict[str, N]:
    return {**HEALTHY, **over}


def run(jobs, nodemap, mem=None, cap=3):
    return plan(jobs, nodemap, mem or {}, NOW, cap)


def test_node_fault_is_expedited_once_and_excluded() -> None:
    _, mem = run([J("7", "RUNNING", nodes="n[1-2]")], HEALTHY)
    pending = J("7", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 121, exc_nodes="n4")
    down = nodes(n2=N("n2", "down", frozenset({"NOT_RESPONDING"}), "Not responding"))
    acts, mem = run([pending], down, mem)
    assert len(acts) == 1
    a = acts[0]
    assert (a.kind, a.failed_nodes, a.exclude, a.eligible_now, a.release) == \
        ("expedite", ("n2",), "n[2,4]", True, False)
    assert mem["7"].expedited == 1
    acts, mem = run([pending], down, mem)  # the same requeue seen again: nothing more
    assert acts == []


def test_any_drain_counts() -> None:
    # Ours, an admin's, the reconciler's: a drain notice ended the run on each, so each
    # requeue is expedited and the node excluded.
    _, mem = run([J("1", "RUNNING", nodes="n[1-2]")], HEALTHY)
    pend = J("1", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 100)
    for reason in ("slurmguard: gpu-xid: Xid 79", "maintenance", "slurmguard: k8s: NotReady"):
        drained = nodes(n1=N("n1", "idle", frozenset({"DRAIN"}), reason))
        assert run([pend], drained, mem)[0][0].failed_nodes == ("n1",)
    assert run([pend], HEALTHY, mem)[0] == []  # no drain, no fault: left to Slurm


def test_requeue_without_node_fault_is_left_alone() -> None:
    _, mem = run([J("1", "RUNNING", nodes="n1")], HEALTHY)
    acts, mem = run([J("1", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 90)],
                    HEALTHY, mem)
    assert acts == [] and mem["1"].handled == 1 and mem["1"].expedited == 0


def test_cap_stops_crash_loops() -> None:
    mem = {"5": JobMemory(nodes="n3", restarts=2, handled=2, expedited=2)}
    down = nodes(n3=N("n3", "down"))
    acts, mem = run([J("5", "PENDING", "BeginTime", restart_count=3, eligible_time=NOW + 121)],
                    down, mem, cap=2)
    assert [a.kind for a in acts] == ["cap"] and mem["5"].expedited == 2


def test_launch_failure_hold_on_our_drain_is_released() -> None:
    _, mem = run([J("9", "CONFIGURING", nodes="n4")], HEALTHY)
    held = J("9", "PENDING", "launch_failed_requeued_held", restart_count=1, priority=0,
             eligible_time=NOW - 5)
    drained = nodes(n4=N("n4", "idle", frozenset({"DRAIN"}), "slurmguard: gpu-count: 7 of 8 GPUs"))
    acts, mem = run([held], drained, mem)
    assert len(acts) == 1 and acts[0].release and acts[0].exclude == "n4"
    assert run([held], drained, mem)[0] == []  # released once per hold
    # squeue --json says it in state_description (state_reason: JobHeldUser).
    _, mem = run([J("9", "CONFIGURING", nodes="n4")], HEALTHY)
    held = J("9", "PENDING", "JobHeldUser", restart_count=1, priority=0,
             raw={"state_description": "launch failed requeued held"})
    assert [a.release for a in run([held], drained, mem)[0]] == [True]


def test_unknown_history_is_reported_not_guessed() -> None:
    _, mem = run([J("3", "PENDING", "Priority")], HEALTHY)
    acts, _ = run([J("3", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 121)],
                  nodes(n1=N("n1", "down")), mem)
    assert [a.kind for a in acts] == ["unknown"]


def test_first_sight_of_an_old_requeue_is_not_acted_on() -> None:
    acts, mem = run([J("4", "PENDING", "BeginTime", restart_count=2, eligible_time=NOW + 50)],
                    nodes(n1=N("n1", "down")))
    assert acts == [] and mem["4"].handled == 2


def test_memory_forgets_finished_jobs() -> None:
    _, mem = run([J("1", "RUNNING", nodes="n1"), J("2", "RUNNING", nodes="n2")], HEALTHY)
    _, mem = run([J("2", "RUNNING", nodes="n2")], HEALTHY, mem)
    assert set(mem) == {"2"}


def test_missing_node_counts_as_failed() -> None:
    assert node_failed(None)
    assert not node_failed(N("n1"))


@given(st.lists(st.tuples(st.sampled_from(["RUNNING", "PENDING", "COMPLETED"]),
                          st.integers(0, 6), st.booleans()), max_size=12),
       st.integers(0, 4))
def test_never_expedites_more_than_cap(history: list[tuple[str, int, bool]], cap: int) -> None:
    mem: dict[str, JobMemory] = {}
    down = nodes(n1=N("n1", "down"))
    expedited = 0
    restarts = 0
    for state, bump, held in history:
        restarts += bump
        job = J("1", state, "launch_failed_requeued_held" if held else "BeginTime",
                nodes="n1" if state == "RUNNING" else "", restart_count=restarts,
                eligible_time=NOW + 100, priority=0 if held else 10)
        acts, mem = plan([job], down, mem, NOW, cap)
        expedited += sum(a.kind == "expedite" for a in acts)
        assert all(a.exclude == "n1" for a in acts if a.kind == "expedite")
    assert expedited <= cap


def test_nodes_of_an_ending_run_are_added_not_replaced() -> None:
    # The batch host lingers in COMPLETING after the other node died: the dead one must count.
    _, mem = run([J("8", "RUNNING", nodes="n[1-2]")], HEALTHY)
    _, mem = run([J("8", "COMPLETING", nodes="n1", restart_count=1)], HEALTHY, mem)
    assert mem["8"].nodes == "n[1-2]"
    acts, mem = run([J("8", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 121)],
                    nodes(n2=N("n2", "down")), mem)
    assert [a.failed_nodes for a in acts] == [("n2",)]
    # The next run on other nodes replaces the memory.
    _, mem = run([J("8", "RUNNING", nodes="n[1,3]", restart_count=1)], HEALTHY, mem)
    assert mem["8"].nodes == "n[1,3]"


# -- risk refusals (risk.gate_max_nodes): the gate refused the job an at-risk node, drained
# nothing; the watcher excludes the refused nodes and makes the job eligible at once.

def test_risk_refused_job_excludes_the_refused_nodes_even_unseen_running() -> None:
    # The gate refuses within a second of the allocation: the watcher may never see it run.
    pending = J("9", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 121)
    acts, mem = plan([pending], HEALTHY, {}, NOW, 3, refused={"9": ["n1"], "10": ["n2"]})
    assert [(a.kind, a.failed_nodes, a.exclude, a.eligible_now) for a in acts] == \
        [("expedite", ("n1",), "n1", True)]
    assert "node risk on n1" in acts[0].reason and mem["9"].risk_handled == 1
    # once per restart: the next poll does nothing
    again, mem = plan([pending], HEALTHY, mem, NOW + 2, 3, refused={"9": ["n1"]})
    assert again == []


def test_risk_refusal_already_excluded_is_not_repeated() -> None:
    pending = J("9", "PENDING", "BeginTime", restart_count=2, eligible_time=NOW + 121,
                exc_nodes="n1")
    acts, _ = plan([pending], HEALTHY, {}, NOW, 3, refused={"9": ["n1"]})
    assert acts == []
    # a second round refused n3 too: both excluded
    acts, _ = plan([pending], HEALTHY, {}, NOW, 3, refused={"9": ["n1", "n3"]})
    assert [(a.failed_nodes, a.exclude) for a in acts] == [(("n3",), "n[1,3]")]


def test_risk_refusal_and_node_fault_together_and_cap_only_for_faults() -> None:
    _, mem = run([J("5", "RUNNING", nodes="n[1-2]")], HEALTHY)
    mem["5"].expedited = 3  # the node-fault cap is reached
    pending = J("5", "PENDING", "BeginTime", restart_count=1, eligible_time=NOW + 121)
    acts, _ = plan([pending], HEALTHY, mem, NOW, 3, refused={"5": ["n1"]})
    assert [(a.kind, a.exclude) for a in acts] == [("expedite", "n1")]  # risk: bounded by the gate
    acts, _ = plan([pending], nodes(n2=N("n2", "down")), mem, NOW, 3, refused={"5": ["n1"]})
    assert [a.kind for a in acts] == ["cap"]


def test_risk_refusal_of_a_running_job_is_not_acted_on() -> None:
    acts, _ = plan([J("6", "RUNNING", nodes="n[2-4]", restart_count=1)], HEALTHY, {}, NOW, 3,
                   refused={"6": ["n1"]})
    assert acts == []


@given(st.lists(st.tuples(st.sampled_from(["RUNNING", "PENDING"]), st.integers(0, 2),
                          st.sets(st.sampled_from(["n1", "n2", "n3"]))), max_size=10),
       st.sampled_from(["", "n4"]))
def test_risk_refusals_act_once_per_restart_and_keep_every_exclusion(
        history: list[tuple[str, int, set[str]]], user_exc: str) -> None:
    mem: dict[str, JobMemory] = {}
    restarts, acted = 0, set()
    for state, bump, refused in history:
        restarts += bump
        job = J("1", state, "BeginTime", nodes="n1" if state == "RUNNING" else "",
                restart_count=restarts, eligible_time=NOW + 100, exc_nodes=user_exc)
        acts, mem = plan([job], HEALTHY, mem, NOW, 3, refused={"1": sorted(refused)})
        assert {a.kind for a in acts} <= {"expedite", "unknown"}  # unknown: never seen running
        for a in (a for a in acts if a.kind == "expedite"):
            assert state == "PENDING" and a.failed_nodes
            assert restarts not in acted  # one move per restart
            acted.add(restarts)
            excluded = set(expand(a.exclude, source="t"))
            assert set(a.failed_nodes) <= refused and set(a.failed_nodes) <= excluded
            assert user_exc == "" or user_exc in excluded
    assert acted <= set(range(restarts + 1))  # a move belongs to a restart that happened
