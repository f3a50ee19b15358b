"""The node's durable record spool: one file per result record that serve has not taken yet.

Standard library only: it runs in every prolog. A record is written to a temp name, fsync'd,
renamed, and the directory fsync'd (slurmguard.atomic), so a crash or power loss leaves either the whole record
or nothing. Names sort by time, so the oldest is first and replay keeps the order of events.
The spool keeps at most ``spool_max`` records, dropping the oldest. What to do with the
records (send them, when) is :mod:`slurmguard.node.delivery`'s business.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from slurmguard.atomic import write_atomic

_SUFFIX = ".json"
DROPPED_FILE = ".dropped"  # in the spool: how many records spool_max has dropped, ever


def check_dir(spool_dir: str) -> None:
    """Refuse a spool others could plant files or symlinks in: it must be a real directory
    (not a symlink), owned by this user, not writable by group or others (OSError)."""
    st = os.lstat(spool_dir)
    why = ""
    if stat.S_ISLNK(st.st_mode):
        why = "is a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid != os.geteuid():
        why = f"is owned by uid {st.st_uid}, not {os.geteuid()}"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if why:
        raise OSError(f"{spool_dir} {why}: not used (it must be 0700 and ours)")


def write(record: dict[str, Any], spool_dir: str, spool_max: int) -> str:
    """Write one record durably to the spool; drop the oldest beyond ``spool_max``.

    Returns the file's path. Raises OSError when the record could not be written (a full or
    read-only disk, an unsafe spool directory). Dropping old records is said on stderr and
    counted in ``spool_dir/.dropped``.
    """
    return write_and_say(record, spool_dir, spool_max)[0]


def _fresh_id() -> str:
    """A random id for a record that carries none (hook records carry theirs): uuid is
    imported only then, not on every health check that spools or replays (a few ms)."""
    import uuid

    return uuid.uuid4().hex


def write_and_say(record: dict[str, Any], spool_dir: str, spool_max: int) -> tuple[str, str]:
    """:func:`write`, also returning the line that says what was dropped ("" if nothing)."""
    os.makedirs(spool_dir, mode=0o700, exist_ok=True)
    check_dir(spool_dir)
    name = f"{time.time_ns():020d}-{record.get('id') or _fresh_id()}{_SUFFIX}"
    path = os.path.join(spool_dir, name)
    # "spooled": when it was spooled, so serve can count replays (slurmguard_spool_replayed_*).
    data = json.dumps({**record, "spooled": time.time()}, separators=(",", ":"))
    # Durable (fsync, rename, fsync of the directory); no partial file is left behind on a
    # full disk. The name is unique (time and record id): a plain rename.
    write_atomic(path, data)
    dropped = _trim(spool_dir, spool_max)
    if not dropped:
        return path, ""
    total = _count_dropped(spool_dir, len(dropped))
    msg = (f"spool {spool_dir} full (spool_max {spool_max}): dropped the oldest "
           f"{len(dropped)} record(s) {', '.join(_rid(n) for n in dropped[:3])}"
           f"{' ...' if len(dropped) > 3 else ''} ({total} dropped in all)")
    print(f"slurmguard: warning: {msg}", file=sys.stderr)
    return path, msg


def _rid(name: str) -> str:
    return name[:-len(_SUFFIX)].split("-", 1)[-1]


def _count_dropped(spool_dir: str, n: int) -> int:
    """Add ``n`` to the spool's dropped-records counter (a small file); returns the total."""
    path = os.path.join(spool_dir, DROPPED_FILE)
    total = n + dropped_count(spool_dir)
    try:
        write_atomic(path, f"{total}\n", durable=False)  # a counter shown to admins
    except OSError:
        pass
    return total


def dropped_count(spool_dir: str) -> int:
    """Records ever dropped from this spool because it was full (0 when none)."""
    try:
        fd = os.open(os.path.join(spool_dir, DROPPED_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def pending(spool_dir: str) -> list[str]:
    """Spooled record file names, oldest first."""
    try:
        names = os.listdir(spool_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(_SUFFIX) and not n.startswith("."))


def oldest(spool_dir: str, n: int) -> list[tuple[str, dict[str, Any]]] | None:
    """Up to ``n`` of the oldest (path, record) pairs; None when the spool is empty.

    A torn or vanished file, or one without a record ``id``, is removed (nothing to send), so
    the list may be empty while the spool is not yet.
    """
    names = pending(spool_dir)[:n]
    if not names:
        return None
    out: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        path = os.path.join(spool_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # never read through a symlink
            with os.fdopen(fd, "rb") as fh:
                rec = json.loads(fh.read())
        except (OSError, ValueError):
            remove(path)
            continue
        if not isinstance(rec, dict) or not rec.get("id"):
            remove(path)
            continue
        out.append((path, rec))
    return out


@contextmanager
def replay_lock(spool_dir: str) -> Iterator[bool]:
    """Hold the spool's replay lock (an flock, not waited for): yields False when another
    process holds it or there is no spool, so a prolog and an epilog finishing together do
    not send the same files twice."""
    import fcntl

    if not os.path.isdir(spool_dir):
        yield False
        return
    check_dir(spool_dir)
    lock_fd = os.open(os.path.join(spool_dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                      0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(lock_fd)


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _trim(spool_dir: str, spool_max: int) -> list[str]:
    names = pending(spool_dir)
    dropped = []
    for name in names[: max(0, len(names) - spool_max)]:
        try:
            os.unlink(os.path.join(spool_dir, name))
            dropped.append(name)
        except FileNotFoundError:
            pass
    return dropped
