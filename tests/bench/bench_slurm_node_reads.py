"""What each way of reading Slurm's node table costs slurmctld, at 1,024 and 10,000 node
entries (testbed.md section 6: a stock slurmctld with node entries and no slurmd for them;
every node is DOWN, not responding, after SlurmdTimeout, which is what such a run can show).

Run by hand, as root, with Slurm and munge (tests/support/slurmcluster.py):

    python tests/bench/bench_slurm_node_reads.py [--entries 1024,10000] [--json OUT]

Per candidate, K calls back to back: the median wall time of a call, its output's bytes,
slurmctld's CPU per call (utime + stime of its /proc/PID/stat over the K calls) and the
RPCs per call by message type with their server time (`sdiag --reset` before, `sdiag` after).
Candidates: the full `scontrol show node -o` (what serve and the nodes' fallback read today);
a long-lived interactive scontrol's `show node` (it passes the last update time:
slurm_load_node(update_time), answered "no change" when nothing changed) quiet and with one
node's state changed before each read (a busy cluster's jobs change node state all the
time); `scontrol show node -o NODE` (one node); `sinfo` with narrow fields: the drained
nodes with reason and time, and a partition's drained count alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from support import slurmcluster  # noqa: E402
from support.slurmcluster import BIN, Cluster, free_ports  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
HELD: list[socket.socket] = []
RPC = re.compile(r"^\s*(REQUEST_\w+|RESPONSE_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+"
                 r"ave_time:\d+\s+total_time:(\d+)")


def start(tmp: str, entries: int) -> Cluster:
    """slurmctld alone with ``entries`` node entries (no slurmd), as Cluster.start writes it."""
    slurmcluster.ensure_munge()
    root = Path(tmp).resolve() / "slurm"
    for sub in ("etc", "state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    names = [f"n{i}" for i in range(1, entries + 1)]
    # Every entry on one port that this process holds bound and never listens on: slurmctld's
    # pings are refused at once, and reach no other test's slurmd (they listen on loopback).
    hold = socket.socket()
    hold.bind(("127.0.0.1", 0))
    HELD.append(hold)
    port = hold.getsockname()[1]
    c = Cluster(root, names, free_ports(1)[0], dict.fromkeys(names, port), None)
    c.conf_path.write_text(c._conf(prolog=None, epilog=None, prolog_slurmctld=None,
                                   health_check_program=None, health_check_interval=0,
                                   slurmd_timeout=300, extra=["TreeWidth=64"]))
    c._ctld = c._spawn([slurmcluster.SBIN["slurmctld"], "-D", "-i", "-f", str(c.conf_path)],
                       c.logdir / "slurmctld.stdout")
    try:  # 10,000 entries on a loaded machine: a slower start than Cluster's 30 s allow
        deadline = time.monotonic() + 300
        while "UP" not in c.run("scontrol", "ping", check=False, timeout=60).stdout:
            if c._ctld.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("slurmctld did not answer:\n" + c.log_tail("slurmctld.log"))
            time.sleep(1)
    except BaseException:
        c.stop()
        raise
    return c


def ctld_cpu(c: Cluster) -> float:
    f = Path(f"/proc/{c._ctld.pid}/stat").read_text().rsplit(")", 1)[1].split()  # type: ignore[union-attr]
    return (int(f[11]) + int(f[12])) / TICK


def ctld_rss_mb(c: Cluster) -> float:
    for line in Path(f"/proc/{c._ctld.pid}/status").read_text().splitlines():  # type: ignore[union-attr]
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rpcs(c: Cluster) -> dict[str, tuple[int, int]]:
    out = {}
    for line in c.run("sdiag").stdout.splitlines():
        m = RPC.match(line)
        if m:
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


class LongScontrol:
    """An interactive scontrol kept open: `show node` then `ping` (its line ends the answer)."""

    def __init__(self, c: Cluster) -> None:
        self.p = subprocess.Popen([BIN["scontrol"]], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=c.env,
                                  text=True, bufsize=1)

    def read(self) -> int:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write("show node\nping\n")
        self.p.stdin.flush()
        n = 0
        for line in self.p.stdout:
            if line.startswith("Slurmctld(primary)"):
                return n
            n += len(line)
        raise RuntimeError("scontrol ended")

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write("quit\n")
        self.p.stdin.close()
        self.p.wait(timeout=10)


def measure(c: Cluster, name: str, call: Any, k: int, churn: bool = False) -> dict[str, Any]:
    call()  # warm (a long-lived scontrol's first read is full)
    c.run("sdiag", "--reset")
    cpu0, walls, size = ctld_cpu(c), [], 0
    for i in range(k):
        if churn:  # one node's state changes before each read, as jobs do on a busy cluster
            c.run("scontrol", "update", f"nodename={c.nodes[i % len(c.nodes)]}",
                  f"reason=bench {i}", "state=drain")
        t = time.perf_counter()
        size = call()
        walls.append(time.perf_counter() - t)
    cpu = ctld_cpu(c) - cpu0
    got = rpcs(c)
    per = {t: round(n / k, 2) for t, (n, _) in got.items() if n}
    server_ms = {t: round(us / k / 1000, 3) for t, (_, us) in got.items() if us}
    return {"candidate": name, "calls": k, "wall_ms": round(statistics.median(walls) * 1000, 2),
            "bytes": size, "ctld_cpu_ms": round(cpu * 1000 / k, 2), "rpcs_per_call": per,
            "rpc_server_ms_per_call": server_ms, "ctld_rss_mb": round(ctld_rss_mb(c), 1),
            "churn": churn}


def run_entries(entries: int, k_full: int, k_cheap: int) -> list[dict[str, Any]]:
    tmp = tempfile.mkdtemp(prefix="sg-reads-")
    c = start(tmp, entries)
    out = []
    try:
        def tool(*argv: str) -> Any:
            return lambda: len(c.run(*argv, timeout=120).stdout)

        long_sc = LongScontrol(c)
        try:
            cands = [
                ("scontrol show node -o (full)", tool("scontrol", "show", "node", "-o"), k_full, False),
                ("long-lived scontrol show node, nothing changed", long_sc.read, k_full, False),
                ("long-lived scontrol show node, one node changed per read", long_sc.read, k_full, True),
                ("scontrol show node -o NODE (one)", tool("scontrol", "show", "node", "-o", "n7"), k_cheap, False),
                ("sinfo -N -t drain,draining,drained -o '%N|%E|%H' (drained, reason, time)",
                 tool("sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N|%E|%H"), k_cheap, False),
                ("sinfo -p gpu -t drain,draining,drained -h -o %D (a partition's drained count)",
                 tool("sinfo", "-h", "-p", "gpu", "-t", "drain,draining,drained", "-o", "%D"), k_cheap, False),
                ("sinfo -p gpu -h -o %D (a partition's size)",
                 tool("sinfo", "-h", "-p", "gpu", "-o", "%D"), k_cheap, False),
            ]
            for name, call, k, churn in cands:
                r = measure(c, name, call, k, churn)
                r["entries"] = entries
                print(json.dumps(r), flush=True)
                out.append(r)
        finally:
            long_sc.close()
    finally:
        c.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", default="1024,10000")
    ap.add_argument("--full", type=int, default=20, help="calls per full-read candidate")
    ap.add_argument("--cheap", type=int, default=100, help="calls per narrow candidate")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    runs = {"date": time.strftime("%Y-%m-%d"), "load": [round(x, 1) for x in os.getloadavg()],
            "slurm": subprocess.run([BIN["sinfo"], "--version"], capture_output=True,
                                    text=True).stdout.strip(), "results": []}
    for n in (int(x) for x in args.entries.split(",")):
        runs["results"] += run_entries(n, args.full, args.cheap)
    runs["load_after"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
