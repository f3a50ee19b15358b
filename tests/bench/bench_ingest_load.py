"""Ingest at fleet speed: a real `slurmguard serve` on a real PostgreSQL and on SQLite,
loaded by node clients the way nodes load it (issue 22 item 3). Run by hand:

    python tests/bench/bench_ingest_load.py [--engine both|sqlite|postgresql]
        [--clients 200] [--batch 5] [--seconds 60] [--open-rate 2000] [--burst 16000]
        [--modes closed,open,burst] [--procs 4] [--batch-interval S] [--policy]
        [--auth token|munge|token,munge,token,munge]

Each client is a node: it posts ``--batch`` fresh records (2 check results each) with the
real ``serve_client.post_records`` (http.client, one connection per POST as a hook does) to
``/ingest``. The clients are ``--clients`` threads spread over ``--procs`` processes, so the
load generator is not one interpreter's GIL.

- **closed**: every client posts again as soon as it has its answer, for ``--seconds``:
  records/s stored, p50/p99 of a POST.
- **open**: POSTs leave on a fixed schedule totalling ``--open-rate`` records/s whatever
  the answers do; a POST's latency counts from its scheduled time (a late client's delay is
  latency too: no coordinated omission).
- **burst**: ``--burst`` records at once (every client posts its share back to back from
  one start): the time until the last is stored, and how many POSTs took longer than a
  node's ``hooks.report_timeout`` (2 s: those records would have gone to the node's spool,
  to be replayed at its next hook run) or failed.

After the modes, the store's count of runs is compared with the records serve's answers said
it stored (every record has a fresh id, so any "duplicate" answer is wrong too): "OK" or
"MISMATCH", one line per engine.

``--auth`` is serve.auth for each run in turn (a list interleaves them, each with a fresh
serve and store): with ``munge`` every POST carries a credential from this machine's munged
(the client signs it with the real ``serve_client.munge_signer``) and serve decodes and checks
it. The load nodes are all at 127.0.0.1 (one host with many nodes, as a multi-slurmd host),
from a stand-in ``scontrol`` that prints their node records: the check's cost is the same as
with one address per node, and no real Slurm runs here.

Also printed: serve's and PostgreSQL's CPU seconds per 1,000 records stored (from
/proc/PID/stat of serve and of every process of the test PostgreSQL), which is what says
how far a controller with more cores goes. serve runs with ``--no-policy`` unless
``--policy`` (without Slurm here the policy pass only costs time); SQLite's serve and the
store are on this machine's disk.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

REPORT_TIMEOUT = 2.0  # hooks.report_timeout's default: a POST slower than this is spooled


def _cpu(pids: list[int]) -> float:
    """user + system CPU seconds of these processes (gone ones count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def _pg_pids(data_dir: str) -> list[int]:
    """The postmaster of this data directory and its children (backends, writers)."""
    try:
        master = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError):
        return []
    out = [master]
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == master:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _client_proc(args: tuple) -> dict:
    """One load process: ``n`` client threads; returns their latencies and counts."""
    (url, token, first, n, total, batch, mode, seconds, period, burst_posts, start_at) = args
    from slurmguard.adapters import serve_client

    if token == "munge":  # a signer per process (it is not picklable)
        token = serve_client.munge_signer()
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record

    results = [CheckResult("gpu-count", Health.HEALTHY), CheckResult("ib-link", Health.HEALTHY)]
    lat: list[float] = []
    out = {"acked": 0, "dup": 0, "posts": 0, "failed": 0, "slow": 0, "last": 0.0}
    lock = threading.Lock()

    def client(i: int) -> None:
        node = f"load{first + i:05d}"
        template = make_record(node, "healthcheck", results, "pass", "")
        seq = 0

        def post(scheduled: float) -> None:
            nonlocal seq
            recs = []
            for _ in range(batch):
                seq += 1
                recs.append(dict(template, id=f"{node}-{os.getpid()}-{seq}", started=time.time()))
            try:
                ans = serve_client.post_records(url, token, recs, 30.0)
                ok = len(ans.get("stored", []))
                dup = len(ans.get("duplicate", []))
            except serve_client.DeliveryError:
                ok = -1
            done = time.time()
            with lock:
                out["posts"] += 1
                if ok < 0:
                    out["failed"] += 1
                    return
                out["acked"] += ok
                out["dup"] += dup
                lat.append(done - scheduled)
                out["last"] = max(out["last"], done)
                if done - scheduled > REPORT_TIMEOUT:
                    out["slow"] += 1

        while time.time() < start_at:
            time.sleep(min(0.01, max(0.0, start_at - time.time())))
        if mode == "closed":
            end = start_at + seconds
            while time.time() < end:
                post(time.time())
        elif mode == "open":
            # each client its own phase within the period, then strictly on schedule (a late
            # POST leaves at once, and its lateness counts in its latency)
            nxt = start_at + period * (first + i) / total
            end = start_at + seconds
            while nxt < end:
                delay = nxt - time.time()
                if delay > 0:
                    time.sleep(delay)
                post(nxt)
                nxt += period
        else:  # burst: back to back; a POST's own time decides whether a node would spool
            for _ in range(burst_posts):
                post(time.time())

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["lat"] = lat
    return out


