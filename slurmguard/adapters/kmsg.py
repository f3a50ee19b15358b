"""Source "kmsg": the kernel log lines that mention an Xid, read once per hook.

Three readers, chosen by ``checks.xid.source``:

* ``kmsg``: ``/dev/kmsg`` opened non-blocking; each read() returns one record
  ``prio,seq,usec,flags;message`` (+ continuation lines); reading stops at EAGAIN (end of the
  ring buffer). EPIPE means the record we were about to read was overwritten: skip on.
  Position = the record's sequence number, identity = the boot id (seq restarts per boot).
* ``file``: a log file (fixtures, or kern.log on nodes without kmsg access) holding kmsg
  records, dmesg lines (``[  12.345678] text``) or syslog lines; only the last ``max_bytes``
  are read. Position = byte offset of the line's end, identity = device:inode.
* ``journal``: ``journalctl -k -b -o json`` through run_command. Position = the entry's
  realtime timestamp in microseconds, identity = the boot id.

The check (slurmguard.checks.xid) compares positions with its saved cursor; this module only
reads. It also maps PCI bus ids to GPU indexes from the driver's /proc tree.
"""

import errno
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from slurmguard.config import Config
from slurmguard.errors import CommandError, SlurmguardError, Unsupported
from slurmguard.lazyre import LazyPattern
from slurmguard.proc import run_command
from slurmguard.sources import GatherContext
from slurmguard.sources.xidline import MARKERS, normalize_pci, parse_kernel_line

# Cheap pre-filter (substring tests in C); the check parses the survivors.
_MARKS = MARKERS
_BMARKS = tuple(m.encode() for m in MARKERS)


def _marked(text: str) -> bool:
    return any(m in text for m in _MARKS)


class LogRecord(NamedTuple):
    pos: int  # seq (kmsg), end offset (file), realtime usec (journal)
    wall: float | None  # wall-clock seconds, None when the line carries no usable time
    text: str


class KernelLog(NamedTuple):
    kind: str  # kmsg | file | journal
    identity: str  # boot id or dev:inode: a cursor from another identity is not comparable
    end_pos: int  # position of the last record read (all records, not only Xid ones)
    records: tuple[LogRecord, ...]  # only records mentioning "Xid"
    gpus: Mapping[str, int] = MappingProxyType({})  # "0000:3b:00" -> GPU index
    scanned: int = 0  # records/lines looked at
    boot_id: str = ""  # this boot (the check's latch is cleared by a reboot)


def gather(cfg: Config, ctx: GatherContext) -> KernelLog:
    """Read the configured kernel log once; Unsupported where there is no NVIDIA driver."""
    p = cfg.section("checks.xid")
    source = p["source"]
    if source == "kmsg":
        log = _read_kmsg(p)
    elif source == "file":
        log = _read_file(p)
    else:
        log = _read_journal(p, ctx)
    return finish(p, log)


def finish(p: Mapping[str, object], log: KernelLog) -> KernelLog:
    """Add the GPU map and the boot id to what a reader read (the hook's own read, or the
    agent's follower, slurmguard/node/agent.py); Unsupported on a node without NVIDIA driver."""
    gpus_root = Path(str(p["nvidia_proc_root"]))
    gpus = read_gpu_map(gpus_root)
    log = KernelLog(log.kind, log.identity, log.end_pos, log.records, gpus, log.scanned,
                    _boot_id(str(p["boot_id_path"])))
    if not gpus_root.is_dir() and not any(_is_fault(r.text) for r in log.records):
        # No driver loaded and no Xid ever logged: a CPU node. (With Xids present we report
        # them even without the /proc tree: a driver that failed to come back is a fault.)
        raise Unsupported(f"no NVIDIA driver ({gpus_root} absent)")
    return log


def _is_fault(text: str) -> bool:
    ev = parse_kernel_line(text)
    return ev is not None and ev.kind != "unreadable"


