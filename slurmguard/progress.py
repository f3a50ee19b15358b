"""Progress reports from training code to `slurmguard run` (standard library only).

Training code calls::

    from slurmguard import progress
    start = progress.resume_step() or 0       # where `slurmguard run` says to resume
    for n in range(start, total):
        train_one_step()
        progress.step(n)
        if n % 100 == 0:
            with progress.saving(path, n):     # reports the save and how long it took
                save(path)

Each call appends one JSON line to the file named by ``SLURMGUARD_PROGRESS`` (set by the
wrapper; the calls do nothing without it). One ``write()`` of a line shorter than PIPE_BUF on
an ``O_APPEND`` descriptor is atomic, so every rank on every node can share one file on a shared
file system (or a FIFO). The line carries the node (``SLURMD_NODENAME``) and rank
(``SLURM_PROCID``) so the wrapper can tell a slow node from a slow job.

``step()`` writes at most once per ``SLURMGUARD_PROGRESS_INTERVAL`` seconds per process
(default 1; 0 writes every step), so thousands of ranks doing fast steps do not flood the
shared file system; the wrapper divides the time between two reports by the steps between them.

Monitoring must never take training down: a failed write is reported once on stderr and the
calls carry on.

Drain notices: when a node of the job is drained while it runs, `slurmguard run` writes a small
notice file named by ``SLURMGUARD_NOTICE``; :func:`should_checkpoint` then answers True (until
this process reports a checkpoint begun after the notice), so a training loop can save at once::

    if progress.should_checkpoint():
        with progress.saving(path, n):
            save(path)
"""

from __future__ import annotations

import json
import os
import sys
import time

ENV_FILE = "SLURMGUARD_PROGRESS"
ENV_INTERVAL = "SLURMGUARD_PROGRESS_INTERVAL"
ENV_NOTICE = "SLURMGUARD_NOTICE"
NOTICE_CHECK_S = 0.2  # look at the notice file at most this often (a stat per step is too many
# on a shared file system with thousands of ranks; 0.2 s is small next to a checkpoint)
_last_save_start = 0.0  # when this process last began a save it reported
_notice_checked = 0.0
_notice_seen: tuple[float, float] | None = None  # (file mtime, notice time) last read
_last_step_write = 0.0
_fd: int | None = None
_fd_path: str | None = None
_warned = False


def _emit(event: dict[str, object]) -> None:
    global _fd, _fd_path, _warned
    path = os.environ.get(ENV_FILE)
    if not path:
        return
    event.setdefault("t", time.time())
    event.setdefault("node", os.environ.get("SLURMD_NODENAME") or os.uname().nodename)
    event.setdefault("rank", _int_env("SLURM_PROCID"))
    line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
    try:
        if _fd is None or _fd_path != path:
            # O_NOFOLLOW: a symlink planted at the name is refused, never written through.
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                          | os.O_NOFOLLOW, 0o644)
            _fd_path = path
        os.write(_fd, line)
    except OSError as exc:
        if not _warned:
            _warned = True
            print(f"slurmguard.progress: cannot report to {path}: {exc}", file=sys.stderr)


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_INTERVAL, "1")))
    except ValueError:
        return 1.0


def step(n: int) -> None:
    """Report that training step ``n`` finished (resets the wrapper's stall timer)."""
    global _last_step_write
    now = time.time()
    if now - _last_step_write < _interval():
        return
    _last_step_write = now
    _emit({"ev": "step", "step": int(n), "t": now})


def checkpoint_saved(path: str, step: int, seconds: float | None = None) -> None:
    """Report that a checkpoint of ``step`` was completely written at ``path``.

    ``seconds``: how long the save took (goodput accounting counts it as checkpoint time;
    :func:`saving` measures it for you).
    """
    global _last_save_start
    ev: dict[str, object] = {"ev": "ckpt", "step": int(step), "path": os.fspath(path)}
    took = 0.0 if seconds is None else max(0.0, float(seconds))
    if seconds is not None:
        ev["seconds"] = round(took, 6)
    _last_save_start = max(_last_save_start, time.time() - took)
    _emit(ev)


class saving:  # noqa: N801 -- used as a context manager, reads like a function
    """``with progress.saving(path, step): save(path)`` reports the save and its duration.

    Nothing is reported when the block raises (a failed save is not a checkpoint).
    """

    def __init__(self, path: str, step: int) -> None:
        self.path, self.step = path, step
        self._t0 = 0.0

    def __enter__(self) -> saving:
        self._t0 = time.time()
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            checkpoint_saved(self.path, self.step, time.time() - self._t0)


def should_checkpoint() -> bool:
    """True when `slurmguard run` asks for a checkpoint now: a node of the job was drained
    (a drain notice) after this process last began a save it reported. Cheap enough to call
    every step (the notice file is looked at every ``NOTICE_CHECK_S`` at most); never raises."""
    global _notice_checked, _notice_seen
    try:
        path = os.environ.get(ENV_NOTICE)
        if not path:
            return False
        now = time.time()
        if now - _notice_checked >= NOTICE_CHECK_S:
            _notice_checked = now
            _notice_seen = _read_notice(path, _notice_seen)
        return _notice_seen is not None and _notice_seen[1] > _last_save_start
    except Exception:  # noqa: BLE001 -- monitoring never takes training down
        return False


def _read_notice(path: str, seen: tuple[float, float] | None) -> tuple[float, float] | None:
    """(mtime, notice time) of the notice file; re-read only when its mtime changed."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    if seen is not None and seen[0] == mtime:
        return seen
    try:
        with open(path, "rb") as fh:  # written whole by rename: never half a file
            doc = json.loads(fh.read(4096))
        t = float(doc["t"]) if isinstance(doc, dict) else mtime
    except (OSError, ValueError, KeyError, TypeError):
        t = mtime  # the file's existence is the notice; its time is a detail
    return (mtime, t)


def resume_from() -> str | None:
    """The checkpoint `slurmguard run` chose to resume from (``SLURMGUARD_RESUME_FROM``)."""
    return os.environ.get("SLURMGUARD_RESUME_FROM") or None


def resume_step() -> int | None:
    """The step of that checkpoint (``SLURMGUARD_RESUME_STEP``), when known."""
    return _int_env("SLURMGUARD_RESUME_STEP")
