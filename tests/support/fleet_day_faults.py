"""The fleet day's faults on the harness's nodes, and what a reboot does to them.

:func:`inject` and :func:`clear` put a fault where the checks read it (the stand-in NVML, the
kernel log, IB sysfs, the mount table) and take it away; :func:`effect` is what it does to a
job (train_job's --fault-dir). :class:`RebootPhysics` is the BMC's hardware for the day's
repair (support/scale_repair.py's, the wave_repair scenario's, with the plan's table
``REBOOT_CLEARS`` on top): a reboot clears the faults the table says it clears and leaves the
rest, so repair sees at boot what a real node would show. :func:`day_limits` sizes serve's
repair limits for a compressed day. What the day left in serve's store is read back by
support/fleet_day_reads.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from fakehw.nvml import HW_THERMAL_SLOWDOWN, default_config, with_fault, write_config
from fakehw.sysfs import write_ib_port

from support import fleet_day_plan as plan
from support.scale_repair import HarnessHardware
from support.scale_repair_conf import RepairLimits

if TYPE_CHECKING:
    from support.scaleharness import ScaleHarness


def inject(h: ScaleHarness, f: plan.Fault) -> None:
    d = h.node_dir(f.node) if f.node else None
    if f.kind == "shared-fs":
        h.lose_shared_mount()
    elif f.kind == "xid79":
        h.inject_xid(f.node)
    elif f.kind == "ib-link":
        write_ib_port(d / "ib", "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    else:
        change = {"gpu-lost": {"lost": True}, "ecc": {"ecc": {"volatile_uncorrected": 2}},
                  "nvlink": {"nvlink": [False, False] + [True] * 16},
                  "thermal": {"clocks_event_reasons": HW_THERMAL_SLOWDOWN}}[f.kind]
        write_config(d / "nvml.json", with_fault(default_config(8), 5, **change))


def clear(h: ScaleHarness, f: plan.Fault) -> None:
    """The fault gone (a link back, the filer back; an Xid needs a reboot: a new boot id)."""
    if f.kind == "shared-fs":
        h.restore_shared_mount()
        return
    d = h.node_dir(f.node)
    write_config(d / "nvml.json", default_config(8))
    if f.kind == "xid79":
        (d / "kmsg").write_text("")
        (d / "boot_id").write_text(str(uuid.uuid4()) + "\n")


def effect(fault_dir: Path, f: plan.Fault, on: bool) -> None:
    p = fault_dir / (f.node or "ALL")
    if on:
        p.write_text(f.effect + "\n")
    else:
        p.unlink(missing_ok=True)


class RebootPhysics(HarnessHardware):
    """A harness node's boot (a new boot id, a fresh kernel log) that also clears the faults on
    it a reboot clears (plan.REBOOT_CLEARS), before slurmd starts and runs the health check at
    boot. ``on``/``off`` are the day's own records (fault -> when injected / cleared); each
    fault the reboot cleared is recorded in ``cleared`` with the time."""

    def __init__(self, h: ScaleHarness, fault_dir: Path, on: dict[plan.Fault, float],
                 off: dict[plan.Fault, float], lock: threading.Lock) -> None:
        super().__init__(h)
        self.fault_dir, self.on, self.off, self.lock = fault_dir, on, off, lock
        self.cleared: dict[plan.Fault, float] = {}
        self.boots: list[tuple[str, float, list[str]]] = []  # node, when, faults still on

    def boot(self, node: str) -> None:
        super().boot(node)
        with self.lock:
            now = time.time()
            left = []
            for f in [f for f in self.on if f.node == node and f not in self.off]:
                if plan.reboot_clears(f.kind):
                    clear(self.h, f)
                    effect(self.fault_dir, f, False)
                    self.off[f] = self.cleared[f] = now
                else:
                    left.append(f"{f.kind}@{f.node}")
            self.boots.append((node, now, left))


def day_limits(nodes: int) -> RepairLimits:
    """serve's repair limits for a compressed day (docs/fleet-day.md): up to 4 nodes in repair
    at once (25 % of a partition, so 16 nodes get 4, not docs/repair.md's 5 % = 1: the day's
    faults come minutes apart where a real day's come hours apart), 16 reboots an hour (the
    whole day fits in an hour of wall time and has at most ~10 node faults: every one may be
    rebooted once), and 120 s for a reboot to prove itself (nodes here boot in seconds)."""
    del nodes  # the same limits at every size; the partition's share is what scales
    return RepairLimits(max_nodes=4, max_percent=25.0, reboots_per_hour=16, settle=120.0)
