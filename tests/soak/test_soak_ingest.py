"""Load on a real `slurmguard serve`: 200 node clients posting batches, on SQLite and
PostgreSQL, then every record counted in the store (0 lost, 0 duplicated); and 500 idle
connections held open while nodes post, which must not delay them beyond the stated bound.

In the modes a site runs: `munge` (the default; every POST signed by this machine's munged,
the nodes at 127.0.0.1 in a stand-in node table, docs/testing.md), and the load once more in
`node-key` (each client its own key).

CI runs the bounded form (a few seconds per scenario); the long form is
``SLURMGUARD_RELIABILITY=long`` (60 s per store), sizes overridable (tests/support/reliability.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.loadgen import count_in_store, drain_spools, run_clients
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)
from support.reliability import record, setting
from support.sgserve import Serve, munge_auth, new_port, new_store, write_config
from support.wait import wait_for

pytestmark = pytest.mark.postgres

CLIENTS = int(setting("soak_clients", 200, 200))
SECONDS = setting("soak_seconds", 6, 60)
BATCH = int(setting("soak_batch", 5, 5))
IDLE = int(setting("soak_idle", 500, 500))
IDLE_BOUND = 2.0  # s: p99 of a node's POST with IDLE idle connections open (docs/reliability.md)


def _load_average() -> str:
    """The machine's load when a scenario ended: its figures are this machine's under that
    load (2 shared cores), not serve's ceiling."""
    import os

    return f"load average {os.getloadavg()[0]:.1f}"


def test_load(tmp_path: Path, store_url: str) -> None:  # noqa: F811
    """In the mode a site runs (serve.auth = munge): every POST carries a MUNGE credential
    over its body from this machine's munged, serve decodes it from the head and checks the
    records' nodes against Slurm's node table (all 200 at 127.0.0.1, docs/testing.md)."""
    port = new_port()
    cfg = write_config(tmp_path, store_url=store_url, port=port, auth="munge",
                       nodes=[f"soak{i:04d}" for i in range(CLIENTS)])
    sign = munge_auth()
    serve = Serve(cfg, port, "--no-policy").start()
    try:
        load = run_clients(f"{serve.url}/ingest", "", clients=CLIENTS, seconds=SECONDS,
                           batch=BATCH, spool_root=tmp_path / "spools", auth_for=lambda _: sign)
        left = drain_spools(f"{serve.url}/ingest", "", tmp_path / "spools",
                            auth_for=lambda _: sign)
        health = serve.healthz()
        refused = serve.metric("slurmguard_auth_refusals_total")
    finally:
        serve.stop()
    lost, dup, stored = count_in_store(store_url, load.made)
    engine = "PostgreSQL" if store_url.startswith("postgresql") else "SQLite"
    record(f"load-{engine.lower()}", mode="munge", store=engine,
           load=f"{CLIENTS} clients x {load.seconds:.0f} s, batches of {BATCH}, each POST signed",
           faults=f"{load.failures} timed-out POSTs spooled and replayed" if load.failures else "-",
           lost=lost, duplicated=dup,
           figures=(f"{load.summary()}; {health['batches']} commits; {refused:.0f} refused; "
                    f"{_load_average()}"))
    assert not load.rejected and refused == 0
    assert left == 0, f"{left} records still spooled after the drain"
    assert (lost, dup) == (0, 0), (lost, dup)
    assert stored == len(load.made) and load.requests >= CLIENTS


