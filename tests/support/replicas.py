"""Harness for the serve-replica tests: a migrated PostgreSQL store, a slurmctld whose
partition holds 100 declared nodes (and, for a test whose node clients sign with MUNGE, those
clients as nodes too), and N real `slurmguard serve` replicas on one store."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from support.pgserver import PgServer
from support.sgserve import Serve, new_port, write_config
from support.wait import wait_for


def pg_store(server: PgServer) -> str:
    """A fresh, migrated database on the test server; its URL."""
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    url = server.url(server.create_db())
    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    return url


def big_partition(factory, clients: Iterable[tuple[str, int]] = ()) -> str:  # noqa: ANN001
    """A real slurmctld whose partition ``gpu`` holds the nodes m001..m100 (no slurmd: they
    are DOWN to Slurm, which a permit does not look at); its SLURM_CONF.

    ``clients``: (prefix, count) of node clients (tests/support/loadgen.py names them
    prefix0000, prefix0001, ...) declared as nodes too, at localhost like m001..m100: in
    serve.auth = munge, serve takes a record only from a Slurm node whose NodeAddr is the
    credential's origin (this machine's munged stamps 127.0.0.1) and the connection's peer.
    They are in ``gpu`` as well (Nodes=ALL), so only a test that asks no permits declares
    them: the permit storms count on 100 nodes."""
    extra = [f"NodeName={prefix}[0000-{n - 1:04d}] NodeHostname=localhost Port=19001 CPUs=2 "
             "RealMemory=1000 State=UNKNOWN" for prefix, n in clients if n > 0]
    total = 100 + sum(n for _, n in clients)
    c = factory(nodes=0, wait=False, extra_conf=[
        "NodeName=m[001-100] NodeHostname=localhost Port=19001 CPUs=2 RealMemory=1000 State=UNKNOWN",
        *extra])
    wait_for(lambda: len(c.cli().nodes()) == total, 60, what=f"slurmctld to list {total} nodes",
             ignore=(Exception,))
    return c.env["SLURM_CONF"]


def start_replicas(tmp_path: Path, url: str, conf: str, n: int = 3,
                   serve_extra: str = "", auth: str = "token", extra: str = "") -> list[Serve]:
    """``n`` serve replicas on the store ``url``, each in its own directory and port, in
    serve.auth ``auth`` (their Slurm, and so their node table, is ``conf``'s); ``extra``:
    more config sections."""
    out = []
    for i in range(n):
        d = tmp_path / f"r{i}"
        d.mkdir()
        port = new_port()
        cfg = write_config(d, store_url=url, port=port, serve_extra=serve_extra, auth=auth,
                           extra=extra)
        out.append(Serve(cfg, port, env={"SLURM_CONF": conf}).start())
    return out


def leaders(replicas: list[Serve]) -> list[Serve]:
    """The replicas whose /metrics say they lead (slurmguard_serve_leader 1)."""
    return [r for r in replicas if r.metric("slurmguard_serve_leader") == 1.0]
