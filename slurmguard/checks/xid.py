"""Checks of area 'xid': NVIDIA GPU (Xid) and NVSwitch (SXid) errors in the kernel log.

Fault caught: a GPU that the driver reported as broken (fallen off the bus, double-bit ECC,
GSP timeout, fatal NVLink error...). NVML counters miss many of these, and a GPU that fell
off the bus may not even be enumerated any more, so the driver's own log line is the most
direct evidence. The line read is the NVIDIA driver's ``NVRM: Xid`` message, e.g.::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (0000:3b:00): 13, Graphics Exception: ...            (drivers before ~450)
    NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 ...)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=..., Contained ECC error   (MIG instance 5)
    NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.            (no Xid: same as Xid 79)
    nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 31 LTSSM Fault Up

A line that names an Xid or SXid but fits no known shape is reported (degraded, with the
line), never dropped: a new driver format must not hide a dead GPU.
Only Xids logged since the last run count (the cursor is kept in the check's state: kmsg
sequence number + boot id, file inode + offset, or journal timestamp + boot id); on the first
run, only those within ``window`` seconds, so installing slurmguard on a node with an old,
already-handled Xid in its ring buffer does not drain it. Classification: xid_table.py; the
line shapes are read by slurmguard/sources/xidline.py (the kernel-log adapter shares them).
A drain-class Xid is latched (``latch``, on by default) until the boot id changes: the next
run finding no *new* Xid proves nothing about the GPU, and without the latch the healthcheck
would undrain a node whose GPU still needs its reset/reboot.
App errors (Xid 13, 31, ...) are the job's fault; only ``app_error_repeat`` of them on the
same GPU within ``app_error_window`` seconds mean degraded, because one bad kernel
must not drain a node but a GPU that faults for every job is suspect.
"""

from __future__ import annotations

import re
from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.checks.xid_table import (
    ACTIONS,
    SXID_ACTION,
    XID_TABLE,
    XidClass,
    classify,
    classify_sxid,
    nvlink_words,
)
from slurmguard.contract import CheckResult, degraded, healthy, unhealthy
from slurmguard.fieldtypes import AbsPath, Bool, Choice, Float, Int, IntList
from slurmguard.sources.xidline import XidEvent, parse_kernel_line

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
    "sxid_ignore_codes": IntList([], "NVSwitch SXid codes never acted on"),
    "app_error_repeat": Int(3, "app-error Xids on one GPU within app_error_window -> degraded", minimum=1),
    "app_error_window": Float(3600.0, "seconds over which app-error Xids are counted", minimum=1),
    "latch": Bool(True, "a drain-class Xid keeps the check unhealthy until the node reboots"),
}

def gpu_label(pci: str, gpus: dict[str, int], instance: int | None = None) -> str:
    index = gpus.get(pci)
    mig = f" MIG GI {instance}" if instance is not None else ""
    return f"GPU {index if index is not None else '?'}{mig} (PCI {pci or '?'})"


def switch_label(ev: XidEvent) -> str:
    return f"NVSwitch {ev.switch if ev.switch is not None else '?'} (PCI {ev.pci})"


def _sxid_tail(message: str) -> str:
    """What an SXid line says after its severity: `Fatal, Link 31 LTSSM Fault Up` -> `Link 31 ...`."""
    head, sep, tail = message.partition(",")
    text = tail if sep and re.match(r"\s*(?:always\s+)?(?:non-?)?fatal\s*$", head, re.I) else message
    return text.strip()[:60]


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
    sxid_ignore = frozenset(p["sxid_ignore_codes"])
    window_app = float(p["app_error_window"])
    history: dict[str, list[float]] = {
        k: [t for t in v if t >= ctx.now - window_app]
        for k, v in (ctx.previous.get("app_errors") or {}).items() if isinstance(v, list)
    }
    bad: list[str] = []
    warn: list[str] = []
    events: list[dict[str, Any]] = []
    for rec in records:
        ev = parse_kernel_line(rec.text)
        if ev is None:
            continue
        event: dict[str, Any] = {"kind": ev.kind, "pci": ev.pci, "xid": ev.code,
                                 "message": ev.message[:200]}
        if rec.wall is not None:  # the line's kernel time: an incident's first signal
            event["at"] = round(rec.wall, 3)
        events.append(event)
        if ev.kind == "unreadable":
            event.update({"class": XidClass.UNKNOWN.value, "action": ACTIONS[XidClass.UNKNOWN]})
            warn.append(f"unreadable Xid line: {ev.message[:80]}")
            continue
        if ev.kind == "sxid":
            klass, what = classify_sxid(ev.code, ev.message, ignore_codes=sxid_ignore)
            tail = _sxid_tail(ev.message)
            line = f"{switch_label(ev)} SXid {ev.code}: {what}" + (f": {tail}" if tail else "")
            event.update({"switch": ev.switch, "class": klass.value,
                          "action": SXID_ACTION if klass is XidClass.DRAIN else ACTIONS[klass]})
        else:
            if ev.kind == "bus":  # the driver lost the GPU before it logged an Xid 79
                klass, what = classify(79, "", drain_codes=drain, ignore_codes=ignore)
                line = f"{gpu_label(ev.pci, gpus)}: GPU has fallen off the bus"
            else:
                klass, what = classify(ev.code, ev.message, drain_codes=drain, ignore_codes=ignore)
                label = gpu_label(ev.pci, gpus, ev.instance)
                line = f"{label} Xid {ev.code}: {what}"
                if klass is XidClass.UNKNOWN:
                    line = f"{label} Xid {ev.code}: unknown Xid"
            event.update({"gpu": gpus.get(ev.pci), "class": klass.value,
                          "action": ACTIONS[klass], "process": ev.process})
            if ev.instance is not None:
                event["gpu_instance"] = ev.instance
            if ev.code == 74 and ev.kind == "xid":
                event["nvlink_words"] = nvlink_words(ev.message)
        if klass is XidClass.DRAIN:
            bad.append(line)
        elif klass in (XidClass.DEGRADED, XidClass.UNKNOWN, XidClass.UNUSED):
            warn.append(line)
        elif klass is XidClass.APP:
            history.setdefault(ev.pci, []).append(rec.wall if rec.wall is not None else ctx.now)
    bad = list(dict.fromkeys(bad))  # a lost GPU logs both its Xid 79 and the bare line
    warn = list(dict.fromkeys(warn))
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

__all__ = ["AREA", "CHECKS", "PARAMS", "XID_TABLE"]
