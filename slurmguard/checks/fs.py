"""Checks of area 'fs': the filesystems jobs need are mounted, writable, not full, responding.

``fs-mount`` catches: a shared filesystem that failed to mount at boot (jobs then write into
the empty mountpoint on the root disk or fail to find their data), a filesystem remounted
read-only after an I/O error (ext4 ``errors=remount-ro``), a full or inode-exhausted /tmp or
scratch (jobs die with ENOSPC minutes in), and a hung NFS/Lustre client (every process
touching it hangs in D state). It reads /proc/self/mountinfo (mounted? ``ro`` flag?) and the
output of a statfs probe run in a subprocess per path with a timeout (free blocks, free
inodes, and whether it answered at all). Thresholds: below ``min_free_pct`` (3%) free
space or ``min_free_inodes_pct`` (3%) free inodes a job will very likely hit ENOSPC, so the
node is unhealthy; below ``warn_free_pct`` (10%) it is degraded, a hint to clean up. A probe
that does not answer within ``probe_timeout`` (5 s; a healthy statfs takes microseconds, and
even a loaded NFS server answers in well under a second) is unhealthy: a hung mount is a node
fault, and when a shared server hangs for every node the fleet's blast-radius guard stops the
mass drain and raises one alert instead.

Defaults are healthy on any plain machine: ``mounts = ["/"]`` (paths that must be mount
points) and ``dirs = ["/tmp"]`` (paths whose filesystem, wherever mounted, must be healthy).
Sites add their shared filesystems to ``mounts`` (e.g. "/home", "/scratch").
"""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.contract import CheckResult, degraded, healthy, unhealthy
from slurmguard.fieldtypes import AbsPath, Float, StrList

AREA = "fs"
PARAMS: dict[str, Any] = {
    "mounts": StrList(["/"], "paths that must be mount points (e.g. /home, /scratch)"),
    "dirs": StrList(["/tmp"], "paths whose filesystem must be writable, not full, responding"),
    "mountinfo": AbsPath("/proc/self/mountinfo", "the mount table read"),
    "probe": StrList(["/usr/bin/stat", "-f", "-c", "%a %b %S %d %c", "--"],
                     "statfs probe argv; the path is appended; prints avail blocks, blocks, "
                     "block size, free inodes, inodes"),
    "probe_timeout": Float(5.0, "seconds before a path counts as not responding", minimum=0.1),
    "min_free_pct": Float(3.0, "free space below this percentage: unhealthy"),
    "warn_free_pct": Float(10.0, "free space below this percentage: degraded"),
    "min_free_inodes_pct": Float(3.0, "free inodes below this percentage: unhealthy"),
    "warn_free_inodes_pct": Float(10.0, "free inodes below this percentage: degraded"),
    "allow_read_only": StrList([], "paths allowed to be mounted read-only (e.g. /opt/apps)"),
}


def _path_problems(path: str, must_mount: bool, snap: Any, p: Any) -> tuple[list[str], list[str]]:
    bad: list[str] = []
    warn: list[str] = []
    mount = snap.mount_of(path)
    if must_mount and (mount is None or mount.mountpoint != path):
        return [f"{path} is not mounted"], []
    if mount is not None and mount.read_only and path not in p["allow_read_only"]:
        bad.append(f"{path} is mounted read-only ({mount.fstype} {mount.source})")
    probe = snap.probes.get(path)
    if probe is None:
        return bad, warn
    if probe.timed_out:
        return [f"{path} not responding after {float(p['probe_timeout']):g}s", *bad], warn
    if not probe.ok:
        return [f"{path}: {probe.error}", *bad], warn
    for label, pct, low, mid in (
        ("space", probe.free_pct, p["min_free_pct"], p["warn_free_pct"]),
        ("inodes", probe.free_inodes_pct, p["min_free_inodes_pct"], p["warn_free_inodes_pct"]),
    ):
        if pct is None:
            continue
        if pct < float(low):
            bad.append(f"{path} has {pct:.1f}% free {label} (< {float(low):g}%)")
        elif pct < float(mid):
            warn.append(f"{path} has {pct:.1f}% free {label} (< {float(mid):g}%)")
    return bad, warn


@check("fs-mount", AREA, ("fs",), "filesystems mounted, read-write, not full, responding")
def fs_mount(ctx: CheckContext) -> CheckResult:
    p = ctx.params
    snap = ctx.sources["fs"]
    bad: list[str] = []
    warn: list[str] = []
    details: dict[str, Any] = {}
    targets = [(m, True) for m in p["mounts"]] + [(d, False) for d in p["dirs"] if d not in p["mounts"]]
    for path, must_mount in targets:
        b, w = _path_problems(path, must_mount, snap, p)
        bad += b
        warn += w
        probe = snap.probes.get(path)
        details[path] = {
            "free_pct": None if probe is None or probe.free_pct is None else round(probe.free_pct, 1),
            "free_inodes_pct": None if probe is None or probe.free_inodes_pct is None
            else round(probe.free_inodes_pct, 1),
            "probe_s": None if probe is None else round(probe.duration, 4),
        }
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return unhealthy("fs-mount", bad[0] + more, paths=details)
    if warn:
        more = f" (+{len(warn) - 1} more)" if len(warn) > 1 else ""
        return degraded("fs-mount", warn[0] + more, paths=details)
    return healthy("fs-mount", paths=details)


CHECKS: list[Check] = [fs_mount]
