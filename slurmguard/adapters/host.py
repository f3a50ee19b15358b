"""Sources "host", "procs", "munge": the node itself ("timesync": adapters/timesync.py).

* host: MemTotal (/proc/meminfo), online CPUs (/sys/devices/system/cpu/online), EDAC memory
  controller error counts (/sys/devices/system/edac/mc/mc*/{ce_count,ue_count}).
* procs: one pass over /proc/<pid>/{stat,status}: pid, real uid, comm, state; for processes of
  the finished job's uid also the Slurm job id (from /proc/<pid>/cgroup, else environ).
* munge: a ``munge -n`` | ``unmunge`` round trip through run_command.

Roots (``checks.host.proc_root``, ``sys_root``) are configurable so tests use fixture trees.
"""

import os
import re
import time
from pathlib import Path
from typing import NamedTuple

from slurmguard.config import Config
from slurmguard.errors import CommandError, SlurmguardError, Unsupported
from slurmguard.lazyre import LazyPattern
from slurmguard.proc import run_command
from slurmguard.sources import GatherContext
from slurmguard.sources.procs import leftovers


class HostSnapshot(NamedTuple):
    mem_total_kib: int | None
    cpus_online: int | None
    cpus_present: int | None
    edac: dict[str, tuple[int, int]] | None  # "mc0" -> (ce_count, ue_count); None: no EDAC


class ProcInfo(NamedTuple):
    pid: int
    uid: int
    comm: str
    state: str  # R, S, D, Z, ...
    job_id: str | None = None  # only looked up for the job's uid


class ProcSnapshot(NamedTuple):
    procs: tuple[ProcInfo, ...]
    job_uid: int | None
    job_id: str | None
    self_pid: int


class MungeStatus(NamedTuple):
    ok: bool
    error: str = ""
    duration: float = 0.0


def _timeout(cfg: Config, ctx: GatherContext) -> float:
    return min(float(cfg["checks.host.command_timeout"]), max(0.1, ctx.deadline - time.monotonic()))


def parse_cpu_list(text: str) -> int:
    """'0-3,8-11,16' -> 9 (the kernel's cpulist format)."""
    n = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += (int(hi) - int(lo) + 1) if hi else 1
    return n


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def gather(cfg: Config, ctx: GatherContext) -> HostSnapshot:
    """Memory size, CPU count and EDAC counters in one pass."""
    proc = Path(cfg["checks.host.proc_root"])
    sysd = Path(cfg["checks.host.sys_root"])
    mem = None
    text = _read(proc / "meminfo")
    if text is None:
        raise SlurmguardError(f"{proc / 'meminfo'}: cannot read")
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    if m:
        mem = int(m.group(1))
    cpus: list[int | None] = []
    for name in ("online", "present"):
        t = _read(sysd / "devices/system/cpu" / name)
        try:
            cpus.append(parse_cpu_list(t) if t is not None else None)
        except ValueError:
            cpus.append(None)
    edac: dict[str, tuple[int, int]] | None = None
    mc_root = sysd / "devices/system/edac/mc"
    if mc_root.is_dir():
        edac = {}
        for mc in sorted(mc_root.glob("mc[0-9]*")):
            try:
                ce = int((mc / "ce_count").read_text())
                ue = int((mc / "ue_count").read_text())
            except (OSError, ValueError):
                continue
            edac[mc.name] = (ce, ue)
        if not edac:
            edac = None
    return HostSnapshot(mem, cpus[0], cpus[1], edac)


_CGROUP_JOB = LazyPattern(r"/job_(\d+)(?:/|$)")


def _job_of(pdir: Path) -> str | None:
    text = _read(pdir / "cgroup")
    if text:
        m = _CGROUP_JOB.search(text)
        if m:
            return m.group(1)
    try:
        env = (pdir / "environ").read_bytes()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item[13:].decode(errors="replace") or None
    return None


def gather_procs(cfg: Config, ctx: GatherContext) -> ProcSnapshot:
    """Every process's pid, uid, comm and state; job ids for the job uid's processes.

    In a job context (the epilog), processes of the job's uid that would count as leftovers
    get up to ``checks.host.leftover_grace`` seconds to finish exiting: the scan is repeated
    until they are gone or the grace (bounded by the deadline) runs out.
    """
    snap = _scan_procs(cfg, ctx)
    uid = ctx.job_uid
    if uid is None or uid < int(cfg["checks.host.leftover_min_uid"]):
        return snap
    ignore = cfg["checks.host.leftover_ignore"]
    until = min(time.monotonic() + float(cfg["checks.host.leftover_grace"]), ctx.deadline - 0.5)
    while leftovers(snap.procs, uid, ctx.job_id, ignore, snap.self_pid) and time.monotonic() < until:
        time.sleep(0.1)
        snap = _scan_procs(cfg, ctx)
    return snap


def _scan_procs(cfg: Config, ctx: GatherContext) -> ProcSnapshot:
    proc = Path(cfg["checks.host.proc_root"])
    out: list[ProcInfo] = []
    try:
        pids = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError as exc:
        raise SlurmguardError(f"{proc}: cannot list: {exc.strerror}") from None
    for pid in pids:
        pdir = proc / pid
        status = _read(pdir / "status")
        if status is None:
            continue  # exited while we looked
        uid_m = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
        name_m = re.search(r"^Name:\s*(.*)$", status, re.MULTILINE)
        state_m = re.search(r"^State:\s+(\S)", status, re.MULTILINE)
        if not uid_m:
            continue
        uid = int(uid_m.group(1))
        comm = (_read(pdir / "comm") or (name_m.group(1) if name_m else "")).strip()
        job = _job_of(pdir) if ctx.job_uid is not None and uid == ctx.job_uid else None
        out.append(ProcInfo(int(pid), uid, comm, state_m.group(1) if state_m else "?", job))
    return ProcSnapshot(tuple(sorted(out, key=lambda x: x.pid)), ctx.job_uid, ctx.job_id, os.getpid())


def gather_munge(cfg: Config, ctx: GatherContext) -> MungeStatus:
    """Encode and decode a credential; Unsupported where munge is not installed."""
    munge, unmunge = cfg["checks.host.munge"], cfg["checks.host.unmunge"]
    for tool in (munge, unmunge):
        if not os.path.exists(tool):
            raise Unsupported(f"{tool}: not installed")
    sock = cfg["checks.host.munge_socket"]
    extra = ["--socket", sock] if sock else []
    start = time.monotonic()
    try:
        cred = run_command([munge, "-n", *extra], timeout=_timeout(cfg, ctx)).stdout
        run_command([unmunge, *extra], timeout=_timeout(cfg, ctx), input=cred)
    except CommandError as exc:
        return MungeStatus(False, str(exc), time.monotonic() - start)
    return MungeStatus(True, "", time.monotonic() - start)
