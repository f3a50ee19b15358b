"""serve's PostgreSQL connection pool is sized from serve.workers and bounded
(store/engine.py ``pool_for_workers``; docs/serve.md "PostgreSQL connections")."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import pytest
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.replicas import pg_store
from support.sgserve import TOKEN, Serve, new_port, write_config

from slurmguard.store.engine import POOL_MAX, make_engine, pool_for_workers

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(("workers", "pool"), [
    (1, (5, 1)), (8, (5, 1)), (9, (6, 2)), (16, (6, 2)), (64, (12, 8)), (128, (20, 16)),
    (160, (24, 20)), (1000, (POOL_MAX, POOL_MAX)), (10**6, (POOL_MAX, POOL_MAX)),
])
def test_pool_follows_workers_within_bounds(workers: int, pool: tuple[int, int]) -> None:
    assert pool_for_workers(workers) == pool


def test_engine_takes_the_pool_for_serve_only() -> None:
    url = "postgresql+psycopg://sg@127.0.0.1:1/x"  # nothing connects
    engine = make_engine({"url": url}, workers=64)
    assert (engine.pool.size(), engine.pool._max_overflow) == (12, 8)
    plain = make_engine({"url": url})  # admin commands, the gate: SQLAlchemy's default
    assert (plain.pool.size(), plain.pool._max_overflow) == (5, 10)


def test_serve_holds_no_more_connections_than_its_pool(pg_server: PgServer,  # noqa: F811
                                                        tmp_path: Path) -> None:
    """A real serve with workers = 16, 48 threads asking for the store's figures at once
    (each answer reads the store on a request thread): every request answered, and the
    database never sees more of serve's connections than pool + overflow + the leader's."""
    import psycopg

    url = pg_store(pg_server)
    db = url.rsplit("/", 1)[1]
    port = new_port()
    cfg = write_config(tmp_path, store_url=url, port=port, serve_extra="workers = 16")
    size, overflow = pool_for_workers(16)
    serve = Serve(cfg, port, "--no-policy").start()
    peak, codes, stop = [0], [], threading.Event()

    def watch() -> None:
        with psycopg.connect(f"host=127.0.0.1 port={pg_server.port} user=postgres "
                             "dbname=postgres", autocommit=True) as conn:
            while not stop.is_set():
                n = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                 (db,)).fetchone()[0]
                peak[0] = max(peak[0], n)
                time.sleep(0.02)

    def ask() -> None:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            req = urllib.request.Request(serve.url + "/healthz")
            req.add_header("Authorization", f"Bearer {TOKEN}")
            with urllib.request.urlopen(req, timeout=30) as r:
                codes.append(r.status)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        threads = [threading.Thread(target=ask) for _ in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        stop.set()
        watcher.join(10)
        serve.stop()
    assert codes and set(codes) == {200}
    # + 1: the leader lock's own connection (serve/leader.py; a follower holds none)
    assert 2 <= peak[0] <= size + overflow + 1, (peak[0], size, overflow)
