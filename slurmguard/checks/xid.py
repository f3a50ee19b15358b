"""Checks of area 'xid': NVIDIA Xid errors in the kernel log.

Fault caught: a GPU that the driver reported as broken (fallen off the bus, double-bit ECC,
GSP timeout, fatal NVLink error...). NVML counters miss many of these, and a GPU that fell
off the bus may not even be enumerated any more, so the driver's own log line is the most
direct evidence. The line read is the NVIDIA driver's ``NVRM: Xid`` message, e.g.::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (0000:3b:00): 13, Graphics Exception: ...            (drivers before ~450)
    NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 ...)

Only Xids logged since the last run count (the cursor is kept in the check's state: kmsg
sequence number + boot id, file inode + offset, or journal timestamp + boot id); on the first
run, only those within ``window`` seconds, so installing slurmguard on a node with an old,
already-handled Xid in its ring buffer does not drain it. Classification: xid_table.py.
A drain-class Xid is latched (``latch``, on by default) until the boot id changes: the next
run finding no *new* Xid proves nothing about the GPU, and without the latch the healthcheck
would undrain a node whose GPU still needs its reset/reboot.
App errors (Xid 13, 31, ...) are the job's fault; only ``app_error_repeat`` of them on the
same GPU within ``app_error_window`` seconds mean degraded, because one bad kernel
must not drain a node but a GPU that faults for every job is suspect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.checks.xid_table import ACTIONS, XID_TABLE, XidClass, classify
from slurmguard.fieldtypes import AbsPath, Bool, Choice, Float, Int, IntList
from slurmguard.health import CheckResult, degraded, healthy, unhealthy

AREA = "xid"
PARAMS: dict[str, Any] = {
    "source": Choice("kmsg", ("kmsg", "file", "journal"),
                     "where the kernel log is read: /dev/kmsg, a file, or `journalctl -k`"),
    "kmsg_path": AbsPath("/dev/kmsg", "kernel log device (source = kmsg)"),
    "boot_id_path": AbsPath("/proc/sys/kernel/random/boot_id", "identifies the boot (kmsg/journal cursor)"),
    "stat_path": AbsPath("/proc/stat", "btime: converts kernel timestamps to wall-clock time"),
    "file": AbsPath("/var/log/kern.log", "kernel log file (source = file): kmsg, dmesg or syslog lines"),
    "max_bytes": Int(8 << 20, "read at most this many bytes from the end of the file", minimum=4096),
    "journalctl": AbsPath("/usr/bin/journalctl", "journalctl (source = journal)"),
    "lookback": Float(7 * 86400.0, "seconds of journal read back (source = journal)", minimum=1),
    "timeout": Float(10.0, "seconds before journalctl is killed", minimum=0.1),
    "nvidia_proc_root": AbsPath("/proc/driver/nvidia/gpus",
                                "driver's per-GPU directories: PCI bus id -> GPU index (Device Minor)"),
    "window": Float(3600.0, "first run (no cursor): count Xids of the last N seconds", minimum=0),
    "drain_codes": IntList([], "extra Xid codes that drain (added to the built-in table)"),
    "ignore_codes": IntList([], "Xid codes never acted on"),
    "app_error_repeat": Int(3, "app-error Xids on one GPU within app_error_window -> degraded", minimum=1),
    "app_error_window": Float(3600.0, "seconds over which app-error Xids are counted", minimum=1),
    "latch": Bool(True, "a drain-class Xid keeps the check unhealthy until the node reboots"),
}

# `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`
# The domain is 4 hex digits on current drivers; accept up to 8 (nvidia-smi style).
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<dom>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?\): (?P<code>\d{1,5}),[ \t]*(?P<rest>[^\n]*)"
)
_PID_RE = re.compile(r"pid=(?P<pid>'<unknown>'|<unknown>|\d+),\s*name=(?P<name>[^,]*),\s*")


@dataclass(frozen=True)
class XidEvent:
    pci: str  # normalised "0000:3b:00" (domain:bus:device, lower case)
    code: int
    pid: int | None
    process: str | None
    message: str


def normalize_pci(text: str) -> str:
    """'PCI:00000000:3B:00.0' / '0000:3b:00' -> '0000:3b:00' (the key used for the GPU map)."""
    text = text.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) != 3:
        return text.lower()
    dom, bus, dev = parts
    dev = dev.split(".")[0]
    try:
        return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return text.lower()


def parse_xid_line(text: str) -> XidEvent | None:
    """Parse one kernel log message; None when it holds no Xid. Never raises."""
    if "Xid" not in text:
        return None
    m = XID_RE.search(text)
    if not m:
        return None
    rest = m.group("rest").strip()
    pid: int | None = None
    process: str | None = None
    pm = _PID_RE.match(rest)
    if pm:
        raw_pid = pm.group("pid")
        pid = int(raw_pid) if raw_pid.isdigit() else None
        name = pm.group("name").strip()
        process = None if name == "<unknown>" else name
        rest = rest[pm.end():]
    pci = f"{int(m.group('dom'), 16):04x}:{m.group('bus').lower()}:{m.group('dev').lower()}"
    return XidEvent(pci, int(m.group("code")), pid, process, rest.strip())


def format_xid_line(pci: str, code: int, message: str, pid: int | None = None,
                    process: str | None = None) -> str:
    """The driver's line for these fields (r470+ format); the inverse of parse_xid_line."""
    p = str(pid) if pid is not None else "'<unknown>'"
    n = process if process is not None else "<unknown>"
    return f"NVRM: Xid (PCI:{normalize_pci(pci)}): {code}, pid={p}, name={n}, {message}"