def read_gpu_map(root: Path) -> dict[str, int]:
    """PCI bus id -> GPU index from <root>/<bus id>/information ("Device Minor: N")."""
    out: dict[str, int] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return out
    for d in entries:
        try:
            text = (d / "information").read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"^Device Minor:\s*(\d+)", text, re.MULTILINE)
        if m:
            out[_bus_key(d.name)] = int(m.group(1))
    return out


def _bus_key(name: str) -> str:
    # "0000:3b:00.0" -> "0000:3b:00", the form Xid lines use
    return normalize_pci(name)


def boot_time(stat_path: str) -> float | None:
    """btime from /proc/stat: wall-clock seconds of the boot (kernel timestamps are relative)."""
    try:
        with open(stat_path) as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip() or "unknown-boot"
    except OSError:
        return "unknown-boot"


def parse_kmsg_record(raw: str) -> tuple[int, int, str] | None:
    """``prio,seq,usec,flags;message`` -> (seq, usec, message); None if not a record."""
    head, sep, rest = raw.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3:
        return None
    try:
        seq, usec = int(fields[1]), int(fields[2])
    except ValueError:
        return None
    return seq, usec, rest.split("\n", 1)[0]


def _read_kmsg(p: Mapping[str, object]) -> KernelLog:
    path = str(p["kmsg_path"])
    fd = open_kmsg(path)
    try:
        records, last, scanned = read_kmsg_records(fd, path, boot_time(str(p["stat_path"])))
    finally:
        os.close(fd)
    return KernelLog("kmsg", _boot_id(str(p["boot_id_path"])), last, tuple(records), {}, scanned)


def open_kmsg(path: str) -> int:
    """Open the kernel log device non-blocking (Unsupported when it does not exist)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Unsupported(f"{path}: no such device") from None
    except OSError as exc:
        raise SlurmguardError(f"{path}: cannot open: {exc.strerror}") from None


def read_kmsg_records(fd: int, path: str, btime: float | None) -> tuple[list[LogRecord], int, int]:
    """Read records from ``fd`` up to the end of the ring buffer (EAGAIN): the marked
    records, the last sequence number read (-1: none) and how many records were looked at.
    The hook reads once; the agent's follower keeps ``fd`` open and calls this again."""
    records: list[LogRecord] = []
    last = -1
    scanned = 0
    while True:
        try:
            chunk = os.read(fd, 16384)
        except BlockingIOError:
            break  # EAGAIN: read everything in the ring buffer
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue  # overwritten while we read: the next read returns the next one
            raise SlurmguardError(f"{path}: read failed: {exc.strerror}") from None
        if not chunk:
            break
        parsed = parse_kmsg_record(chunk.decode("utf-8", "replace"))
        if parsed is None:
            continue
        seq, usec, msg = parsed
        scanned += 1
        last = max(last, seq)
        if _marked(msg):
            wall = btime + usec / 1e6 if btime is not None else None
            records.append(LogRecord(seq, wall, msg))
    return records, last, scanned


def _marked_lines(data: bytes, end: int) -> list[tuple[int, int]]:
    """(start, end) of each complete line in data[:end] holding a marker, in file order.

    Searches for the markers with bytes.find (C speed) instead of looking at every line in
    Python: a 100,000-line log with a handful of Xids costs a few finds, not 100,000 loops.
    """
    spans: set[tuple[int, int]] = set()
    for mark in _BMARKS:
        i = data.find(mark, 0, end)
        while i >= 0:
            lo = data.rfind(b"\n", 0, i) + 1
            hi = data.find(b"\n", i, end)
            if hi < 0:
                break
            spans.add((lo, hi))
            i = data.find(mark, hi, end)
    return sorted(spans)


