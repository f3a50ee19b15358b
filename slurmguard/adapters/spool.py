"""The node's durable record spool: one file per result record that serve has not taken yet.

Standard library only: it runs in every prolog. A record is written to a temp name, fsync'd,
renamed, and the directory fsync'd, so a crash or power loss leaves either the whole record
or nothing. Names sort by time, so the oldest is first and replay keeps the order of events.
The spool keeps at most ``spool_max`` records, dropping the oldest. What to do with the
records (send them, when) is :mod:`slurmguard.delivery`'s business.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_SUFFIX = ".json"


def write(record: dict[str, Any], spool_dir: str, spool_max: int) -> str:
    """Write one record durably to the spool; drop the oldest beyond ``spool_max``."""
    os.makedirs(spool_dir, mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{record.get('id') or uuid.uuid4().hex}{_SUFFIX}"
    path = os.path.join(spool_dir, name)
    tmp = os.path.join(spool_dir, "." + name + ".tmp")
    # "spooled": when it was spooled, so serve can count replays (slurmguard_spool_replayed_*).
    data = json.dumps({**record, "spooled": time.time()}, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    _fsync_dir(spool_dir)
    _trim(spool_dir, spool_max)
    return path


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
            with open(path, "rb") as fh:
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
    lock_fd = os.open(os.path.join(spool_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
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


def _trim(spool_dir: str, spool_max: int) -> None:
    names = pending(spool_dir)
    for name in names[: max(0, len(names) - spool_max)]:
        remove(os.path.join(spool_dir, name))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
