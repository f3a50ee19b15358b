"""Which nodes the repair pass looks at (slurmguard/repair/loop.py ``_ours_now``), from Slurm's
node records as the adapter parses them: ours, or an open episode of ours; never a node a
person drained, set DOWN or returned."""

from __future__ import annotations

import pytest

from slurmguard.adapters.slurm.parse import node_info_from_show, parse_show_node_oneliner
from slurmguard.repair.loop import _boot_time, _gpus, _ours_now
from slurmguard.repair.plan import RepairEvent


def node(state: str, reason: str = "") -> object:
    line = f"NodeName=n1 Arch=x86_64 State={state} Partitions=gpu" + (
        f" Reason={reason} [root@2026-12-04T09:54:47]" if reason else "")
    return node_info_from_show(parse_show_node_oneliner(line)[0])


OPEN = [RepairEvent(100.0, "repair_start", {"episode": 7}),
        RepairEvent(101.0, "repair_rung", {"episode": 7, "rung": "reboot"})]


@pytest.mark.parametrize("info,events,want", [
    (node("IDLE+DRAIN", "slurmguard: gpu-xid: Xid 79"), [], True),
    (node("IDLE+DRAIN", "admin: bad fan"), [], False),
    (node("IDLE+DRAIN", "admin: bad fan"), OPEN, False),  # a person drained it mid-repair
    (node("DOWN", "slurmguard: repair: gpu-xid:79: reboot : reboot issued : reboot complete"),
     OPEN, True),  # our reboot's nextstate=DOWN
    (node("DOWN", "Not responding"), OPEN, False),
    (node("IDLE"), OPEN, True),  # Slurm returned it after the reboot; our reservation holds it
    (node("IDLE"), [*OPEN, RepairEvent(150.0, "clear", {}, admin=True)], False),  # a person
    (node("IDLE"), [*OPEN, RepairEvent(150.0, "repair_return", {"episode": 7})], False),
    (node("IDLE"), [], False),
])
def test_repair_looks_only_at_nodes_it_owns(info, events, want):
    assert _ours_now(info, events, 7) is want


def test_the_gpus_a_drain_names():
    assert _gpus("slurmguard: gpu-xid: Xid 79 on GPU 3 (fallen off the bus)") == (3,)
    assert _gpus("slurmguard: gpu-ecc: GPUs 0, 5 DBE") == (0, 5)
    assert _gpus("slurmguard: gpu-lost: a GPU is missing") == ()


def test_slurms_boot_time_as_epoch_seconds():
    """BootTime as `scontrol show node` prints it (local time), or epoch seconds; None when
    Slurm does not know it (the health check at boot is then judged from the proof on)."""
    import time

    assert _boot_time("2026-12-05T01:02:03") == time.mktime((2026, 12, 5, 1, 2, 3, 0, 0, -1))
    assert _boot_time(1796432523) == 1796432523.0
    for unknown in ("None", "Unknown", "", None, 0, "2026-13-40T99:00:00"):
        assert _boot_time(unknown) is None, unknown

