"""Result records: build them on the node, deliver them to `slurmguard serve`, spool on failure.

The node side uses the standard library only (it runs in every prolog). Delivery:

1. POST the record to ``hooks.report_url`` with the shared token
   (``Authorization: Bearer ...``) and wait at most ``hooks.report_timeout`` seconds.
2. If serve cannot be reached (or answers 5xx, or the token is unreadable), write the record
   to the spool: one file per record in ``hooks.spool_dir``, written to a temp name, fsync'd,
   renamed, and the directory fsync'd, so a crash or power loss leaves either the whole record
   or nothing. The spool keeps at most ``hooks.spool_max`` records, dropping the oldest.
3. After a successful send, replay the spool in batches (oldest first) within the same time
   budget; a file is deleted only after serve answered that its record is stored (or was a
   duplicate, or was refused as malformed). Ingest is exactly-once by record ``id``, so a
   record sent twice (a crash between the answer and the unlink) is stored once.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from slurmguard import __version__
from slurmguard.health import CheckResult

RECORD_VERSION = 1
_BATCH = 200  # records per replay request
_SUFFIX = ".json"


def make_record(node: str, hook: str, results: Sequence[CheckResult], action: str, reason: str,
                *, job_id: str | None = None, started: float | None = None,
                duration: float = 0.0) -> dict[str, Any]:
    """The JSON record of one hook run. ``id`` makes ingest exactly-once."""
    return {
        "version": RECORD_VERSION,
        "id": uuid.uuid4().hex,
        "node": node,
        "hook": hook,
        "job_id": job_id,
        "started": started if started is not None else time.time(),
        "duration": round(duration, 4),
        "decision": {"action": action, "reason": reason},
        "results": [r.to_dict() for r in results],
        "slurmguard_version": __version__,
    }


class DeliveryError(Exception):
    """serve could not take the records now (unreachable, 5xx, no token): spool and retry."""


def deliver(record: dict[str, Any], cfg: Any, *, replay: bool = True) -> str:
    """Send a record to serve, or spool it. Returns "sent", "spooled" or "skipped".

    Never raises for delivery problems (they must not change a hook's verdict); the caller
    may log the returned word. After a successful send the spool is replayed.
    """
    hooks = cfg.section("hooks")
    url = str(hooks.get("report_url") or "")
    if not url:
        return "skipped"
    timeout = float(hooks.get("report_timeout", 2.0))
    deadline = time.monotonic() + timeout
    try:
        token = read_token(str(hooks["token_file"]))
        answer = post_records(url, token, [record], timeout)
    except DeliveryError:
        return _spool_or_say(record, hooks)
    if record.get("id") in answer.get("retry", ()):
        return _spool_or_say(record, hooks)
    if replay:
        try:
            replay_spool(url, token, str(hooks["spool_dir"]), deadline=deadline)
        except OSError:
            pass  # the spool is kept; the next run tries again
    return "sent"


def drain_permit(node: str, check: str, reason: str, cfg: Any) -> tuple[bool, str]:
    """Ask serve whether this node may drain itself now (the blast-radius guard).

    Returns (allowed, why). Fails open: when serve is not configured or cannot be reached in
    ``hooks.report_timeout`` the answer is (True, ...), because a node with a fault must not
    take jobs just because the controller is busy; the cap then holds for serve's own drains
    and the ledger shows the drain when the record is replayed.
    """
    hooks = cfg.section("hooks")
    url = str(hooks.get("report_url") or "")
    if not url:
        return True, "no report_url"
    permit_url = url.rsplit("/", 1)[0] + "/permit"
    try:
        token = read_token(str(hooks["token_file"]))
        answer = _post_json(permit_url, token, {"node": node, "check": check, "reason": reason},
                            float(hooks.get("report_timeout", 2.0)))
    except DeliveryError as exc:
        return True, f"serve unreachable: {exc}"
    if answer.get("allow") is False:
        return False, str(answer.get("alert") or "refused by the blast-radius guard")
    return True, "allowed"


def _spool_or_say(record: dict[str, Any], hooks: Any) -> str:
    try:
        _, dropped = _spool(record, str(hooks["spool_dir"]), int(hooks["spool_max"]))
    except OSError as exc:  # a full or read-only disk: the record is lost, the hook goes on
        return f"lost: spool {hooks['spool_dir']}: {exc.strerror or exc}"
    return f"spooled; {dropped}" if dropped else "spooled"


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise DeliveryError(f"token {path}: {exc.strerror}") from None
    if not token:
        raise DeliveryError(f"token {path}: empty")
    return token


def post_records(url: str, token: str, records: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """POST records to serve's ingest URL; returns serve's JSON answer.

    Raises DeliveryError when serve is unreachable or answers anything but 2xx/4xx-for-a-
    record (401/403/5xx mean "try again later", so the records stay spooled).
    """
    return _post_json(url, token, {"records": records}, timeout)


def _post_json(url: str, token: str, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise DeliveryError(f"report_url: not an http(s) URL: {url!r}")
    body = json.dumps(obj, separators=(",", ":")).encode()
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(u.hostname, u.port, timeout=max(0.05, timeout))
    try:
        conn.request("POST", u.path or "/ingest", body=body, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "User-Agent": f"slurmguard/{__version__}"})
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"{url}: {exc}") from None
    finally:
        conn.close()
    # 422: every record of the request was malformed; the answer's "rejected" settles them
    # (they are dropped, not retried: sending them again cannot make them valid).
    if resp.status not in (200, 422):
        raise DeliveryError(f"{url}: HTTP {resp.status}")
    try:
        answer = json.loads(data)
    except ValueError:
        raise DeliveryError(f"{url}: answer is not JSON") from None
    return answer if isinstance(answer, dict) else {}


DROPPED_FILE = ".dropped"  # in the spool: how many records spool_max has dropped, ever


def check_spool_dir(spool_dir: str) -> None:
    """Refuse a spool that others could plant files or symlinks in: it must be a real
    directory (not a symlink), owned by this user, not writable by group or others."""
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


def spool(record: dict[str, Any], spool_dir: str, spool_max: int) -> str:
    """Write one record durably to the spool; drop the oldest beyond ``spool_max``.

    Returns the file's path. Raises OSError when the record could not be written (a full or
    read-only disk, an unsafe spool directory). Dropping old records is said on stderr and
    counted in ``spool_dir/.dropped``.
    """
    return _spool(record, spool_dir, spool_max)[0]


def _spool(record: dict[str, Any], spool_dir: str, spool_max: int) -> tuple[str, str]:
    """spool(), also returning the line that says what was dropped ("" when nothing)."""
    os.makedirs(spool_dir, mode=0o700, exist_ok=True)
    check_spool_dir(spool_dir)
    # Names sort by time, so the oldest is first and replay keeps the order of events.
    name = f"{time.time_ns():020d}-{record.get('id') or uuid.uuid4().hex}{_SUFFIX}"
    path = os.path.join(spool_dir, name)
    tmp = os.path.join(spool_dir, "." + name + ".tmp")
    data = json.dumps(record, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked (a nearly full disk)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        _unlink(tmp)  # no partial file left behind on a full disk
        raise
    _fsync_dir(spool_dir)
    dropped = _trim(spool_dir, spool_max)
    if dropped:
        total = _count_dropped(spool_dir, len(dropped))
        msg = (f"spool {spool_dir} full (spool_max {spool_max}): dropped the oldest "
               f"{len(dropped)} record(s) {', '.join(_rid(n) for n in dropped[:3])}"
               f"{' ...' if len(dropped) > 3 else ''} ({total} dropped in all)")
        print(f"slurmguard: warning: {msg}", file=sys.stderr)
        return path, msg
    return path, ""


def _rid(name: str) -> str:
    return name[:-len(_SUFFIX)].split("-", 1)[-1]


def _count_dropped(spool_dir: str, n: int) -> int:
    """Add ``n`` to the spool's dropped-records counter (a small file); returns the total."""
    path = os.path.join(spool_dir, DROPPED_FILE)
    total = n + dropped_count(spool_dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{total}\n")
        os.replace(tmp, path)
    except OSError:
        _unlink(tmp)
    return total


def dropped_count(spool_dir: str) -> int:
    """Records ever dropped from this spool because it was full (0 when none)."""
    try:
        fd = os.open(os.path.join(spool_dir, DROPPED_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def spooled(spool_dir: str) -> list[str]:
    """Spooled record files, oldest first."""
    try:
        names = os.listdir(spool_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(_SUFFIX) and not n.startswith("."))


def _trim(spool_dir: str, spool_max: int) -> list[str]:
    names = spooled(spool_dir)
    dropped = []
    for name in names[: max(0, len(names) - spool_max)]:
        try:
            os.unlink(os.path.join(spool_dir, name))
            dropped.append(name)
        except FileNotFoundError:
            pass
    return dropped


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replay_spool(url: str, token: str, spool_dir: str, *, deadline: float,
                 batch: int = _BATCH) -> int:
    """Send spooled records (oldest first) until the spool is empty or ``deadline``
    (time.monotonic()) passes; returns how many files were settled and removed.

    Only one process replays at a time (an flock on the spool's lock file): a prolog and an
    epilog finishing together do not send the same files twice.
    """
    import fcntl

    if not os.path.isdir(spool_dir):
        return 0
    check_spool_dir(spool_dir)
    lock_fd = os.open(os.path.join(spool_dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                      0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0
        done = 0
        while time.monotonic() < deadline:
            names = spooled(spool_dir)[:batch]
            if not names:
                break
            records, files = [], {}
            for name in names:
                path = os.path.join(spool_dir, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as fh:
                        rec = json.loads(fh.read())
                except (OSError, ValueError):
                    _unlink(path)  # a torn or vanished file: nothing to send
                    continue
                if not isinstance(rec, dict) or not rec.get("id"):
                    _unlink(path)
                    continue
                records.append(rec)
                files[str(rec["id"])] = path
            if not records:
                continue
            try:
                answer = post_records(url, token, records,
                                      max(0.05, deadline - time.monotonic()))
            except DeliveryError:
                break
            retry = set(answer.get("retry", ()))
            for rid, path in files.items():
                if rid not in retry:
                    _unlink(path)
                    done += 1
            if retry and retry >= set(files):
                break  # serve takes nothing now; try on a later run
        return done
    finally:
        os.close(lock_fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
