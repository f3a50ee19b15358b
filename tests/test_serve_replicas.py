"""Several `slurmguard serve` replicas on one real PostgreSQL store (docs/serve.md,
"Replicas"): the blast-radius permit stays exact however the permits are spread.

- 100 nodes of one real Slurm partition (slurmctld answers for them; no slurmd needed to
  ask a permit) fail the same check at once; their permits go round-robin to 3 real serve
  processes from 48 threads. Allowed permits equal the partition's cap (10 % of 100) exactly,
  the ledger holds exactly those permits and a refusal for each of the other 90, and there is
  ONE fleet alert (one blast trip across the replicas' metrics).
- The same storm with one replica killed (kill -9) mid-way, nodes asking the next replica
  when theirs does not answer: still exactly the cap, one alert.
- Ingest from 60 node clients over the 3 replicas with the leader killed mid-load: every
  record stored exactly once after the spools replay, and another replica leads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.replicas import big_partition, leaders, pg_store, start_replicas
from support.sgserve import TOKEN
from support.wait import wait_for

from slurmguard.adapters.serve_client import post_json
from slurmguard.store import Store

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]
NODES = [f"m{i:03d}" for i in range(1, 101)]
CAP = 10  # blast_max_percent 10 of a 100-node partition


def test_a_permit_storm_over_three_replicas_allows_exactly_the_cap(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    url = pg_store(pg_server)
    conf = big_partition(slurm_cluster_factory)
    replicas = start_replicas(tmp_path, url, conf)
    try:
        def ask(i: int) -> bool:
            node = NODES[i]
            answer = post_json(replicas[i % 3].url + "/permit", TOKEN,
                               {"node": node, "check": "fs-mount",
                                "reason": "slurmguard: fs-mount: /shared missing"}, 60.0)
            return bool(answer["allow"])

        with ThreadPoolExecutor(48) as pool:
            allowed = sum(pool.map(ask, range(len(NODES))))
        store = Store.open(url=url)
        try:
            events = store.nodes.events(kinds=["permit", "drain_refused"])
            alerts = store.nodes.alerts()
        finally:
            store.close()
        permits = [e.node for e in events if e.kind == "permit"]
        refused = [e.node for e in events if e.kind == "drain_refused"]
        assert allowed == CAP, allowed
        assert len(permits) == len(set(permits)) == CAP
        assert sorted(refused) == sorted(set(NODES) - set(permits))
        assert len(alerts) == 1, alerts
        assert alerts[0].count == 100 and alerts[0].scope == "partition:gpu", alerts[0]
        trips = sum(r.metric("slurmguard_blast_radius_trips_total") for r in replicas)
        assert trips == 1, trips
    finally:
        for r in replicas:
            r.stop()


def test_a_replica_killed_mid_storm_leaves_the_cap_exact(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    """kill -9 of one replica while 100 permits are in flight; each node asks its replicas
    in turn (as hooks.report_urls does), so a permit whose answer died with the replica is
    asked again elsewhere: the node is counted once, and the cap holds exactly."""
    import os
    import signal
    import threading

    from slurmguard.adapters.serve_client import post_first

    url = pg_store(pg_server)
    conf = big_partition(slurm_cluster_factory)
    replicas = start_replicas(tmp_path, url, conf)
    done = threading.Semaphore(0)
    try:
        def ask(i: int) -> bool:
            order = [replicas[(i + k) % 3].url + "/ingest" for k in range(3)]
            _, answer = post_first(order, TOKEN, {"node": NODES[i], "check": "fs-mount",
                                                  "reason": "slurmguard: fs-mount: gone"},
                                   90.0, path="/permit")
            done.release()
            return bool(answer["allow"])

        def killer() -> None:
            for _ in range(20):  # a fifth of the answers in: the storm is under way
                done.acquire()
            assert replicas[0].proc is not None
            os.killpg(replicas[0].proc.pid, signal.SIGKILL)

        k = threading.Thread(target=killer)
        k.start()
        with ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(ask, range(len(NODES))))
        k.join()
        store = Store.open(url=url)
        try:
            permits = {e.node for e in store.nodes.events(kinds=["permit"])}
            alerts = store.nodes.alerts()
        finally:
            store.close()
        granted = {NODES[i] for i, a in enumerate(answers) if a}
        assert len(permits) == CAP and granted <= permits, (granted, permits)
        assert len(alerts) == 1, alerts
        assert replicas[0].proc.poll() is not None  # it did die mid-storm
    finally:
        for r in replicas:
            r.stop()


def test_ingest_over_three_replicas_with_the_leader_killed_loses_nothing(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    """60 node clients (20 per replica) post batches of 5 for 8 s; the leader is killed
    with SIGKILL after 2 s. Its clients spool what it did not answer and replay it to a
    surviving replica afterwards: every record is in the store exactly once, and another
    replica leads."""
    import os
    import signal
    import threading
    import time

    from support.loadgen import count_in_store, drain_spools, run_clients

    url = pg_store(pg_server)
    replicas = start_replicas(tmp_path, url, big_partition(slurm_cluster_factory))
    try:
        (leader,) = wait_for(lambda: len(leaders(replicas)) == 1 and leaders(replicas), 15,
                             what="one leader")
        loads: list = [None] * 3

        def clients(i: int) -> None:
            loads[i] = run_clients(f"{replicas[i].url}/ingest", TOKEN, clients=20, seconds=8,
                                   batch=5, spool_root=tmp_path / "spools", prefix=f"r{i}n",
                                   timeout=5.0)

        threads = [threading.Thread(target=clients, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(2.0)
        assert leader.proc is not None
        os.killpg(leader.proc.pid, signal.SIGKILL)
        for t in threads:
            t.join()
        alive = [r for r in replicas if r is not leader]
        assert drain_spools(f"{alive[0].url}/ingest", TOKEN, tmp_path / "spools") == 0
        made = set().union(*(ld.made for ld in loads))
        lost, dup, stored = count_in_store(url, made)
        print(f"\n3 replicas, leader killed mid-load: {len(made)} records, {lost} lost, "
              f"{dup} duplicated; {sum(ld.failures for ld in loads)} POSTs failed and were "
              "spooled and replayed")
        assert (lost, dup) == (0, 0) and stored == len(made) > 0
        assert sum(ld.failures for ld in loads) > 0  # the kill did cut clients off
        wait_for(lambda: len(leaders(alive)) == 1, 15, what="a new leader")
    finally:
        for r in replicas:
            r.stop()