def gpu_label(pci: str, gpus: dict[str, int]) -> str:
    index = gpus.get(pci)
    return f"GPU {index if index is not None else '?'} (PCI {pci})"


def _new_records(log: Any, previous: dict[str, Any], now: float, window: float) -> list[Any]:
    """Records after the saved cursor; on a first run (or new boot/file), those in the window."""
    cursor = previous.get("cursor") or {}
    same = (cursor.get("kind") == log.kind and cursor.get("identity") == log.identity
            and isinstance(cursor.get("pos"), int) and cursor["pos"] <= log.end_pos)
    if same:
        return [r for r in log.records if r.pos > cursor["pos"]]
    horizon = now - window
    return [r for r in log.records if r.wall is None or r.wall >= horizon]


def _latched(previous: Any, boot_id: str) -> list[str]:
    """Drain-class Xids of this boot seen by earlier runs (a reboot clears them)."""
    latch = previous.get("latched") or {}
    if not boot_id or latch.get("boot") != boot_id:
        return []
    return [str(x) for x in latch.get("faults") or [] if isinstance(x, str)]


@check("gpu-xid", AREA, ("kmsg",), "NVIDIA Xid errors in the kernel log since the last run")
def gpu_xid(ctx: CheckContext) -> CheckResult:
    p = ctx.params
    log = ctx.sources["kmsg"]
    gpus = dict(log.gpus)
    records = _new_records(log, dict(ctx.previous), ctx.now, float(p["window"]))
    ctx.new_state["cursor"] = {"kind": log.kind, "identity": log.identity, "pos": log.end_pos}
    drain, ignore = frozenset(p["drain_codes"]), frozenset(p["ignore_codes"])
    window_app = float(p["app_error_window"])
    history: dict[str, list[float]] = {
        k: [t for t in v if t >= ctx.now - window_app]
        for k, v in (ctx.previous.get("app_errors") or {}).items() if isinstance(v, list)
    }
    bad: list[str] = []
    warn: list[str] = []
    events: list[dict[str, Any]] = []
    for rec in records:
        ev = parse_xid_line(rec.text)
        if ev is None:
            continue
        klass, what = classify(ev.code, ev.message, drain_codes=drain, ignore_codes=ignore)
        label = gpu_label(ev.pci, gpus)
        line = f"{label} Xid {ev.code}: {what}"
        events.append({"gpu": gpus.get(ev.pci), "pci": ev.pci, "xid": ev.code,
                       "class": klass.value, "action": ACTIONS[klass], "process": ev.process,
                       "message": ev.message[:200]})
        if klass is XidClass.DRAIN:
            bad.append(line)
        elif klass in (XidClass.DEGRADED, XidClass.UNKNOWN):
            warn.append(line if klass is XidClass.DEGRADED else f"{label} Xid {ev.code}: unknown Xid")
        elif klass is XidClass.APP:
            history.setdefault(ev.pci, []).append(rec.wall if rec.wall is not None else ctx.now)
    ctx.new_state["app_errors"] = {k: v[-50:] for k, v in history.items() if v}
    for pci, times in sorted(history.items()):
        if len(times) >= int(p["app_error_repeat"]):
            warn.append(f"{gpu_label(pci, gpus)}: {len(times)} app-error Xids within {window_app:g}s")
    details: dict[str, Any] = {"new_xids": len(events), "events": events[:20], "source": log.kind}
    if p["latch"]:
        latched = _latched(ctx.previous, log.boot_id)
        ctx.new_state["latched"] = {"boot": log.boot_id, "faults": (latched + bad)[-20:]}
        if latched and not bad:
            details["latched"] = latched
            more = f" (+{len(latched) - 1} more)" if len(latched) > 1 else ""
            return unhealthy("gpu-xid", f"{latched[0]} (latched until reboot){more}", **details)
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return unhealthy("gpu-xid", bad[0] + more, **details)
    if warn:
        more = f" (+{len(warn) - 1} more)" if len(warn) > 1 else ""
        return degraded("gpu-xid", warn[0] + more, **details)
    return healthy("gpu-xid", **details)


CHECKS: list[Check] = [gpu_xid]

__all__ = ["AREA", "CHECKS", "PARAMS", "XID_TABLE", "XidEvent", "format_xid_line",
           "normalize_pci", "parse_xid_line"]
