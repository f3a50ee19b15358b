"""LBNL NHC (github mej/nhc), unpatched, run for one node of a test cluster with that node's
view: what a Slurm site runs today as HealthCheckProgram, measured beside slurmguard on the
same injected faults (docs/fleet-day.md; docs/testing.md "LBNL NHC as a peer").

NHC's source is not in this repository: it is ``shared/peers/nhc-src.tar.gz`` beside the
clone (its own licence inside), unpacked at test time by :func:`unpack`. Each run is

    unshare --mount --uts  (private propagation)
      hostname NODE                        # NHC reads the kernel's host name
      mount -t tmpfs ... SHARED            # only while the harness's mount table lists it
      mount -t tmpfs ... /sys/class        # then a bind of the node's IB sysfs fixture
      mount --bind NODE/ib /sys/class/infiniband
      nhc -D CONF -c CONF/nhc.conf NHC_RM=slurm HELPERDIR=nhc/helpers ...

so NHC reads /proc/mounts, /sys/class/infiniband and its host name itself, and an injected
fault is the same fault for NHC as for slurmguard's checks: the shared mount is mounted in the
namespace exactly while the harness's mount table fixture (what slurmguard's fs-mount reads)
lists it, the IB ports are the node's own sysfs fixture (what ib-link reads), and
``check_nvsmi_healthmon`` runs the stand-in nvidia-smi (tests/fakehw/nvidia_smi.py) on the
node's stand-in NVML state (what the GPU checks read). NHC marks a failing node offline with
its own helper (node-mark-offline: ``scontrol update State=DRAIN Reason="NHC: ..."``) and
onlines it with node-mark-online only where the reason is its own, against the test cluster
(SLURM_CONF in the environment, sinfo/scontrol from the harness's bin/).

The checks are those a GPU site enables from NHC's own scripts: ``check_fs_mount_rw`` for each
required mount, ``check_hw_ib`` for each IB port, ``check_hw_physmem`` (this host's memory,
5 % either way) and ``check_nvsmi_healthmon``. NHC has no check of the kernel log's Xid
events, of ECC counters, NVLinks or clock-event reasons: :data:`SEES` says which of the fleet
day's fault kinds it can see at all, and why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from support.helpers import REPO

if TYPE_CHECKING:
    from support.scaleharness import ScaleHarness



def _peers() -> Path:
    """shared/peers beside the clone (CI's layout); from a git worktree, beside the main
    checkout it was added from."""
    here = REPO.parent / "shared" / "peers"
    git = REPO / ".git"
    if not here.is_dir() and git.is_file():
        gitdir = Path(git.read_text().split("gitdir:", 1)[1].strip())
        if len(gitdir.parents) > 2:  # MAIN/.git/worktrees/NAME
            return gitdir.parents[2].parent / "shared" / "peers"
    return here


PEERS = _peers()
TARBALL = PEERS / "nhc-src.tar.gz"
STAND_IN_SMI = REPO / "tests" / "fakehw" / "nvidia_smi.py"
REASON_PREFIX = "NHC:"

# The fleet day's fault kinds (support/fleet_day_plan.py KINDS, and the shared hang): whether
# NHC with the checks above can see one at all, and why. The fleet day's table of what each
# arm can see is rendered from this; the CI form asserts NHC misses exactly the kinds it says.
SEES: dict[str, tuple[bool, str]] = {
    "xid79": (False, "NHC has no check of the kernel log's Xid events; the harness's Xid 79 "
                     "is a kernel-log line, the GPU still answers NVML"),
    "gpu-lost": (True, "nvidia-smi exits 15 (a GPU fallen off the bus): check_nvsmi_healthmon"),
    "ecc": (False, "nvidia-smi exits 0 with uncorrectable ECC errors (its table shows them, "
                   "its return value does not); NHC reads no ECC counter"),
    "ib-link": (True, "check_hw_ib: the port is not ACTIVE / LinkUp"),
    "nvlink": (False, "nvidia-smi exits 0 with NVLinks down; NHC has no NVLink check"),
    "thermal": (False, "nvidia-smi exits 0 while clocks are throttled; NHC has no clock check"),
    "shared-fs": (True, "check_fs_mount_rw: the required mount is gone from /proc/mounts"),
}


def available() -> bool:
    return TARBALL.is_file() and shutil.which("unshare") is not None


def unpack(dest: Path) -> Path:
    """NHC's tree from the tarball under ``dest`` (once); returns the directory holding the
    ``nhc`` script, ``scripts/`` and ``helpers/``."""
    top = dest / "nhc"
    if not (top / "nhc").exists():
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(dest, filter="data")
        # The helpers are installed executable (Makefile.am: dist_helper_SCRIPTS, as `make
        # install` does); the tarball stores them 0664.
        for helper in (top / "helpers").iterdir():
            helper.chmod(0o755)
    return top


def _mem_kb() -> int:
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemTotal:"):
            return int(ln.split()[1])
    raise RuntimeError("/proc/meminfo has no MemTotal")


def site_conf(mounts: list[str], ib_ports: int) -> str:
    """nhc.conf as a GPU site writes it: every required mount read-write, every IB port up
    (mlx5_N:1 at 400 Gb/s, the fixture's NDR), the node's memory, every GPU answering."""
    kb = _mem_kb()
    lines = [f"* || check_fs_mount_rw -f {m}" for m in mounts]
    lines += [f"* || check_hw_ib 400 mlx5_{i}:1" for i in range(ib_ports)]
    lines += [f"* || check_hw_physmem {kb}kB {kb}kB 5%", "* || check_nvsmi_healthmon"]
    return "\n".join(lines) + "\n"


class NHCNodes:
    """NHC for every node of a started :class:`ScaleHarness`: :meth:`run` is one node's
    HealthCheckProgram run, as slurmd would start it on that node."""

    def __init__(self, h: ScaleHarness, work: Path, timeout: float = 60.0) -> None:
        self.h, self.work, self.timeout = h, work, timeout
        self.top = unpack(work)
        self.confdir = work / "etc"
        (self.confdir / "scripts").mkdir(parents=True, exist_ok=True)
        for s in (self.top / "scripts").glob("*.nhc"):  # INCDIR: NHC's own scripts, as shipped
            shutil.copy(s, self.confdir / "scripts" / s.name)
        (self.confdir / "nhc.conf").write_text(
            site_conf(["/", str(h.shared)], h.spec.ib_ports))
        (work / "run").mkdir(exist_ok=True)
        self.pass_s: list[float] = []

    def _shared_mounted(self) -> bool:
        return f" {self.h.shared} " in (self.h.root / "mountinfo").read_text()

    def script(self, node: str) -> str:
        """The shell run inside the node's namespaces: its mounts, then NHC."""
        d = self.h.node_dir(node)
        shared = str(self.h.shared)
        mount_shared = (f"mount -t tmpfs -o rw,size=1m filer:/export {shared} || exit 97\n"
                        if self._shared_mounted() else "")
        ib = (f"mount -t tmpfs -o size=1m sysclass /sys/class || exit 97\n"
              f"mkdir -p /sys/class/infiniband /sys/class/infiniband_mad\n"
              f"echo 5 > /sys/class/infiniband_mad/abi_version\n"
              f"mount --bind {d}/ib /sys/class/infiniband || exit 97\n"
              if self.h.spec.ib_ports else "")
        args = [f"{self.top}/nhc", "-D", str(self.confdir), "-c", f"{self.confdir}/nhc.conf",
                "-l", f"{self.work}/run/{node}.log", "-t", str(int(self.timeout)),
                "NHC_RM=slurm", f"HELPERDIR={self.top}/helpers",
                f"RESULTFILE={self.work}/run/{node}.status",
                f"NVIDIA_SMI_HEALTHMON={STAND_IN_SMI}"]
        return (f"hostname {node} || exit 97\n{mount_shared}{ib}"
                "exec " + " ".join(f"'{a}'" for a in args) + "\n")

    def env(self, node: str) -> dict[str, str]:
        b = self.h.root / "bin"
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(self.h.conf_path),
                "SLURM_SINFO": str(b / "sinfo"), "SLURM_SCONTROL": str(b / "scontrol"),
                "LD_LIBRARY_PATH": str(self.h.libdir),
                "FAKE_NVML_CONFIG": str(self.h.node_dir(node) / "nvml.json")}

    def run(self, node: str) -> subprocess.CompletedProcess[str]:
        """NHC once for ``node``: rc 0 healthy (and its own mark cleared), else failed (and the
        node marked offline by NHC's helper); rc 97: the namespace could not be built."""
        t = time.monotonic()
        r = subprocess.run(["unshare", "--mount", "--uts", "--propagation", "private",
                            "sh", "-c", self.script(node)],
                           env=self.env(node), capture_output=True, text=True,
                           timeout=self.timeout + 30)
        self.pass_s.append(time.monotonic() - t)
        if r.returncode == 97:
            raise RuntimeError(f"NHC's namespace for {node}: {r.stderr[-500:]}")
        return r

    def log(self, node: str) -> str:
        p = self.work / "run" / f"{node}.log"
        return p.read_text() if p.exists() else ""


def require_nhc() -> None:
    """NHC's tarball beside the clone and unshare: a test that needs them fails under CI
    when they are missing (helpers.require), skips elsewhere."""
    from support.helpers import require

    require(TARBALL.is_file(), f"LBNL NHC's source ({TARBALL})")
    require(shutil.which("unshare") is not None and os.geteuid() == 0,
            "unshare and root (a mount namespace per NHC run)")
