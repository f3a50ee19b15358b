"""One leader runs serve's periodic work (serve/leader.py, docs/serve.md "One leader").

- 3 real serve replicas on one real PostgreSQL (and a real slurmctld for the passes): exactly one says it is the leader
  (`slurmguard_serve_leader` 1) and only it runs policy passes, also over a record a
  follower stored. kill -9 of the leader's
  process: another replica takes over within leader_retry (2 s) plus a margin, and runs
  the periodic work (a full pass) at once; the third stays a follower. The takeover time
  is measured and printed.
- SQLite: a second serve on the same store file refuses to start with one line naming the
  store and the serve holding it (exit 3), while the first goes on answering.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from support.helpers import require, run_sg, sg_env
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.replicas import big_partition, leaders, pg_store, start_replicas
from support.sgserve import TOKEN, Serve, new_port, new_store, write_config
from support.wait import wait_for

from slurmguard.adapters.serve_client import post_records
from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record

RETRY = 2.0
EXTRA = f"policy_interval = 60.0\nleader_retry = {RETRY}"


@pytest.mark.postgres
@pytest.mark.slurm
def test_one_leader_and_a_takeover_after_kill_9(slurm_cluster_factory, pg_server: PgServer,  # noqa: F811
                                                tmp_path: Path) -> None:
    replicas = start_replicas(tmp_path, pg_store(pg_server), big_partition(slurm_cluster_factory), 3,
                              serve_extra=EXTRA)
    try:
        (leader,) = wait_for(lambda: len(leaders(replicas)) == 1 and leaders(replicas), 15,
                             what="one leader")
        wait_for(lambda: leader.policy_passes() >= 1, 15, what="the new leader's first pass")
        followers = [r for r in replicas if r is not leader]
        # A record stored by a follower: the leader evaluates its node (a pass), not the follower.
        before = leader.policy_passes()
        rec = make_record("m001", "prolog", [CheckResult("fs-mount", Health.UNHEALTHY, "gone")],
                          "drain", "slurmguard: fs-mount: gone")
        assert post_records(followers[0].url + "/ingest", TOKEN, [rec], 30)["stored"] == [rec["id"]]
        wait_for(lambda: leader.policy_passes() > before, 3 * RETRY, what="the leader's pass")
        assert [r.policy_passes() for r in followers] == [0, 0]
        # each pass is timed, by kind: the first (full) one and the record's one at least
        timed = {k: leader.metric("slurmguard_policy_pass_duration_seconds_count", kind=k)
                 for k in ("full", "incremental")}
        assert timed["full"] >= 1 and sum(timed.values()) >= before + 1, (timed, before)
        assert [r.metric("slurmguard_policy_pass_duration_seconds_count")
                for r in followers] == [0, 0]
        assert leader.proc is not None
        t0 = time.monotonic()
        os.killpg(leader.proc.pid, signal.SIGKILL)
        (heir,) = wait_for(lambda: len(leaders(followers)) == 1 and leaders(followers), 30,
                           interval=0.05, what="a replica to take over")
        took = time.monotonic() - t0
        wait_for(lambda: heir.policy_passes() >= 1, 15, interval=0.05, what="the heir's pass")
        resumed = time.monotonic() - t0
        print(f"\nleader takeover after kill -9: {took:.2f} s; periodic work resumed after "
              f"{resumed:.2f} s (leader_retry {RETRY} s)")
        assert took <= RETRY + 1.5, took
        (other,) = [r for r in followers if r is not heir]
        assert other.policy_passes() == 0 and other.metric("slurmguard_serve_leader") == 0.0
        leader.proc.wait(timeout=10)
        leader.proc = None
    finally:
        for r in replicas:
            r.stop()


def test_a_second_serve_on_one_sqlite_file_refuses_to_start(tmp_path: Path) -> None:
    url = new_store(tmp_path)
    first = Serve(write_config(tmp_path, store_url=url, port=new_port()), 0)
    first.port = int(first.cfg.read_text().split("port = ")[1].split()[0])
    first.start()
    try:
        d = tmp_path / "second"
        d.mkdir()
        cfg = write_config(d, store_url=url, port=new_port())
        p = run_sg("-c", str(cfg), "serve", env=sg_env(SLURM_CONF=str(d / "none")), timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 3, p.stderr
        assert len(lines) == 1 and "in use by another serve (pid " in lines[0], p.stderr
        assert "store.path" in lines[0] and "PostgreSQL" in lines[0]
        assert first.healthz()["status"] == "ok"
    finally:
        first.stop()


@pytest.mark.postgres
@pytest.mark.slurm
def test_leadership_comes_back_after_postgresql_restarts(slurm_cluster_factory, tmp_path: Path) -> None:
    """PostgreSQL crashes (immediate stop) and starts again on the same port: the leader
    loses the lock with its connection, and one replica is the leader again afterwards."""
    from support.pgserver import _pg_bin

    bindir = _pg_bin()
    require(bindir is not None, "PostgreSQL server binaries (Debian package postgresql)")
    server = PgServer(bindir)
    server.start()
    try:
        replicas = start_replicas(tmp_path, pg_store(server), big_partition(slurm_cluster_factory), 2,
                                  serve_extra=EXTRA)
        try:
            wait_for(lambda: len(leaders(replicas)) == 1, 15, what="one leader")
            server.crash()
            wait_for(lambda: not leaders(replicas), 20, interval=0.2,
                     what="the leader to notice its lost connection")
            t0 = time.monotonic()
            server.start_again()
            wait_for(lambda: len(leaders(replicas)) == 1, 30, interval=0.2,
                     what="a leader after the restart")
            print(f"\nleader again {time.monotonic() - t0:.2f} s after PostgreSQL was back")
            assert all(r.healthz()["status"] == "ok" for r in replicas)
        finally:
            for r in replicas:
                r.stop()
    finally:
        server.stop()
