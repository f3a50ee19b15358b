"""Support for the requeue end-to-end tests (and goodput's scenario) and benchmark: lose a node
the way hardware does, run the requeue watcher, read the training job's step log.

`Cluster.kill_slurmd` stops the daemon only; a real node loss also takes every slurmstepd and
job process on it. On this one-machine cluster they are told apart exactly: a node's
slurmstepd listens on a Unix socket in that node's spool dir, and a job process carries
``SLURMD_NODENAME=<node>`` and the cluster's ``SLURM_CONF`` in its environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from support.helpers import sg_argv, sg_env
from support.wait import wait_for


def _socket_inodes(spool: Path) -> set[str]:
    inodes = set()
    prefix = str(spool) + "/"
    with open("/proc/net/unix") as fh:
        next(fh)
        for line in fh:
            parts = line.split()
            if len(parts) >= 8 and parts[7].startswith(prefix):
                inodes.add(parts[6])
    return inodes


def node_pids(cluster: Any, node: str) -> list[int]:
    """Pids of the slurmstepd and job processes of ``node`` in ``cluster`` (not slurmd)."""
    inodes = _socket_inodes(cluster.root / "spool" / node)
    conf = f"SLURM_CONF={cluster.conf_path}".encode()
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"SLURMD_NODENAME={node}".encode() in env and conf in env:
            pids.append(pid)
            continue
        if inodes:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    pids.append(pid)
                    break
    return pids


def lose_node(cluster: Any, node: str) -> list[int]:
    """Kill ``node``'s slurmd, slurmstepds and job processes at once, like a power loss."""
    victims = node_pids(cluster, node)
    cluster.kill_slurmd(node, signal.SIGKILL)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return victims


class Watcher:
    """`slurmguard requeue watch --json` as a real subprocess against the cluster.

    With ``state_file`` (the config's requeue.state_file) it returns only once the watcher
    has made its first poll (it writes that file after each): the watcher judges a requeue
    only for a job it saw run (where it ran), so a test that starts a job before the watcher
    polls can see the job requeued before the watcher ever saw it, and no recovery at all
    (a loaded host: a Python start of seconds against a first run of ten)."""

    def __init__(self, cluster: Any, cfg: Path, state_file: Path | None = None,
                 timeout: float = 120) -> None:
        self.out = cfg.parent / "watcher.jsonl"
        env = sg_env(SLURM_CONF=str(cluster.conf_path), SLURMGUARD_CONFIG=str(cfg))
        before = _signature(state_file)
        self.proc = subprocess.Popen(sg_argv("requeue", "watch", "--json", "--interval", "0.5"),
                                     env=env, stdout=open(self.out, "w"), stderr=subprocess.STDOUT)
        if state_file is not None:
            try:
                wait_for(lambda: self._alive() and _signature(state_file) != before, timeout,
                         interval=0.2, what="the requeue watcher's first poll")
            except AssertionError:
                self.stop()
                raise

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the requeue watcher exited {self.proc.returncode}: "
                                 f"{self.out.read_text()[-2000:]}")
        return True

    def stop(self) -> list[dict[str, Any]]:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        events = []
        for line in self.out.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return events


def _signature(path: Path | None) -> tuple[int, int] | None:
    """(inode, mtime) of a file, None when absent: the watcher replaces its state file whole."""
    try:
        st = os.stat(path) if path is not None else None
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns) if st else None


def log_lines(path: Path) -> list[tuple[int, int, str]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        s, r, n = line.split()[:3]  # then the time the step ended
        out.append((int(s), int(r), n))
    return out


def quiet(path: Path, seconds: float) -> bool:
    """True once ``path`` has not changed for ``seconds``."""
    return path.exists() and time.time() - path.stat().st_mtime >= seconds
