"""The requeue watcher's read of the queue: ``squeue -h -O`` (formatted.py), parsed by a
parser that keeps every field the watcher reads (state, the launch-failure hold's text,
priority, restarts, eligible time, nodes) whatever the free-text reason holds; on a real
cluster the same jobs as ``squeue --json``, and a poll of a queue with nothing to judge reads
neither the node table nor any job's full record."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_slurm_rpc_load import rpcs

from slurmguard.adapters.slurm.formatted import SQUEUE_FIELDS, parse_squeue_brief
from slurmguard.errors import ParseError
from slurmguard.job.requeue import JobMemory, Watcher, _launch_failed_hold, wants_decision

STATES = ["PENDING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
          "SUSPENDED", "CONFIGURING", "EXPEDITING"]
reasons = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60)


def row(jid: int, state: str, reason: str = "None", prio: int = 1000, restarts: int = 0,
        eligible: str = "N/A", nodes: str = "", batch: str = "n/a") -> str:
    return f"{jid}|{state}|{prio}|{restarts}|{eligible}|{nodes}|{batch}|1|{reason}"


@given(st.lists(st.tuples(st.integers(1, 10**9), st.sampled_from(STATES), reasons,
                          st.integers(0, 2**32), st.integers(0, 9)), max_size=5))
def test_every_field_read_whatever_the_reason_holds(jobs: list[Any]) -> None:
    text = "\n".join(row(j, s, r, p, n, "2026-12-05T07:43:30", "n[1-2]", "n1")
                     for j, s, r, p, n in jobs)
    got = parse_squeue_brief(text)
    assert [(g.job_id, g.state, g.priority, g.restart_count) for g in got] == [
        (str(j), s, p, n) for j, s, _, p, n in jobs]
    for g, (_, _, r, p, _) in zip(got, jobs, strict=True):
        norm = " ".join(r.split())
        assert g.reason == ("" if norm.lower() in ("", "none", "(null)", "n/a", "unknown")
                            else norm)  # a '|' stays in the reason
        assert g.nodes == "n[1-2]" and g.batch_host == "n1" and g.requeue
        assert g.eligible_time is not None and g.held == (p == 0 or "held" in g.reason.lower())


def test_launch_failure_hold_reads_as_the_json_did() -> None:
    # 22.05: squeue --json says state_reason JobHeldUser, state_description "launch failed
    # requeued held"; squeue -O Reason prints the description.
    (job,) = parse_squeue_brief(row(7, "PENDING", "launch failed requeued held", prio=0,
                                    restarts=1) + "\n")
    assert job.held and _launch_failed_hold(job) and job.eligible_time is None
    assert wants_decision(job, {}, None)  # first sight of a held launch failure
    assert not wants_decision(job, {"7": JobMemory(handled=1, hold_handled=1)}, None)


def test_reason_with_newline_rejoined() -> None:
    jobs = parse_squeue_brief(row(1, "PENDING", "first") + "\nsecond half\n" + row(2, "RUNNING"))
    assert [j.reason for j in jobs] == ["first second half", ""]


@pytest.mark.parametrize("text, field", [
    (row(1, "pending"), "State: not a job state: 'pending'"),
    (row(1, "PENDING", prio=-1).replace("|-1|", "|x|"), "PriorityLong: expected an integer"),
    ("1|PENDING|0", "expected 9 fields"),
    (row(1, "PENDING").replace("|1|None", "|yes|None"), "Requeue: expected 0 or 1"),
    (row(1, "PENDING", eligible="soon"), "EligibleTime: expected YYYY"),
    ("x" + row(1, "PENDING"), "JobID: not a job id"),
])
def test_garbage_is_one_line_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_squeue_brief(text)
    assert field in str(err.value) and "\n" not in str(err.value)


@given(st.text(max_size=300))
def test_never_crashes(text: str) -> None:
    try:
        jobs = parse_squeue_brief(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(jobs, list)


def test_free_text_is_last() -> None:
    assert SQUEUE_FIELDS[-1] == "Reason"


def test_real_queue_brief_as_json_and_a_quiet_poll_reads_no_node(slurm_cluster_factory) -> None:
    c = slurm_cluster_factory(nodes=2)
    cli = c.cli()
    held = c.sbatch("#!/bin/sh\nsleep 300\n", "--hold", "--requeue")
    running = c.sbatch("#!/bin/sh\nsleep 300\n", "-N1", "-x", "n2")
    waiting = c.sbatch("#!/bin/sh\nsleep 300\n", "-N2")  # pending: n1 is busy
    c.wait_job(running, ["RUNNING"], timeout=120)
    try:
        brief = {j.job_id: j for j in cli.queue()}
        full = {j.job_id: j for j in cli.jobs()}
        assert set(brief) == set(full) == {held, running, waiting}
        for jid, j in full.items():
            b = brief[jid]
            assert (b.state, b.nodes, b.restart_count, b.priority, b.held, b.requeue,
                    b.batch_host, b.eligible_time) == (
                j.state, j.nodes, j.restart_count, j.priority, j.held, j.requeue,
                j.batch_host, j.eligible_time), jid
        assert brief[held].held and brief[running].state == "RUNNING"
        w = Watcher(cli)
        w.poll()  # first sight: every job remembered, none judged
        c.run("sdiag", "--reset")
        for _ in range(3):
            assert w.poll() == []
        counts = {t: n for t, n in rpcs(c).items() if t != "REQUEST_STATS_INFO"}
        print(f"\nRPCs of 3 watcher polls, 3 jobs (2 waiting, nothing to judge): {counts}")
        assert "REQUEST_NODE_INFO" not in counts, counts  # was one per poll with jobs waiting
        assert "REQUEST_JOB_INFO_SINGLE" not in counts, counts
        assert counts.get("REQUEST_JOB_INFO") == 3, counts
    finally:
        c.run("scancel", held, running, waiting, check=False)