def run_mode(url: str, token: str, mode: str, a: argparse.Namespace,
             serve_pid: int, pg_data: str | None) -> dict:
    per = [a.clients // a.procs + (1 if p < a.clients % a.procs else 0) for p in range(a.procs)]
    firsts = [sum(per[:p]) for p in range(a.procs)]
    period = a.clients * a.batch / a.open_rate  # seconds between one client's POSTs
    burst_posts = max(1, a.burst // (a.clients * a.batch))
    start_at = time.time() + 1.0 + 0.05 * a.procs
    jobs = [(url, token, firsts[p], per[p], a.clients, a.batch, mode, a.seconds, period, burst_posts,
             start_at) for p in range(a.procs)]
    pids = [serve_pid]
    pg = _pg_pids(pg_data) if pg_data else []
    cpu0 = (_cpu(pids), _cpu(pg))
    ctx = mp.get_context("fork")
    with ctx.Pool(a.procs) as pool:
        parts = pool.map(_client_proc, jobs)
    pg_after = _pg_pids(pg_data) if pg_data else []
    cpu1 = (_cpu(pids), _cpu(sorted(set(pg) | set(pg_after))))
    lat = sorted(x for p in parts for x in p["lat"])
    acked = sum(p["acked"] for p in parts)
    last = max((p["last"] for p in parts), default=start_at)
    span = (last - start_at) if mode == "burst" else a.seconds

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(round(q / 100 * (len(lat) - 1))))] * 1000 if lat else float("nan")

    k = max(1, acked) / 1000
    return {"mode": mode, "records": acked, "rate": acked / span if span else 0.0,
            "dup": sum(p["dup"] for p in parts),
            "posts": sum(p["posts"] for p in parts), "failed": sum(p["failed"] for p in parts),
            "slow": sum(p["slow"] for p in parts), "p50": pct(50), "p99": pct(99),
            "max": lat[-1] * 1000 if lat else float("nan"), "seconds": span,
            "serve_cpu_per_1k": (cpu1[0] - cpu0[0]) / k,
            "pg_cpu_per_1k": (cpu1[1] - cpu0[1]) / k if pg_data else 0.0}


STAND_IN_SCONTROL = """#!/bin/sh
# slurmguard's bench: the load nodes as `scontrol show node -o` prints them, all at 127.0.0.1.
if [ "$1" = show ] && [ "$2" = config ]; then echo "SlurmUser               = root(0)"; exit 0; fi
i=0
while [ $i -lt {n} ]; do
  printf 'NodeName=load%05d Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=localhost State=IDLE Partitions=gpu\\n' $i
  i=$((i + 1))
done
"""


