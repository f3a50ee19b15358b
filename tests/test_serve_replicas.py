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
- A PostgreSQL failover mid-load: the primary crashes, its synchronous streaming standby is
  promoted, and 2 replicas with a two-host store URL carry on against it: every record
  stored exactly once, one leader again, holding its lock on the new primary.

serve runs in the mode a site runs, `munge`: every permit ask, POST and spool replay carries
a MUNGE credential over its body from this machine's munged (origin 127.0.0.1), and serve
takes it only for Slurm nodes at that address. The nodes m001..m100 are declared in the
test's slurmctld at localhost; the ingest scenarios declare their node clients there too
(support/replicas.big_partition), as a site's nodes are in its slurmctld: serve checks each
record's node against the node table the leader reads from Slurm and publishes to the others.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.reliability import record, setting
from support.replicas import big_partition, leaders, pg_store, start_replicas
from support.sgserve import munge_auth
from support.wait import wait_for

from slurmguard.adapters.serve_client import DeliveryError, post_json
from slurmguard.store import Store

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]
NODES = [f"m{i:03d}" for i in range(1, 101)]
CAP = 10  # blast_max_percent 10 of a 100-node partition
# The storms ask each node's permit once: the caps' exactness across replicas, not the second
# look (held asks; tests/test_drain_permit_store.py, test_policy_slurm.py), which is off here.
NO_SECOND_LOOK = "[policy]\nsecond_look_after = 0\n"
REPLICA_CLIENTS = int(setting("replica_clients", 20, 67))  # per replica: 3 x 67 ~ 200
REPLICA_SECONDS = setting("replica_seconds", 8, 60)
FAILOVER_CLIENTS = int(setting("failover_clients", 10, 100))  # per replica
FAILOVER_SECONDS = setting("failover_seconds", 8, 60)


def refused(replicas: list) -> int:
    """Requests the live replicas refused for who sent them (slurmguard_auth_refusals_total):
    every node here is a declared Slurm node signing as itself, so 0 (a killed replica's
    count died with it)."""
    return int(sum(r.metric("slurmguard_auth_refusals_total") for r in replicas
                   if r.proc is not None and r.proc.poll() is None))


