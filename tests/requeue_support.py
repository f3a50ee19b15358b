"""Support for the requeue end-to-end tests and benchmark: lose a node the way hardware does.

`Cluster.kill_slurmd` stops the daemon only; a real node loss also takes every slurmstepd and
job process on it. On this one-machine cluster they are told apart exactly: a node's
slurmstepd listens on a Unix socket in that node's spool dir, and a job process carries
``SLURMD_NODENAME=<node>`` and the cluster's ``SLURM_CONF`` in its environment.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


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
