"""What the scale harness gives a site's repair when ``ScaleSpec.repair`` is set (the scenario
is support/scale_repair.py): the repair rig's RebootProgram in slurm.conf (it tells the BMC
which node asked) and serve's ``[repair] mode = "act"`` with :class:`RepairLimits`, in every
serve replica's config (the one that runs the periodic pass repairs); the nodes' own configs
have no [repair]: only serve repairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from support.repairrig import REBOOT_SCRIPT

if TYPE_CHECKING:
    from support.scaleharness import ScaleHarness


@dataclass(frozen=True)
class RepairLimits:
    """serve's ``[repair]`` limits (docs/repair.md "Safety limits": these defaults are its)."""

    max_nodes: int = 4
    max_percent: float = 5.0
    reboots_per_hour: int = 4
    settle: float = 900.0

    def slots(self, nodes: int) -> int:
        """Repairs at once on one partition of ``nodes`` (repair/plan.py's _Budget)."""
        return min(self.max_nodes, max(1, math.floor(nodes * self.max_percent / 100.0)))

    def reboot_hours(self, reboots: int) -> int:
        """Whole hours the last of ``reboots`` reboots waits for the hourly budget."""
        return math.ceil(reboots / self.reboots_per_hour) - 1


def bmc_dir(h: ScaleHarness) -> Path:
    return h.root / "bmc"


def install(h: ScaleHarness) -> list[str]:
    """The RebootProgram (the repair rig's: it tells the BMC which node asked) and its
    slurm.conf lines; ResumeTimeout as the rig has it (a reboot not back by then is DOWN)."""
    d = bmc_dir(h)
    d.mkdir()
    script = d / "reboot.sh"
    script.write_text(REBOOT_SCRIPT.format(dir=d))
    script.chmod(0o755)
    (h.root / "repair").mkdir()
    return [f"RebootProgram={script}", "ResumeTimeout=60"]


def config_section(h: ScaleHarness, limits: RepairLimits) -> str:
    """serve's [repair] in act mode. Verification is the health checks only: the harness's
    nodes run no burn-in measurements (docs/repair.md: such a site sets verify_burnin =
    false); triage's evidence over SSH fails fast on these host names (connect_timeout)."""
    return f"""
[repair]
mode = "act"
max_nodes = {limits.max_nodes}
max_percent = {limits.max_percent}
reboots_per_hour = {limits.reboots_per_hour}
settle = {limits.settle}
verify_burnin = false
evidence_dir = "{h.root}/repair/evidence"
pause_file = "{h.root}/repair/paused"
[triage]
connect_timeout = 2.0
"""
