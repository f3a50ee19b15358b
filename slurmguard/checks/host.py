"""Checks of area 'host': memory, CPUs, EDAC, daemons, leftover processes, munge.

(host-timesync keeps its name but has its own area and config table: checks/timesync.py.)

Each check's comment says the fault, what it reads and why the threshold.
"""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.contract import CheckResult, degraded, error, healthy, unhealthy, unsupported
from slurmguard.fieldtypes import AbsPath, Choice, Float, Int, Str, StrList
from slurmguard.sources.procs import leftovers

AREA = "host"
PARAMS: dict[str, Any] = {
    "proc_root": AbsPath("/proc", "procfs root (fixtures in tests)"),
    "sys_root": AbsPath("/sys", "sysfs root (fixtures in tests)"),
    "expected_memory_gib": Float(0.0, "installed memory in GiB (0 = do not check)"),
    "memory_tolerance_pct": Float(5.0, "MemTotal may be this much below expected (kernel reserves)"),
    "expected_cpus": Int(0, "online CPUs expected (0 = do not check)"),
    "edac_ce_rise": Int(0, "corrected memory errors per run that mean degraded (0 = ignore)"),
    "daemons": StrList([], "process names (comm) that must be running, e.g. slurmd, munged"),
    "leftover_min_uid": Int(1000, "uids below this are system accounts: never leftovers"),
    "leftover_ignore": StrList(["systemd", "(sd-pam)", "dbus-daemon"],
                               "process names of the job's uid that are not leftovers"),
    "leftover_grace": Float(2.0, "seconds to let leftover processes finish exiting before counting"),
    "leftover_health": Choice("unhealthy", ("unhealthy", "degraded"),
                              "what leftover job processes mean"),
    "munge": AbsPath("/usr/bin/munge", "munge (host-munge)"),
    "unmunge": AbsPath("/usr/bin/unmunge", "unmunge (host-munge)"),
    "munge_socket": Str("", "munged socket (empty: munge's default)"),
    "command_timeout": Float(5.0, "seconds before munge/unmunge are killed", minimum=0.1),
}

_GIB = 1024 * 1024  # KiB per GiB


# host-memory. Fault: a DIMM that failed training at boot (or a memory controller that lost a
# channel) - the node boots with less memory and jobs sized for the full node get OOM-killed.
# Reads MemTotal from /proc/meminfo. MemTotal is the physical size minus the kernel's and
# firmware's reservations (1-3% on large nodes), so the default tolerance is 5%: enough not
# to flag a healthy node, tight enough to catch one missing DIMM out of 16.
@check("host-memory", AREA, ("host",), "MemTotal matches the installed memory")
def host_memory(ctx: CheckContext) -> CheckResult:
    snap = ctx.sources["host"]
    expected = float(ctx.params["expected_memory_gib"])
    if snap.mem_total_kib is None:
        # An unreadable meminfo says nothing about the node's DIMMs: a checker error.
        return error("host-memory", "MemTotal missing from meminfo")
    have = snap.mem_total_kib / _GIB
    if expected <= 0:
        return healthy("host-memory", mem_total_gib=round(have, 1), note="expected_memory_gib not set")
    floor = expected * (1 - float(ctx.params["memory_tolerance_pct"]) / 100)
    if have < floor:
        return unhealthy("host-memory", f"{have:.1f} GiB of memory, expected {expected:g} GiB",
                         mem_total_gib=round(have, 1))
    return healthy("host-memory", mem_total_gib=round(have, 1))


# host-cpus. Fault: CPUs offlined by the kernel after machine-check errors, or a socket that
# did not come up. Reads /sys/devices/system/cpu/online. Exact count: any missing CPU means
# Slurm's CPU count (from slurm.conf) no longer matches and jobs are pinned to absent cores.
@check("host-cpus", AREA, ("host",), "online CPU count matches the expected count")
def host_cpus(ctx: CheckContext) -> CheckResult:
    snap = ctx.sources["host"]
    expected = int(ctx.params["expected_cpus"])
    if snap.cpus_online is None:
        return error("host-cpus", "cannot read the online CPU list")
    if expected and snap.cpus_online < expected:
        return unhealthy("host-cpus", f"{snap.cpus_online} of {expected} CPUs online",
                         online=snap.cpus_online, present=snap.cpus_present)
    return healthy("host-cpus", online=snap.cpus_online, present=snap.cpus_present)


