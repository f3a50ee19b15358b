"""Ports for the test suite's daemons, handed out once per host.

Every pytest session on a host (CI's parts side by side, engineers' worktrees) asks here, and
what was handed lives in one file under a lock, so no two callers get the same port while its
daemon may not have bound it yet. Two ranges, both below the kernel's ephemeral range (32768
up by default), where clients' outgoing connections take their ports:

- :func:`free_port_block`: consecutive ports for a test cluster's slurmctld and slurmd
  (20000-32000, blocks on multiples of 1,100);
- :func:`free_port`: one port for a serve, a PostgreSQL, an sshd (15000-20000). A port the
  kernel picked (bind to port 0) is in the ephemeral range: between the pick and the daemon's
  bind, another process's outgoing connection could take it, and did (serve's port, in an
  engineer's run beside others).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path


class PortsExhausted(RuntimeError):
    """No free port (block) left in the range asked for."""

# Blocks handed out by free_port_block and not yet surely bound by their daemons, kept in a
# file that every test process on the host reads and writes under a lock: base -> (until,
# count), until in wall-clock seconds. Within one process: the fleet day starts three
# clusters at once, in threads; each probed the same first block, found it free (nothing had
# bound it yet), and two clusters ran on one port block (a cluster's NHC drains landed in
# another's node table). Across processes the same race: two pytest sessions on one host (CI's
# parts, engineers' worktrees) each probed a block free and started a cluster on it; the
# second cluster's slurmd never registered (a node NOT_RESPONDING for 60 s).
_HANDED_FILE = Path(os.environ.get("SLURMGUARD_TEST_PORTS", "/tmp/slurmguard-test-ports.json"))
_HANDED_LOCK = threading.Lock()
_HANDED_FOR_S = 300.0  # long enough for a thousand slurmd to bind their ports


def free_port_block(count: int, low: int = 20000, high: int = 32000, step: int = 0,
                    host: str = "127.0.0.1") -> int:
    """The first port of ``count`` consecutive loopback ports, all free now, in [low, high),
    and not handed to another caller on this host (any process) in the last few minutes.

    Below the kernel's ephemeral range (32768 up by default): a thousand slurmd on kernel-picked
    ports would collide with the clients' own outgoing ports, and ports picked there one by one
    may be taken again between the pick and slurmd's bind."""
    import fcntl

    # Blocks start on multiples of ``step``: the block's size rounded up to 100 by default
    # (120 places for a small cluster's 17 ports, 10 for a thousand slurmd). A step of 1,100
    # for every size left ten places, and a run beside another (CI's parts, a loop of the
    # fleet day's four clusters) had all ten handed within the hold: "no 17 consecutive free
    # ports".
    step = step or max(100, -(-count // 100) * 100)

    with _HANDED_LOCK, open(f"{_HANDED_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            handed = {int(b): (float(u), int(n)) for b, (u, n) in
                      json.loads(_HANDED_FILE.read_text()).items()}
        except (OSError, ValueError, TypeError):
            handed = {}
        now = time.time()
        handed = {b: (u, n) for b, (u, n) in handed.items() if u >= now}
        for base in range(low, high - count + 1, step):
            if any(base < b + n and b < base + count for b, (_, n) in handed.items()):
                continue
            socks = []
            try:
                for port in range(base, base + count):
                    s = socket.socket()
                    socks.append(s)
                    s.bind((host, port))
            except OSError:
                continue
            finally:
                for s in socks:
                    s.close()
            handed[base] = (now + _HANDED_FOR_S, count)
            tmp = _HANDED_FILE.with_name(f"{_HANDED_FILE.name}.{os.getpid()}")
            tmp.write_text(json.dumps({str(b): list(v) for b, v in handed.items()}))
            os.replace(tmp, _HANDED_FILE)
            return base
    raise PortsExhausted(f"no {count} consecutive free ports in [{low}, {high})")



def free_port(host: str = "127.0.0.1") -> int:
    """One port free now on ``host`` and handed to no other caller on this host in the last
    few minutes (15000-20000)."""
    return free_port_block(1, low=15000, high=20000, step=1, host=host)
