"""What `slurmguard serve` costs in CPU at fleet size, per replica, without the fleet: two
real serve replicas on one real PostgreSQL (tests/support/pgserver.py), a stand-in
``scontrol`` printing a real ``scontrol show node -o`` record (tests/data/slurm/) once per
node, an hour of health-check history in the store, and the scale harness's steady load:
one health-check record per node per 300 s plus a prolog and an epilog record per job
(``--jobs-per-hour``), one record per POST, spread over the replicas. Run by hand:

    python tests/bench/bench_serve_cpu.py [--nodes 1024] [--seconds 120] [--jobs-per-hour 1200]
        [--policy-interval 60] [--repeat 3] [--baseline REV]

The phase starts ``--policy-interval`` + 5 s after the replicas (a follower spun from then on
before 2026-12-05, docs/serve.md "One leader"). Printed per code and replica: the median
over ``--repeat`` phases of its own CPU-s (utime+stime of /proc/PID/stat; the stand-in
scontrol's CPU is its children's and not counted) and whether it led. ``--baseline REV``
runs the same phases with the slurmguard package of commit REV (``git archive``) first, so
before and after come from one run on one host. No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

RECORD = REPO / "tests/data/slurm/show-node-idle-22.05.8.txt"
HC_INTERVAL = 300.0  # s: the harness's HealthCheckInterval


def stand_in_scontrol(d: Path, n: int) -> Path:
    """An ``scontrol`` that prints the real 22.05 record of n1 once per node n0000..."""
    line = RECORD.read_text().splitlines()[0]
    table = d / "nodes.txt"
    table.write_text("".join(line.replace("NodeName=n1 ", f"NodeName=n{i:04d} ", 1) + "\n"
                             for i in range(n)))
    sc = d / "scontrol"
    sc.write_text(f"#!/bin/sh\nexec cat {table}\n")
    sc.chmod(0o755)
    return sc


def record(node: str, hook: str, at: float) -> dict:
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record

    return make_record(node, hook, [CheckResult("fs-mount", Health.HEALTHY)], "pass", "",
                       started=at, job_id="1" if hook != "healthcheck" else None)


def history(url: str, n: int) -> None:
    from slurmguard.store.api import Store

    store = Store.open(url=url)
    now = time.time()
    recs = [record(f"n{i:04d}", "healthcheck", now - 3600 + k * HC_INTERVAL + i * HC_INTERVAL / n)
            for i in range(n) for k in range(int(3600 / HC_INTERVAL))]
    for k in range(0, len(recs), 1000):
        store.nodes.record_many(recs[k:k + 1000])
    store.close()


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _leads(serve) -> bool:  # noqa: ANN001
    try:
        return serve.metric("slurmguard_serve_leader") == 1.0
    except OSError:  # a scrape that times out on a loaded host: not the leader as far as known
        return False


def phase(code: Path, a: argparse.Namespace, pg, d: Path) -> list[tuple[float, bool]]:  # noqa: ANN001
    from support.replicas import pg_store
    from support.sgserve import TOKEN, Serve, new_port, write_config

    from slurmguard.adapters.serve_client import post_records

    d.mkdir(parents=True)
    url = pg_store(pg)
    history(url, a.nodes)
    sc = stand_in_scontrol(d, a.nodes)
    serves = []
    try:
        for i in range(a.replicas):
            rd = d / f"r{i}"
            rd.mkdir()
            port = new_port()
            cfg = write_config(rd, store_url=url, port=port, extra=f'[slurm]\nscontrol = "{sc}"\n',
                               serve_extra=f"slurm_view_ttl = 2.0\npolicy_interval = {a.policy_interval}")
            serves.append(Serve(cfg, port, env={"PYTHONPATH": str(code)}).start(timeout=120))
        time.sleep(a.policy_interval + 5)
        before = [cpu(s.proc.pid) for s in serves]
        rate = a.nodes / HC_INTERVAL + 2 * a.jobs_per_hour / 3600
        stop, t0, sent, failed = threading.Event(), time.monotonic(), [0], [0]

        def poster(k: int, threads: int = 4) -> None:
            i = k
            while not stop.is_set():
                due = t0 + i / rate
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
                hook = "healthcheck" if random.random() < (a.nodes / HC_INTERVAL) / rate else "prolog"
                s = serves[i % len(serves)]
                try:
                    post_records(s.url + "/ingest", TOKEN,
                                 [record(f"n{random.randrange(a.nodes):04d}", hook, time.time())], 30.0)
                    sent[0] += 1
                except Exception:  # noqa: BLE001  (a slow answer on a loaded host: counted, not fatal)
                    failed[0] += 1
                i += threads

        ts = [threading.Thread(target=poster, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        time.sleep(a.seconds)
        stop.set()
        for t in ts:
            t.join()
        spent = [cpu(s.proc.pid) - b for s, b in zip(serves, before, strict=True)]
        out = [(c, _leads(s)) for c, s in zip(spent, serves, strict=True)]
        print(f"  {sent[0]} records stored, {failed[0]} POSTs failed, in {a.seconds:.0f} s "
              f"(rate {rate:.2f}/s): "
              + ", ".join(f"{c:.2f} CPU-s{' (leader)' if lead else ''}" for c, lead in out),
              flush=True)
        return out
    finally:
        for s in serves:
            s.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--jobs-per-hour", type=float, default=1200.0)
    p.add_argument("--policy-interval", type=float, default=60.0)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline", default="", help="a commit whose serve runs first")
    a = p.parse_args()
    from support.pgserver import PgServer, _pg_bin

    bindir = _pg_bin()
    if bindir is None:
        sys.exit("PostgreSQL server binaries are not installed")
    pg = PgServer(bindir)
    pg.start()
    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-serve-cpu-"))
    codes = [("this checkout", REPO)]
    if a.baseline:
        base = tmp / "baseline"
        base.mkdir()
        tar = subprocess.run(["git", "-C", str(REPO), "archive", a.baseline, "slurmguard"],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=tar, check=True)
        codes.insert(0, (f"baseline {a.baseline}", base))
    try:
        for name, code in codes:
            print(f"{name}: {a.nodes} nodes, {a.jobs_per_hour:.0f} jobs/h, {a.replicas} replicas, "
                  f"{a.seconds:.0f}-s phases", flush=True)
            runs = [phase(code, a, pg, tmp / f"{name.split()[0]}-{k}") for k in range(a.repeat)]
            for r in range(a.replicas):
                print(f"  median CPU-s, replica {r}: "
                      f"{statistics.median(run[r][0] for run in runs):.2f}")
            print(f"  median CPU-s, follower(s) / leader: "
                  f"{statistics.median(sum(c for c, lead in run if not lead) for run in runs):.2f} / "
                  f"{statistics.median(sum(c for c, lead in run if lead) for run in runs):.2f}")
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
