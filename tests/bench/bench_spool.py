"""Spool/replay benchmark: serve stopped during 1,000 prolog deliveries, then started again.

    python tests/bench/bench_spool.py [--n 1000] [--pg]

Drives the real node-side ``delivery.deliver()`` (fsync'd spool) N times with serve down, then
starts a real `slurmguard serve` and lets later deliveries replay the spool (default
``hooks.report_timeout`` of 2 s bounds each replay). Prints medians and checks that exactly
N + replays records end in the store, each once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.sgserve import Serve, new_port, write_config  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters import spool as spool_files  # noqa: E402
from slurmguard.contract import CheckResult, Health  # noqa: E402
from slurmguard.node import delivery
from slurmguard.node.record import make_record  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--pg", action="store_true", help="store in a temporary PostgreSQL")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="sg-bench-spool-"))
    pg = None
    if args.pg:
        from support.pgserver import PgServer, _pg_bin

        pg = PgServer(_pg_bin() or "")
        pg.start()
        url = pg.url(pg.create_db())
    else:
        url = f"sqlite:///{d}/store.db"
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    port = new_port()
    cfg_path = write_config(d, store_url=url, port=port,
                            extra="").with_suffix(".toml")
    text = cfg_path.read_text().replace("report_timeout = 5.0", "report_timeout = 2.0")
    cfg_path.write_text(text)
    cfg = config.load(str(cfg_path), env={})
    results = [CheckResult(n, Health.HEALTHY) for n in ("gpu-count", "gpu-xid", "fs-mount",
                                                         "ib-link", "host-memory")]
    ids: set[str] = set()
    spool_times = []
    for i in range(args.n):
        rec = make_record(f"gpu{i % 64:03d}", "prolog", results, "pass", "",
                                 job_id=str(1000 + i))
        ids.add(rec["id"])
        t = time.perf_counter()
        assert delivery.deliver(rec, cfg) == "spooled"
        spool_times.append(time.perf_counter() - t)
    spool_dir = str(d / "spool")
    print(f"serve down: {args.n} deliveries spooled, median {statistics.median(spool_times)*1e3:.2f} ms "
          f"(p90 {sorted(spool_times)[int(0.9*len(spool_times))]*1e3:.2f} ms) per record, "
          f"{len(spool_files.pending(spool_dir))} files in the spool")
    serve = Serve(cfg_path, port, "--no-policy").start()
    try:
        runs = 0
        replay_times = []
        t_all = time.perf_counter()
        while spool_files.pending(spool_dir) and runs < 100:
            rec = make_record("gpu000", "prolog", results, "pass", "")
            ids.add(rec["id"])
            t = time.perf_counter()
            assert delivery.deliver(rec, cfg) == "sent"
            replay_times.append(time.perf_counter() - t)
            runs += 1
        total = time.perf_counter() - t_all
        h = serve.healthz()
    finally:
        serve.stop()
    from slurmguard.store import Store

    store = Store.open(url=url)
    from sqlalchemy import func, select

    from slurmguard.store.models import Run

    with store.engine.connect() as conn:
        stored = set(conn.execute(select(Run.record_id)).scalars())
        dup = conn.execute(select(func.count()).select_from(Run)).scalar_one() - len(stored)
    store.close()
    if pg is not None:
        pg.stop()
    print(f"serve up: spool emptied by {runs} later run(s) in {total:.2f} s "
          f"(median run incl. replay {statistics.median(replay_times)*1e3:.0f} ms), "
          f"{h['batches']} write batches")
    ok = stored == ids and dup == 0
    print(f"store: {len(stored)} records of {len(ids)} sent ({args.n} spooled + {runs} live), "
          f"duplicates {dup}, missing {len(ids - stored)} -> {'EXACTLY ONCE' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
