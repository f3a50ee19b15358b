"""The shadow report's join (slurmguard/shadow/report.py), table-tested with hand-built
episodes, incumbent drains and jobs; the ledger readers over a real store; serve's node-state
history (slurmguard/serve/nodestates.py) from parsed Slurm node records; `sacctmgr show
event`'s parser. The real cluster: tests/test_shadow_cluster.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.sgserve import new_store

from slurmguard.adapters.slurm.commands import parse_node_events
from slurmguard.adapters.slurm.parse import node_info_from_show, parse_show_node_oneliner
from slurmguard.serve.nodestates import NodeStates
from slurmguard.shadow.report import (
    NO_CHECK,
    JobRun,
    OutEvent,
    WouldEpisode,
    build,
    check_for,
    out_events,
    same_fault,
    would_episodes,
)
from slurmguard.store import Store

T = 1_800_000_000.0
H = 3600.0


def test_four_lists_and_the_summary() -> None:
    would = [
        WouldEpisode("n1", "fs-mount", T + 60, None, False),  # NHC drains it 10 min later
        WouldEpisode("n2", "gpu-xid:79", T, None, False),  # nobody else: a job fails there
        WouldEpisode("n3", "gpu-ecc", T, T + 2 * H, True),  # the guard would refuse it
        WouldEpisode("n5", "fs-mount", T, T + 60, False),  # transient: every job completes
    ]
    incumbent = [OutEvent("n1", T + 660, None, "NHC: check_fs_mount_rw: /shared not mounted", "root"),
                 OutEvent("n4", T + 100, None, "NHC: check_hw_eth: eth9 missing", "root")]
    jobs = [JobRun("10", "n1", T, T + 600, "FAILED", 8.0),  # in slurmguard's lead: would be saved
            JobRun("11", "n2", T + H, T + 2 * H, "NODE_FAIL", 8.0),
            JobRun("12", "n2", T + 2 * H, T + 2.5 * H, "COMPLETED", 8.0),
            JobRun("13", "n3", T, T + H, "FAILED", 8.0),  # refused: not counted as saved
            JobRun("14", "n5", T + H, T + 3 * H, "COMPLETED", 4.0),
            JobRun("15", "n4", T - 2 * H, T - H, "FAILED", 8.0)]  # before the window's faults
    rep = build(would, incumbent, jobs, since=T - H, until=T + 4 * H, match_window=H)
    assert [(r["node"], r["lead_s"]) for r in rep.both] == [("n1", 600.0)]
    assert [r["job"] for r in rep.both[0]["jobs_in_lead"]] == ["10"]
    assert [(r["node"], r["cause"], r["guard"]) for r in rep.only_slurmguard] == [
        ("n2", "gpu-xid:79", "allowed"), ("n3", "gpu-ecc", "refused")]
    n2 = rep.only_slurmguard[0]
    assert (n2["gpu_hours"], n2["ended"]) == (12.0, {"COMPLETED": 1, "NODE_FAIL": 1})
    assert [(r["node"], r["check"]) for r in rep.only_incumbent] == [("n4", NO_CHECK)]
    assert [(r["node"], r["gpu_hours"]) for r in rep.false] == [("n5", 8.0)]
    # saved: job 10 in the lead (8 GPUs x 540 s) + job 11 (8 x 1 h); not n3's (refused)
    assert rep.summary == {"saved_gpu_hours": round(8 * 540 / H + 8.0, 4), "cost_gpu_hours": 8.0,
                           "nodes_out": 3, "nodes_out_false": 1, "both": 1, "only_slurmguard": 2,
                           "only_incumbent": 1, "would_have_been_false": 1, "median_lead_s": 600.0}


def test_a_job_still_running_is_neither_false_nor_lost() -> None:
    """sacct gives a job that has not ended (or that slurmdbd has not yet heard end) no End:
    its episode is not false (the job may yet fail there), nor are its hours saved."""
    would = [WouldEpisode("n5", "fs-mount", T, T + 60, False),  # transient, as in the cluster test
             WouldEpisode("n2", "gpu-xid:79", T, None, False)]
    done = [JobRun("20", "n2", T + 60, T + 120, "FAILED", 8.0)]

    def lists(jobs: list[JobRun]) -> tuple[list[str], list[str], float]:
        rep = build(would, [], done + jobs, since=T - H, until=T + H)
        return ([r["node"] for r in rep.false], [r["node"] for r in rep.only_slurmguard],
                rep.summary["saved_gpu_hours"])

    saved = round(8.0 * 60 / H, 4)  # job 20 only
    assert lists([JobRun("21", "n5", T + 120, T + 180, "COMPLETED", 8.0)]) == (["n5"], ["n2"], saved)
    assert lists([JobRun("21", "n5", T + 120, None, "RUNNING", 8.0)]) == ([], ["n2", "n5"], saved)
    assert lists([JobRun("21", "n5", T + 120, T + 180, "COMPLETED", 8.0),
                  JobRun("22", "n5", T + 200, None, "RUNNING", 8.0)]) == ([], ["n2", "n5"], saved)
    assert lists([JobRun("22", "n2", T + 200, None, "RUNNING", 8.0)]) == ([], ["n2", "n5"], saved)
    assert lists([]) == ([], ["n2", "n5"], saved)  # the job not in accounting yet: no proof


@pytest.mark.parametrize("reason,check", [
    ("NHC: check_fs_mount_rw:  /scratch not mounted", "fs-mount"),
    ("NHC: check_hw_ib:  No IB port mlx5_1:1 is ACTIVE", "ib-link"),
    ("NHC: check_hw_physmem:  Actual RAM size 500 GB less than minimum 512 GB", "host-memory"),
    ("NHC: check_nvsmi_healthmon:  GPU fallen off the bus", "gpu-count"),
    ("NHC: check_hw_eth:  Ethernet device eth9 not found", NO_CHECK),
    ("bad fan, ticket 4711", NO_CHECK),
])
def test_the_check_that_reads_what_an_incumbent_saw(reason: str, check: str) -> None:
    assert check_for(reason) == check


MOUNT = "NHC: check_fs_mount_rw: /shared not mounted"
IB = "NHC: check_hw_ib: No IB port mlx5_0:1 is ACTIVE"


def test_a_drain_for_another_area_of_the_node_is_another_fault() -> None:
    # The fleet day's shadow arm (tests/scale/test_fleet_day_shadow_small.py): n7's ECC fault,
    # which NHC cannot see, from 8 s on; the filer hangs at 20 s and NHC drains every node for
    # the mount, n7 too; n2's IB link, which NHC drains for at 11 s and again for the mount.
    would = [WouldEpisode("n7", "gpu-ecc", T + 8, None, False),
             WouldEpisode("n7", "fs-mount", T + 21, T + 33, False),
             WouldEpisode("n2", "ib-link", T + 11, None, False),
             WouldEpisode("n2", "fs-mount", T + 21, None, False),
             WouldEpisode("n3", "flapping", T + 25, None, False)]
    incumbent = [OutEvent("n2", T + 12, None, IB), OutEvent("n7", T + 20, T + 33, MOUNT),
                 OutEvent("n2", T + 20, None, MOUNT), OutEvent("n3", T + 26, None, "bad node")]
    rep = build(would, incumbent, [], since=T, until=T + 60, match_window=H)
    assert sorted((r["node"], r["cause"], r["incumbent_reason"]) for r in rep.both) == [
        ("n2", "fs-mount", MOUNT), ("n2", "ib-link", IB), ("n3", "flapping", "bad node"),
        ("n7", "fs-mount", MOUNT)]
    assert [(r["node"], r["cause"]) for r in rep.only_slurmguard] == [("n7", "gpu-ecc")]
    assert rep.only_incumbent == []


def test_a_second_fault_inside_an_open_episode_is_both_when_the_check_saw_it() -> None:
    # n7: slurmguard's ECC episode open from 8 s; NHC drains n7 for the mount at 20 s, and
    # slurmguard's fs-mount check failed there at 21 s (no would-event: the node's episode
    # was open). n8: NHC's mount drain, no failing fs-mount result of slurmguard's: missed.
    # n9: the check failed, but no would-episode was open then: no sighting inside one.
    would = [WouldEpisode("n7", "gpu-ecc", T + 8, None, False)]
    incumbent = [OutEvent("n7", T + 20, T + 32, MOUNT), OutEvent("n8", T + 20, T + 32, MOUNT),
                 OutEvent("n9", T + 20, T + 32, MOUNT)]
    seen = [("n7", "fs-mount", T + 21), ("n7", "fs-mount", T + 24), ("n9", "fs-mount", T + 21),
            ("n8", "ib-link", T + 21)]
    rep = build(would, incumbent, [], since=T, until=T + 60, match_window=10.0, sightings=seen)
    assert [(r["node"], r["cause"], r["within"], r["lead_s"]) for r in rep.both] == [
        ("n7", "fs-mount", "gpu-ecc", -1.0)]
    assert [(r["node"], r["cause"]) for r in rep.only_slurmguard] == [("n7", "gpu-ecc")]
    assert [(r["node"], r["check"]) for r in rep.only_incumbent] == [("n8", "fs-mount"),
                                                                      ("n9", "fs-mount")]
    assert (rep.summary["both"], rep.summary["only_incumbent"]) == (1, 2)


@pytest.mark.parametrize("cause,reason,same", [
    ("gpu-ecc", MOUNT, False), ("gpu-xid:79", IB, False), ("fs-mount", IB, False),
    ("gpu-ecc", "NHC: check_nvsmi_healthmon:  GPU fallen off the bus", True),  # both the GPU
    ("ib-link", IB, True), ("fs-mount", MOUNT, True),
    ("gpu-ecc", "bad fan, ticket 4711", True),  # names no check: may be any fault
    ("flapping", MOUNT, True),  # a cause of no area (the fleet policy's)
])
def test_same_fault(cause: str, reason: str, same: bool) -> None:
    assert same_fault(cause, reason) is same


def test_episodes_and_spans_from_the_ledger(tmp_path: Path) -> None:
    store = Store.open(url=new_store(tmp_path))
    try:
        ev = store.nodes.record_event
        ev("n1", "would_drain", "slurmguard", "slurmguard: fs-mount: x", source="fs-mount", at=T)
        ev("n1", "would_end", "slurmguard", "healthcheck passes", at=T + 50)
        ev("n1", "would_drain_refused", "slurmguard", "r", source="fs-mount", at=T + 90)
        states = NodeStates(store)
        line = ("NodeName=n2 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu "
                "Reason=NHC: check_hw_eth: eth9 [root@2027-01-15T08:00:00]")
        drained = node_info_from_show(parse_show_node_oneliner(line)[0])
        up = node_info_from_show(parse_show_node_oneliner(
            "NodeName=n2 Arch=x86_64 State=IDLE Partitions=gpu")[0])
        assert states.update([up], now=T) == 0  # first seen in service: no news
        assert states.update([drained], now=T + 10) == 1
        assert states.update([drained], now=T + 20) == 0  # unchanged
        assert NodeStates(store).update([drained], now=T + 30) == 0  # a restarted serve
        assert states.update([up], now=T + 40) == 1
        eps = would_episodes(store.nodes.events(kinds=["would_drain", "would_drain_refused",
                                                       "would_end"]))
        assert [(w.node, w.start, w.end, w.refused) for w in eps] == [
            ("n1", T, T + 50, False), ("n1", T + 90, None, True)]
        (span,) = out_events(store.nodes.events(kinds=["state_change"]))
        assert (span.node, span.end, span.by, span.reason) == (
            "n2", T + 40, "root", "NHC: check_hw_eth: eth9")
        # dated by Slurm's reason time (local time, as Slurm prints it), not by the view's
        assert span.start == time.mktime(time.strptime("2027-01-15T08:00:00", "%Y-%m-%dT%H:%M:%S"))
        # NHC's note for a second failing check while the node is out, then its first check's
        # note again when the second passes: two sightings in one span, not three.
        for at, reason in ((T + 100, IB), (T + 110, MOUNT), (T + 120, IB)):
            again = node_info_from_show(parse_show_node_oneliner(
                f"NodeName=n2 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu Reason={reason}")[0])
            assert states.update([again], now=at) == 1
        spans = out_events(store.nodes.events(kinds=["state_change"]))
        assert [(s.reason, s.start, s.end) for s in spans[1:]] == [(IB, T + 100, None),
                                                                    (MOUNT, T + 110, None)]
    finally:
        store.close()


def test_sacctmgr_node_events_parse() -> None:
    text = ("n1|2026-12-06T10:00:00|2026-12-06T10:30:00|DRAIN|NHC: check_hw_ib: down|root(0)\n"
            "n2|2026-12-06T11:00:00|Unknown|DOWN|Not responding|slurm(64030)\n"
            "|2026-12-06T09:00:00|Unknown||Cluster Registered TRES|\n")
    ev = parse_node_events(text)
    assert [(e.node, e.end is None, e.state, e.reason, e.user) for e in ev] == [
        ("n1", False, "DRAIN", "NHC: check_hw_ib: down", "root"),
        ("n2", True, "DOWN", "Not responding", "slurm")]
    assert ev[0].end - ev[0].start == 1800