def test_a_permit_storm_over_three_replicas_allows_exactly_the_cap(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    url = pg_store(pg_server)
    conf = big_partition(slurm_cluster_factory)
    replicas = start_replicas(tmp_path, url, conf, auth="munge", extra=NO_SECOND_LOOK)
    sign = munge_auth()
    try:
        def ask(i: int) -> bool:
            node = NODES[i]
            answer = post_json(replicas[i % 3].url + "/permit", sign,
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
        refused_drains = [e.node for e in events if e.kind == "drain_refused"]
        not_taken = refused(replicas)
        # The check is on: the same host asking for a node its slurmctld does not have.
        with pytest.raises(DeliveryError, match="HTTP 403"):
            post_json(replicas[0].url + "/permit", sign,
                      {"node": "x0000", "check": "fs-mount", "reason": "slurmguard: fs-mount"}, 60.0)
        control = replicas[0].metric("slurmguard_auth_refusals_total", reason="other-node")
        record("replica-permit-storm", mode="munge", store="PostgreSQL, 3 serve replicas",
               load="100 nodes of one partition ask a permit at once, 48 threads round-robin",
               faults="a shared fault on a whole partition", lost=None,
               figures=(f"{allowed} allowed (cap {CAP}), {len(refused_drains)} refused, "
                        f"{len(alerts)} alert(s), {len(permits)} permit events; each ask "
                        f"signed, {not_taken} refused for who sent it (an ask for a node not in "
                        f"Slurm: 403, other-node x {control:.0f})"))
        assert allowed == CAP, allowed
        assert len(permits) == len(set(permits)) == CAP
        assert sorted(refused_drains) == sorted(set(NODES) - set(permits))
        assert not_taken == 0 and control == 1
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
    replicas = start_replicas(tmp_path, url, conf, auth="munge", extra=NO_SECOND_LOOK)
    sign = munge_auth()
    done = threading.Semaphore(0)
    try:
        def ask(i: int) -> bool:
            order = [replicas[(i + k) % 3].url + "/ingest" for k in range(3)]
            _, answer = post_first(order, sign, {"node": NODES[i], "check": "fs-mount",
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
        not_taken = refused(replicas)
        record("replica-killed-mid-storm", mode="munge", store="PostgreSQL, 3 serve replicas",
               load="100 permits in flight from 48 threads, each node trying its replicas in turn",
               faults="kill -9 of one replica after 20 answers",
               figures=(f"{len(permits)} permits stored (cap {CAP}), {len(granted)} answered "
                        f"allow, {len(alerts)} alert(s); each ask signed, {not_taken} refused "
                        "for who sent it by the 2 survivors"))
        assert len(permits) == CAP and granted <= permits, (granted, permits)
        assert len(alerts) == 1, alerts
        assert replicas[0].proc.poll() is not None  # it did die mid-storm
        assert not_taken == 0
    finally:
        for r in replicas:
            r.stop()


def test_ingest_over_three_replicas_with_the_leader_killed_loses_nothing(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    """Node clients (20 per replica; 67 in the long form: 200) post batches of 5 for 8 s
    (60 s long); the leader is killed with SIGKILL a quarter of the way in. Its clients spool what it did not answer and replay it to a
    surviving replica afterwards: every record is in the store exactly once, and another
    replica leads."""
    import os
    import signal
    import threading
    import time

    from support.loadgen import count_in_store, drain_spools, run_clients

    url = pg_store(pg_server)
    conf = big_partition(slurm_cluster_factory, [(f"r{i}n", REPLICA_CLIENTS) for i in range(3)])
    replicas = start_replicas(tmp_path, url, conf, auth="munge")
    sign = munge_auth()
    try:
        (leader,) = wait_for(lambda: len(leaders(replicas)) == 1 and leaders(replicas), 15,
                             what="one leader")
        loads: list = [None] * 3

        def clients(i: int) -> None:
            loads[i] = run_clients(f"{replicas[i].url}/ingest", "", clients=REPLICA_CLIENTS,
                                   seconds=REPLICA_SECONDS, batch=5,
                                   spool_root=tmp_path / "spools", prefix=f"r{i}n", timeout=5.0,
                                   auth_for=lambda _: sign)

        threads = [threading.Thread(target=clients, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(REPLICA_SECONDS / 4)
        assert leader.proc is not None
        os.killpg(leader.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        alive = [r for r in replicas if r is not leader]
        wait_for(lambda: len(leaders(alive)) == 1, 15, interval=0.1, what="a new leader")
        takeover = time.monotonic() - killed
        for t in threads:
            t.join()
        assert drain_spools(f"{alive[0].url}/ingest", "", tmp_path / "spools",
                            auth_for=lambda _: sign) == 0
        made = set().union(*(ld.made for ld in loads))
        lost, dup, stored = count_in_store(url, made)
        not_taken = refused(alive)
        print(f"\n3 replicas, leader killed mid-load: {len(made)} records, {lost} lost, "
              f"{dup} duplicated; {sum(ld.failures for ld in loads)} POSTs failed and were "
              "spooled and replayed")
        seconds = max(ld.seconds for ld in loads)
        record("replica-leader-killed", mode="munge", store="PostgreSQL, 3 serve replicas",
               load=f"3 x {REPLICA_CLIENTS} clients x {seconds:.0f} s, batches of 5",
               faults="kill -9 of the leader replica mid-load", lost=lost, duplicated=dup,
               figures=(f"{len(made) / seconds:.0f} records/s offered; another replica led "
                        f"{takeover:.1f} s after the kill; "
                        f"{sum(ld.failures for ld in loads)} POSTs failed, spooled and replayed "
                        f"(signed anew) to a survivor; {stored} of {len(made)} records stored "
                        f"once; {not_taken} requests refused for who sent them by the "
                        "survivors"))
        assert (lost, dup) == (0, 0) and stored == len(made) > 0
        assert sum(ld.failures for ld in loads) > 0  # the kill did cut clients off
        assert len(leaders(alive)) == 1
        assert not_taken == 0 and not any(ld.rejected for ld in loads)
    finally:
        for r in replicas:
            r.stop()


def test_a_failover_to_the_streaming_standby_loses_nothing(slurm_cluster_factory,
                                                            tmp_path: Path) -> None:
    """docs/serve.md, "PostgreSQL failover". A primary with a synchronous streaming standby
    (pg_basebackup -R, synchronous_standby_names '*'); 2 serve replicas whose store.url names
    both hosts with target_session_attrs=read-write. Mid-load the primary crashes (immediate
    stop) and the standby is promoted (what a failover manager does): the replicas answer 503
    meanwhile, nodes spool and replay, every record is stored exactly once on the new primary,
    and one replica leads again, holding its advisory lock there."""
    import threading
    import time

    from support.helpers import require
    from support.loadgen import count_in_store, drain_spools, one_record, run_clients
    from support.pgserver import _pg_bin

    from slurmguard.adapters import serve_client
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    bindir = _pg_bin()
    require(bindir is not None, "PostgreSQL server binaries (Debian package postgresql)")
    primary = PgServer(bindir, durable=True)
    primary.start()
    standby = None
    replicas: list = []
    try:
        standby = primary.standby()
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("SELECT pg_reload_conf()")
        wait_for(lambda: primary.sql("SELECT sync_state FROM pg_stat_replication") == [("sync",)],
                 30, what="the standby to stream synchronously")
        db = primary.create_db()
        url = (f"postgresql+psycopg://postgres@/{db}?host=127.0.0.1:{primary.port}"
               f"&host=127.0.0.1:{standby.port}&target_session_attrs=read-write")
        engine = make_engine({"url": url})
        upgrade(engine)
        engine.dispose()
        conf = big_partition(slurm_cluster_factory,
                             [("r0n", FAILOVER_CLIENTS), ("r1n", FAILOVER_CLIENTS), ("probe", 1)])
        replicas = start_replicas(tmp_path, url, conf, 2, auth="munge")
        sign = munge_auth()
        wait_for(lambda: len(leaders(replicas)) == 1, 15, what="one leader")

        started, stop = threading.Event(), threading.Event()
        times: dict[str, float] = {}
        probe_ids: set[str] = set()

        def failover() -> None:
            started.wait(30)
            time.sleep(FAILOVER_SECONDS / 3)  # the crash lands in the middle of the load
            primary.crash()
            times["crash"] = time.monotonic()
            standby.promote()
            times["promoted"] = time.monotonic()
            # One replica takes the leader's session lock on the promoted server.
            wait_for(lambda: standby.sql(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")[0][0] >= 1,
                30, interval=0.1, what="the leader's lock on the new primary")
            times["lock"] = time.monotonic()

        def probe() -> None:  # one node posting every 0.1 s: when does ingest work again?
            started.wait(30)
            rec = one_record("probe0000")
            while not stop.is_set():
                try:
                    serve_client.post_records(f"{replicas[0].url}/ingest", sign, [rec], 2.0)
                except serve_client.DeliveryError:
                    time.sleep(0.1)  # the same record again: it must end up stored once
                    continue
                probe_ids.add(rec["id"])
                if "crash" in times and "back" not in times:
                    times["back"] = time.monotonic()
                rec = one_record("probe0000")
                time.sleep(0.1)

        workers = [threading.Thread(target=failover), threading.Thread(target=probe)]
        for t in workers:
            t.start()
        loads: list = [None, None]

        def clients(i: int) -> None:
            loads[i] = run_clients(f"{replicas[i].url}/ingest", "", clients=FAILOVER_CLIENTS,
                                   seconds=FAILOVER_SECONDS, batch=5,
                                   spool_root=tmp_path / "spools", prefix=f"r{i}n", timeout=5.0,
                                   during=started if i == 0 else None, auth_for=lambda _: sign)

        load_threads = [threading.Thread(target=clients, args=(i,)) for i in range(2)]
        for t in load_threads:
            t.start()
        for t in load_threads:
            t.join()
        wait_for(lambda: "back" in times, 30, what="a node's POST to be stored after the failover")
        stop.set()
        for t in workers:
            t.join(30)
        left = drain_spools(f"{replicas[1].url}/ingest", "", tmp_path / "spools",
                            auth_for=lambda _: sign)
        (leader,) = wait_for(lambda: len(leaders(replicas)) == 1 and leaders(replicas), 30,
                             interval=0.2, what="one leader after the failover")
        locks = standby.sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        made = set().union(*(ld.made for ld in loads)) | probe_ids
        lost, dup, stored = count_in_store(url, made)
        not_taken = refused(replicas)
    finally:
        for r in replicas:
            r.stop()
        if standby is not None:
            standby.stop()
        primary.stop()
    failures = sum(ld.failures for ld in loads)
    gap = times["back"] - times["crash"]
    promote = times["promoted"] - times["crash"]
    print(f"\nfailover: promote {promote:.2f} s, a node's POST stored {gap:.2f} s after the crash, "
          f"the leader's lock there {times['lock'] - times['crash']:.1f} s after it; {len(made)} records, {lost} lost, "
          f"{dup} duplicated; {failures} POSTs spooled and replayed")
    record("postgresql-failover", mode="munge", store="PostgreSQL, primary + synchronous standby",
           load=(f"2 replicas x {FAILOVER_CLIENTS} clients x {FAILOVER_SECONDS:.0f} s, "
                 "batches of 5"),
           faults=("primary crashed (immediate stop) mid-load, standby promoted "
                   f"({promote:.1f} s); replicas on a two-host URL, read-write"),
           lost=lost, duplicated=dup,
           figures=(f"ingest stored again {gap:.1f} s after the crash; {failures} POSTs failed, "
                    f"spooled and replayed (signed anew); {stored} of {len(made)} records stored once; one "
                    f"leader again, its lock on the new primary "
                    f"{times['lock'] - times['crash']:.1f} s after the crash; {not_taken} "
                    "requests refused for who sent them"))
    assert left == 0
    assert (lost, dup) == (0, 0) and stored == len(made) > 0
    assert not_taken == 0 and not any(ld.rejected for ld in loads)
    assert gap < 20, gap
    assert locks[0][0] >= 1  # the leader's session lock lives on the promoted server
    assert leader in replicas