# host-edac. Fault: uncorrectable memory errors (ue_count) - data corruption on this node -
# and storms of corrected errors (ce_count), which precede a DIMM failure. Reads
# /sys/devices/system/edac/mc/mc*/{ue,ce}_count. A UE count that rose since the last run is
# unhealthy (silent corruption of a job's data); a non-zero UE count that has not moved is
# degraded (it happened before, the DIMM should be replaced at the next window). CE rises are
# only counted when edac_ce_rise is set: CE rates vary too much between platforms for one
# default.
@check("host-edac", AREA, ("host",), "EDAC uncorrectable/corrected memory errors")
def host_edac(ctx: CheckContext) -> CheckResult:
    snap = ctx.sources["host"]
    if snap.edac is None:
        return unsupported("host-edac", "no EDAC memory controllers (/sys/devices/system/edac/mc)")
    before = ctx.previous.get("edac") or {}
    ctx.new_state["edac"] = {k: list(v) for k, v in snap.edac.items()}
    ce_limit = int(ctx.params["edac_ce_rise"])
    bad, warn = [], []
    for mc, (ce, ue) in sorted(snap.edac.items()):
        old = before.get(mc)
        old_ce, old_ue = (old[0], old[1]) if isinstance(old, list) and len(old) == 2 else (None, None)
        if old_ue is not None and ue > old_ue:
            bad.append(f"{mc}: {ue - old_ue} new uncorrectable memory errors")
        elif ue > 0:
            warn.append(f"{mc}: {ue} uncorrectable memory errors since boot")
        if ce_limit and old_ce is not None and ce - old_ce >= ce_limit:
            warn.append(f"{mc}: {ce - old_ce} corrected memory errors since last run")
    details = {"controllers": {k: {"ce": v[0], "ue": v[1]} for k, v in snap.edac.items()}}
    if bad:
        return unhealthy("host-edac", "; ".join(bad), **details)
    if warn:
        return degraded("host-edac", "; ".join(warn), **details)
    return healthy("host-edac", **details)


# host-daemons. Fault: a required daemon died (slurmd keeps the node alive in Slurm for a
# while after munged dies; a dead nvidia-persistenced or fabricmanager breaks the next GPU job).
# Reads /proc/*/comm. Default: none required, because which daemons matter is site policy;
# typical: ["slurmd", "munged"], plus "nv-fabricmanager" on NVSwitch systems.
@check("host-daemons", AREA, ("procs",), "required daemons are running")
def host_daemons(ctx: CheckContext) -> CheckResult:
    want = list(ctx.params["daemons"])
    running = {p.comm for p in ctx.sources["procs"].procs if p.state != "Z"}
    missing = [d for d in want if d[:15] not in running]  # comm is truncated to 15 chars
    if missing:
        return unhealthy("host-daemons", "not running: " + ", ".join(missing), required=want)
    return healthy("host-daemons", required=want)


# host-leftover-procs (epilog). Fault: processes of the finished job that survived it -
# unkillable (D state on a hung filesystem or a wedged GPU) or escaped the job's cgroup - and
# keep GPU memory, CPUs or files the next job needs. Reads /proc/*/status (real uid, state)
# and /proc/<pid>/cgroup (the job_<id> of Slurm's cgroup hierarchy). Counted: processes of
# SLURM_JOB_UID, not zombies, not in leftover_ignore, and not known to belong to another job
# of the same user still running on this node. uid < leftover_min_uid is never counted. The
# gather waits up to leftover_grace (2 s) for such processes to go away first: the epilog can
# start while killed processes are still exiting, and those are not a fault.
@check("host-leftover-procs", AREA, ("procs",), "no processes of the finished job's user left")
def host_leftover_procs(ctx: CheckContext) -> CheckResult:
    snap = ctx.sources["procs"]
    uid = snap.job_uid
    if uid is None:
        return unsupported("host-leftover-procs", "no job uid (only meaningful in the epilog)")
    if uid < int(ctx.params["leftover_min_uid"]):
        return healthy("host-leftover-procs", note=f"uid {uid} is a system account")
    left = leftovers(snap.procs, uid, snap.job_id, ctx.params["leftover_ignore"], snap.self_pid)
    if not left:
        return healthy("host-leftover-procs", uid=uid)
    shown = ", ".join(f"{p.comm} ({p.pid}{', D state' if p.state == 'D' else ''})" for p in left[:3])
    more = f" +{len(left) - 3} more" if len(left) > 3 else ""
    job = f" after job {snap.job_id}" if snap.job_id else ""
    reason = f"{len(left)} processes of uid {uid} still running{job}: {shown}{more}"
    details = {"pids": [p.pid for p in left[:50]], "uid": uid}
    if ctx.params["leftover_health"] == "degraded":
        return degraded("host-leftover-procs", reason, **details)
    return unhealthy("host-leftover-procs", reason, **details)


# host-munge. Fault: munged dead or its key out of sync: slurmd cannot authenticate to
# slurmctld, job launches fail, and the node goes NOT_RESPONDING minutes later. A real
# encode/decode round trip (`munge -n | unmunge`) is the only test that covers socket, daemon
# and key together.
@check("host-munge", AREA, ("munge",), "munge credential round trip works")
def host_munge(ctx: CheckContext) -> CheckResult:
    st = ctx.sources["munge"]
    if not st.ok:
        return unhealthy("host-munge", f"munge round trip failed: {st.error}")
    return healthy("host-munge", seconds=round(st.duration, 4))


CHECKS: list[Check] = [host_memory, host_cpus, host_edac, host_daemons, host_leftover_procs,
                       host_munge]