# Every line shape a kernel log file can have (docs/checks.md, "Kernel-log line formats"):
#   4,1234,5678901,-;NVRM: ...                       raw /dev/kmsg record (usec since boot)
#   <4>[ 5678.901234] NVRM: ...                       dmesg -r (syslog priority prefix)
#   kern  :warn  : [ 5678.901234] NVRM: ...          dmesg -x (facility:level prefix)
#   [ 5678.901234] NVRM: ...                          dmesg (seconds since boot)
#   [Fri Aug 30 11:43:09 2024] NVRM: ...              dmesg -T / --time-format=ctime (local)
#   2024-08-30T11:43:09,123456+02:00 NVRM: ...        dmesg --time-format=iso
#   Aug 30 11:43:09 host kernel: NVRM: ...            syslog, journalctl -o short (local)
#   Aug 30 11:43:09.123456 host kernel: ...           journalctl -o short-precise
#   2024-08-30T11:43:09+0200 host kernel: ...         journalctl -o short-iso(-precise), rsyslog
#   [2026-07-15T04:18:55.513286+00:00] ...            Fabric Manager's log (SXid lines)
# A syslog/journal header's time wins over a dmesg stamp after "kernel:".
_PRIO_RE = LazyPattern(r"^<\d{1,3}>")
_LEVEL_RE = LazyPattern(r"^[a-z]{2,8}\s*:[a-z]{3,6}\s*:\s?")
_DMESG_RE = LazyPattern(r"^\[\s*(\d+\.\d+)\]\s?")
_CTIME_RE = LazyPattern(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?")
_ISO_RE = LazyPattern(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d(?::?\d\d)?)?)"
                      r"\s+")
_BSD_RE = LazyPattern(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)(\.\d{1,9})?\s+\S+\s+")
_HOST_KERNEL_RE = LazyPattern(r"^\S+\s+kernel:\s?")
# Fabric Manager's log: "[2026-07-15T04:18:55.513286+00:00] nvidia-nvswitch0: SXid ..."
_BRACKET_ISO_RE = LazyPattern(r"^\[(\d{4}-\d\d-\d\dT[^\]]{8,40})\]\s?")


def parse_log_line(line: str, btime: float | None, now: float) -> tuple[float | None, str]:
    """(wall time or None, message) of one file line in any of the shapes above."""
    rec = parse_kmsg_record(line) if ";" in line[:40] else None
    if rec is not None:
        return (btime + rec[1] / 1e6 if btime is not None else None), rec[2]
    line = _PRIO_RE.sub("", line, count=1)
    line = _LEVEL_RE.sub("", line, count=1)
    wall: float | None = None
    m = _ISO_RE.match(line)
    if m:
        wall = _iso_time(m.group(1))
        line = line[m.end():]
        h = _HOST_KERNEL_RE.match(line)  # syslog/journal: "host kernel: "; dmesg iso: none
        if h:
            line = line[h.end():]
    else:
        m = _BSD_RE.match(line)
        if m:
            wall = _bsd_time(m.group(1), now)
            if wall is not None and m.group(2):
                wall += float(m.group(2))
            line = line[m.end():]
    if line.startswith("kernel:"):
        line = line[len("kernel:"):].lstrip()
    m = _DMESG_RE.match(line)
    if m:
        if wall is None and btime is not None:
            wall = btime + float(m.group(1))
        line = line[m.end():]
    else:
        m = _CTIME_RE.match(line) or _BRACKET_ISO_RE.match(line)
        if m:
            if wall is None:
                wall = _ctime(m.group(1)) if m.re is _CTIME_RE.compiled else _iso_time(m.group(1))
            line = line[m.end():]
    return wall, line


def _iso_time(text: str) -> float | None:
    text = text.replace(",", ".").replace(" ", "T", 1).replace("Z", "+00:00")
    frac = re.search(r"\.(\d+)", text)
    if frac and len(frac.group(1)) > 6:  # nanoseconds: fromisoformat takes at most 6 digits
        text = text.replace(frac.group(0), "." + frac.group(1)[:6], 1)
    import datetime as dt  # only for a stamped Xid line: not on a healthy node's every hook

    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.astimezone()
    return t.timestamp()


def _ctime(text: str) -> float | None:
    # "Fri Aug 30 11:43:09 2024" in the node's local time (what dmesg -T prints)
    try:
        return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y"))
    except (ValueError, OverflowError):
        return None