def bench_engine(engine: str, a: argparse.Namespace, auth: str = "token") -> list[dict]:
    from support.pgserver import PgServer, _pg_bin
    from support.sgserve import TOKEN, Serve, new_port, new_store, write_config

    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    tmp = Path(tempfile.mkdtemp(prefix="sg-load-"))
    pg = None
    try:
        if engine == "postgresql":
            pg = PgServer(_pg_bin() or "")
            pg.start()
            url = pg.url(pg.create_db())
            e = make_engine({"url": url})
            upgrade(e)
            e.dispose()
        else:
            url = new_store(tmp)
        port = new_port()
        cfg = write_config(tmp, store_url=url, port=port, auth=auth)
        if auth == "munge":
            fake = tmp / "scontrol"
            fake.write_text(STAND_IN_SCONTROL.replace("{n}", str(a.clients)))
            fake.chmod(0o755)
            cfg.write_text(cfg.read_text() + f'\n[slurm]\nscontrol = "{fake}"\n')
        # the test harness's batch_interval out: serve's own default, or --batch-interval
        cfg.write_text(cfg.read_text().replace("batch_interval = 0.05", "" if a.batch_interval
                                               is None else f"batch_interval = {a.batch_interval}"))
        serve = Serve(cfg, port, *(() if a.policy else ("--no-policy",))).start(timeout=60)
        out = []
        try:
            assert serve.proc is not None
            for mode in a.modes.split(","):
                r = run_mode(serve.url + "/ingest", TOKEN if auth == "token" else "munge", mode, a,
                             serve.proc.pid, pg.data if pg else None)
                r["engine"] = engine
                r["auth"] = auth
                r["load"] = os.getloadavg()[0]
                out.append(r)
                _print(r)
                time.sleep(2)  # let the writer's queue settle between modes
        finally:
            serve.stop()
        # Nothing lost, nothing twice: the store holds exactly the records serve said it
        # stored (every record of the bench has a fresh id, so a "duplicate" answer is wrong).
        from slurmguard.store.api import Store

        store = Store.open(url=url)
        try:
            runs = store.counts()["runs"]
        finally:
            store.close()
        said = sum(r["records"] for r in out)
        dups = sum(r["dup"] for r in out)
        print(f"{engine:>10} store: {runs} runs; answers said {said} stored, {dups} duplicate"
              f" -> {'OK' if runs == said and dups == 0 else 'MISMATCH'}", flush=True)
        return out
    finally:
        if pg is not None:
            pg.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _print(r: dict) -> None:
    print(f"{r['engine']:>10} {r.get('auth', 'token'):>5} {r['mode']:>6}: {r['rate']:7.0f} records/s  p50 {r['p50']:6.1f} ms"
          f"  p99 {r['p99']:7.1f} ms  max {r['max']:7.1f} ms  {r['records']} records in "
          f"{r['seconds']:.1f} s, {r['posts']} POSTs, {r['failed']} failed, {r['slow']} over "
          f"{REPORT_TIMEOUT:.0f} s;  CPU s per 1k records: serve {r['serve_cpu_per_1k']:.3f}"
          f" PostgreSQL {r['pg_cpu_per_1k']:.3f};  load {r['load']:.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="both", choices=["both", "sqlite", "postgresql"])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--open-rate", type=float, default=2000.0)
    ap.add_argument("--burst", type=int, default=16000)
    ap.add_argument("--modes", default="closed,open,burst")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--batch-interval", type=float, help="serve.batch_interval (default: serve's)")
    ap.add_argument("--policy", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    ap.add_argument("--auth", default="token", help="serve.auth per run, in turn: token, munge "
                    "or a list (token,munge,token,munge interleaves them)")
    a = ap.parse_args()
    # serve runs as `python -m slurmguard`, which imports from the current directory first:
    # from this checkout's root, this checkout's serve is what is measured
    os.chdir(REPO)
    print(f"{a.clients} clients x {a.batch} records per POST, {a.procs} processes; closed/open "
          f"{a.seconds:.0f} s, open {a.open_rate:.0f} records/s, burst {a.burst}; serve "
          f"batch_interval {'(default)' if a.batch_interval is None else a.batch_interval}; "
          f"{os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    engines = ["sqlite", "postgresql"] if a.engine == "both" else [a.engine]
    results = [r for e in engines for auth in a.auth.split(",") for r in bench_engine(e, a, auth)]
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