def test_load_node_key(tmp_path: Path) -> None:
    """The same load in the per-node mode a site without munged runs (serve.auth = node-key):
    each client signs with its own node key, serve checks each signature from the head."""
    import time

    from slurmguard.nodekey import node_key_header, node_secret

    site = tmp_path / "site.key"
    site.write_text("soak-site-key-0123456789abcdef0123\n")
    site.chmod(0o600)
    url, port = new_store(tmp_path), new_port()
    cfg = write_config(tmp_path, store_url=url, port=port, auth="node-key",
                       serve_extra=f'site_key_file = "{site}"')
    key = site.read_text().strip().encode()

    def auth_for(node: str):  # type: ignore[no-untyped-def]
        secret = node_secret(key, node)
        return lambda body: node_key_header(secret, node, body, time.time())

    serve = Serve(cfg, port, "--no-policy").start()
    try:
        load = run_clients(f"{serve.url}/ingest", "", clients=CLIENTS, seconds=SECONDS,
                           batch=BATCH, spool_root=tmp_path / "spools", auth_for=auth_for)
        left = drain_spools(f"{serve.url}/ingest", "", tmp_path / "spools", auth_for=auth_for)
        health = serve.healthz()
        refused = serve.metric("slurmguard_auth_refusals_total")
    finally:
        serve.stop()
    lost, dup, stored = count_in_store(url, load.made)
    record("load-sqlite-node-key", mode="node-key", store="SQLite",
           load=f"{CLIENTS} clients x {load.seconds:.0f} s, batches of {BATCH}, each its own key",
           faults=f"{load.failures} timed-out POSTs spooled and replayed" if load.failures else "-",
           lost=lost, duplicated=dup,
           figures=(f"{load.summary()}; {health['batches']} commits; {refused:.0f} refused; "
                    f"{_load_average()}"))
    assert not load.rejected and refused == 0
    assert left == 0, f"{left} records still spooled after the drain"
    assert (lost, dup) == (0, 0), (lost, dup)
    assert stored == len(load.made) and load.requests >= CLIENTS


def _idle_socket(port: int, partial: bool) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if partial:  # a slowloris: the start of a request, then nothing
        s.sendall(b"POST /ingest HTTP/1.1\r\nHost: x\r\n")
    return s


def test_idle_connections_do_not_delay_nodes(tmp_path: Path) -> None:
    url = new_store(tmp_path)
    port = new_port()
    # Timeouts long enough that every idle connection stays open for the whole measurement.
    cfg = write_config(tmp_path, store_url=url, port=port, serve_extra=(
        "idle_timeout = 120\nrequest_timeout = 120\nmax_connections = 2048\nworkers = 16"),
        auth="munge", nodes=[f"{p}{i:04d}" for p in ("base", "busy") for i in range(20)])
    sign = munge_auth()
    serve = Serve(cfg, port, "--no-policy").start()
    held: list[socket.socket] = []
    try:
        base = run_clients(f"{serve.url}/ingest", "", clients=20, seconds=3, batch=BATCH,
                           spool_root=tmp_path / "base", prefix="base", auth_for=lambda _: sign)
        # More slowloris connections than serve has workers: none of them may hold one.
        partial = 50
        for i in range(IDLE + partial):
            held.append(_idle_socket(port, partial=i >= IDLE))
        wait_for(lambda: serve.healthz()["connections"] >= IDLE + partial, 30,
                 what="serve to hold every idle and partial connection")
        open_now = serve.healthz()["connections"]
        busy = run_clients(f"{serve.url}/ingest", "", clients=20, seconds=3, batch=BATCH,
                           spool_root=tmp_path / "busy", prefix="busy", auth_for=lambda _: sign)
        still = serve.healthz()["connections"]
    finally:
        for s in held:
            s.close()
        serve.stop()
    lost, dup, _ = count_in_store(url, base.made | busy.made)
    p99 = busy.percentile(99)
    record("idle-connections", mode="munge", store="SQLite",
           load=f"{IDLE} idle + {partial} half-sent requests held open, 20 clients x 3 s",
           faults="slowloris connections > workers (16)", lost=lost, duplicated=dup,
           figures=(f"p99 {p99 * 1000:.0f} ms with them vs {base.percentile(99) * 1000:.0f} ms "
                    f"without (bound {IDLE_BOUND:g} s); p50 {busy.percentile(50) * 1000:.0f} ms; "
                    f"{open_now} connections open; {_load_average()}"))
    assert open_now >= IDLE + partial and still >= IDLE + partial
    assert busy.failures == 0 and busy.requests > 20
    assert p99 < IDLE_BOUND, busy.summary()
    assert (lost, dup) == (0, 0)
