"""Source "fs": mount table + one bounded probe per configured path.

The mount table comes from /proc/self/mountinfo (a procfs read: it never touches the
filesystems themselves, so it cannot hang). Free space, free inodes and responsiveness come
from a probe run in a SUBPROCESS per path (default ``/usr/bin/stat -f -c '%a %b %S %d %c'``),
all paths concurrently, each through run_command with ``probe_timeout``: a statfs() on a dead
NFS server blocks in uninterruptible sleep, and a thread of ours stuck there would keep the
hook from exiting. A child stuck that way is killed (its whole process group) and abandoned;
the hook goes on.
"""

import threading
import time
from typing import NamedTuple

from slurmguard.config import Config
from slurmguard.errors import CommandError, SlurmguardError
from slurmguard.proc import run_command
from slurmguard.sources import GatherContext


class Mount(NamedTuple):
    mountpoint: str
    fstype: str
    source: str
    options: frozenset[str]  # per-mount and superblock options together

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


class Probe(NamedTuple):
    path: str
    ok: bool
    timed_out: bool = False
    error: str = ""
    avail_blocks: int = 0  # free blocks for unprivileged users
    blocks: int = 0
    block_size: int = 0
    free_inodes: int = 0
    inodes: int = 0
    duration: float = 0.0

    @property
    def free_pct(self) -> float | None:
        return 100.0 * self.avail_blocks / self.blocks if self.blocks else None

    @property
    def free_inodes_pct(self) -> float | None:
        # Filesystems without an inode limit (btrfs, some NFS) report 0 inodes: no check.
        return 100.0 * self.free_inodes / self.inodes if self.inodes else None


class FsSnapshot(NamedTuple):
    mounts: tuple[Mount, ...]
    probes: dict[str, Probe]

    def mount_of(self, path: str) -> Mount | None:
        """The mount holding ``path`` (longest mountpoint prefix; the last mounted wins)."""
        best: Mount | None = None
        for m in self.mounts:
            mp = m.mountpoint
            if mp == "/" or path == mp or path.startswith(mp.rstrip("/") + "/"):
                if best is None or len(mp) >= len(best.mountpoint):
                    best = m
        return best


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Parse /proc/<pid>/mountinfo (proc(5)); malformed lines are skipped."""
    mounts = []
    for line in text.split("\n"):  # not splitlines(): it also splits on \x85, \u2028 ...
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        # The kernel separates fields with single spaces and escapes them inside fields;
        # str.split() would also split on Unicode whitespace that is part of a path.
        lf = [x for x in left.split(" ") if x]
        rf = [x for x in right.split(" ") if x]
        if len(lf) < 6 or len(rf) < 2:
            continue
        opts = set(lf[5].split(","))
        if len(rf) >= 3:
            opts |= set(rf[2].split(","))
        mounts.append(Mount(_unescape(lf[4]), rf[0], _unescape(rf[1]), frozenset(opts)))
    return tuple(mounts)


def parse_probe(path: str, stdout: str, duration: float) -> Probe:
    """Parse '%a %b %S %d %c' (avail blocks, blocks, block size, free inodes, inodes)."""
    try:
        a, b, s, d, c = (int(x) for x in stdout.split()[:5])
    except ValueError:
        return Probe(path, False, error=f"unexpected probe output: {stdout.strip()[:80]!r}",
                     duration=duration)
    return Probe(path, True, False, "", a, b, s, d, c, duration)


def probe_one(argv: list[str], path: str, timeout: float) -> Probe:
    """Run the probe for one path, bounded by ``timeout`` (the process group is killed)."""
    start = time.monotonic()
    try:
        res = run_command([*argv, path], timeout=timeout)
    except CommandError as exc:
        if exc.timed_out:
            return Probe(path, False, True, f"not responding after {timeout:g}s",
                         duration=time.monotonic() - start)
        last = (exc.stderr.strip().splitlines() or ["probe failed"])[-1]
        return Probe(path, False, False, last[:160], duration=time.monotonic() - start)
    return parse_probe(path, res.stdout, res.duration)


def gather(cfg: Config, ctx: GatherContext) -> FsSnapshot:
    """Read the mount table and probe every configured mount/dir concurrently."""
    p = cfg.section("checks.fs")
    try:
        with open(p["mountinfo"]) as fh:
            mounts = parse_mountinfo(fh.read())
    except OSError as exc:
        raise SlurmguardError(f"{p['mountinfo']}: cannot read: {exc.strerror}") from None
    paths = list(dict.fromkeys([*p["mounts"], *p["dirs"]]))
    timeout = min(float(p["probe_timeout"]), max(0.1, ctx.deadline - time.monotonic() - 0.6))
    probes: dict[str, Probe] = {}
    if paths:
        # Threads only wait on pipes of child processes: they never enter the filesystem
        # themselves, so they always finish (run_command kills and abandons stuck children).
        # Plain threads, not concurrent.futures: that import (and logging with it) costs the
        # hook path several milliseconds on every job start.
        def work(path: str) -> None:
            probes[path] = probe_one(list(p["probe"]), path, timeout)

        threads = [threading.Thread(target=work, args=(path,), daemon=True) for path in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return FsSnapshot(mounts, {path: probes[path] for path in paths if path in probes})