def _bsd_time(text: str, now: float) -> float | None:
    # "Dec  2 15:33:38": no year; take this year, or last year if that lies in the future.
    year = time.localtime(now).tm_year
    for y in (year, year - 1):
        try:
            t = time.mktime(time.strptime(f"{y} {text}", "%Y %b %d %H:%M:%S"))
        except (ValueError, OverflowError):
            return None
        if t <= now + 86400:
            return t
    return None


def _read_file(p: Mapping[str, object], since: tuple[str, int] | None = None) -> KernelLog:
    """The last ``max_bytes`` of the file; with ``since`` = (identity, end_pos) of an earlier
    read of the same file (the agent's follower), only the lines appended after it."""
    path = str(p["file"])
    max_bytes = int(p["max_bytes"])  # type: ignore[call-overload]
    btime = boot_time(str(p["stat_path"]))
    now = time.time()
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            follow = (since is not None and since[0] == f"{st.st_dev}:{st.st_ino}"
                      and since[1] <= st.st_size)
            start = since[1] if follow and since else max(0, st.st_size - max_bytes)
            fh.seek(start)
            data = fh.read(st.st_size - start)
    except FileNotFoundError:
        raise Unsupported(f"{path}: no such file") from None
    except OSError as exc:
        raise SlurmguardError(f"{path}: cannot read: {exc.strerror}") from None
    if start and not follow:
        cut = data.find(b"\n") + 1  # drop the partial first line
        start, data = start + cut, data[cut:]
    records: list[LogRecord] = []
    end = data.rfind(b"\n") + 1  # the piece after the last newline is not complete yet
    scanned = data.count(b"\n", 0, end)
    for lo, hi in _marked_lines(data, end):
        wall, msg = parse_log_line(data[lo:hi].decode("utf-8", "replace"), btime, now)
        records.append(LogRecord(start + hi + 1, wall, msg))
    pos = start + end
    return KernelLog("file", f"{st.st_dev}:{st.st_ino}", pos, tuple(records), {}, scanned)


def _read_journal(p: Mapping[str, object], ctx: GatherContext) -> KernelLog:
    tool = str(p["journalctl"])
    if not os.path.exists(tool):
        raise Unsupported(f"{tool}: not installed")
    since = int(time.time() - float(p["lookback"]))  # type: ignore[arg-type]
    timeout = min(float(p["timeout"]), max(0.1, ctx.deadline - time.monotonic()))  # type: ignore[arg-type]
    argv = [tool, "-k", "-b", "-o", "json", "--no-pager", "-q", "--since", f"@{since}"]
    try:
        res = run_command(argv, timeout=timeout)
    except CommandError as exc:
        raise SlurmguardError(f"journalctl -k: {exc}") from None
    records: list[LogRecord] = []
    last = 0
    scanned = 0
    boot = _boot_id(str(p["boot_id_path"]))
    lines = res.stdout.splitlines()
    for i, line in enumerate(lines):
        # json.loads only where it can matter: a marked line, a byte-array MESSAGE (journald's
        # form for non-UTF-8 text), and the last line (the cursor). The rest is only counted.
        last_line = i == len(lines) - 1
        if not (last_line or _marked(line) or '"MESSAGE":[' in line or '"MESSAGE": [' in line):
            scanned += 1
            continue
        try:
            entry = json.loads(line)
            usec = int(entry["__REALTIME_TIMESTAMP"])
        except (ValueError, KeyError, TypeError):
            continue
        scanned += 1
        last = max(last, usec)
        msg = entry.get("MESSAGE")
        if isinstance(msg, list):  # journald stores non-UTF-8 messages as byte arrays
            msg = bytes(b & 0xFF for b in msg if isinstance(b, int)).decode("utf-8", "replace")
        if isinstance(msg, str) and _marked(msg):
            records.append(LogRecord(usec, usec / 1e6, msg))
    return KernelLog("journal", boot, last, tuple(records), {}, scanned)
