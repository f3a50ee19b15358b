"""serve's write of one ingest batch (``store.nodes.record_many``), on SQLite and a real
PostgreSQL, same run: the median time of a batch and the records/s it implies.

    python tests/bench/bench_ingest_batch.py [--batch 200] [-n 31] [--nodes 2000] [--no-pg]

Each batch holds ``--batch`` fresh records (2 check results each, as the soak's clients send)
from ``--nodes`` distinct nodes already known to the store: what serve's one writer thread
commits per transaction (``serve.batch_size``, default 200). The store is warmed with 20
batches first. The records are validated before the clock starts, as serve's request
threads do; a ``record_many`` without ``validated`` (before the batch write of
store/runs_write.py) validates them again inside the timed call, as serve then did.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def _batch(nodes: int, size: int, k: int) -> list[dict]:
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record

    results = [CheckResult("gpu-count", Health.HEALTHY), CheckResult("ib-link", Health.HEALTHY)]
    return [make_record(f"b{(k * size + i) % nodes:05d}", "healthcheck", results, "pass", "")
            for i in range(size)]


def measure(url: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """(median ms per batch, records/s, median CPU ms of this process per batch: serve's
    share, the database's own work excluded on PostgreSQL) over ``args.n`` batches."""
    import inspect

    from slurmguard.store.api import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade
    from slurmguard.store.records import validate_record

    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    store = Store.open(url=url)
    kw = {"validated": True} if "validated" in inspect.signature(store.nodes.record_many).parameters else {}
    try:
        for k in range(20):
            store.nodes.record_many(_batch(args.nodes, args.batch, k))
        times, cpu = [], []
        for k in range(args.n):
            recs = [validate_record(r, now=time.time()) for r in _batch(args.nodes, args.batch, 100 + k)]
            t0, c0 = time.perf_counter(), time.process_time()
            assert len(store.nodes.record_many(recs, **kw)) == len(recs)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    finally:
        store.close()
    med = statistics.median(times)
    return med * 1000, args.batch / med, statistics.median(cpu) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("-n", type=int, default=31)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--no-pg", action="store_true")
    args = ap.parse_args()
    print(f"batches of {args.batch} records (2 results each), {args.nodes} nodes; median of {args.n}")
    with tempfile.TemporaryDirectory() as d:
        ms, rate, cpu = measure(f"sqlite:///{d}/s.db", args)
        print(f"{'SQLite':>10}: {ms:7.1f} ms per batch  {rate:9.0f} records/s  CPU {cpu:5.1f} ms")
    if args.no_pg:
        return
    from support.pgserver import PgServer, _pg_bin

    server = PgServer(_pg_bin() or "")
    server.start()
    try:
        ms, rate, cpu = measure(server.url(server.create_db()), args)
        print(f"{'PostgreSQL':>10}: {ms:7.1f} ms per batch  {rate:9.0f} records/s  CPU {cpu:5.1f} ms"
              " (this process)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
