"""`slurmguard serve status [--json]` against real serve processes (docs/serve.md).

- PostgreSQL, 2 replicas (and a real slurmctld for the policy passes): both up, the leader
  named as the database's lock holder says, a last policy pass, the newest record's age
  after one ingest; a follower killed with SIGKILL stays listed but goes from "up" to gone
  once its heartbeat is stale, a replica stopped cleanly leaves no row.
- SQLite, one serve: up and the leader, in text and JSON.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.replicas import big_partition, leaders, pg_store, start_replicas
from support.sgserve import TOKEN, Serve, new_port, new_store, write_config
from support.wait import wait_for

from slurmguard.adapters.serve_client import post_records
from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record


def status(cfg: Path) -> dict:
    p = run_sg("-c", str(cfg), "serve", "status", "--json", env=sg_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _mine(s: dict, serve: Serve) -> dict:
    (row,) = [r for r in s["replicas"] if r["name"].endswith(f":{serve.port}")]
    return row


@pytest.mark.postgres
@pytest.mark.slurm
def test_status_names_the_replicas_the_leader_and_the_store_lag(
        slurm_cluster_factory, pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    a, b = start_replicas(tmp_path, pg_store(pg_server), big_partition(slurm_cluster_factory), 2,
                          serve_extra="policy_interval = 60.0")
    try:
        (leader,) = wait_for(lambda: len(leaders([a, b])) == 1 and leaders([a, b]), 15,
                             what="one leader")
        follower = b if leader is a else a
        rec = make_record("m001", "prolog", [CheckResult("fs-mount", Health.HEALTHY, "")], "pass", "")
        post_records(follower.url + "/ingest", TOKEN, [rec], 30)
        s = wait_for(lambda: (x := status(a.cfg))["up"] == 2 and x["last_policy_pass_age_s"] is not None
                     and x, 20, what="both replicas in serve status")
        assert s["leader"] == _mine(s, leader)["name"] and _mine(s, leader)["leader"]
        assert not _mine(s, follower)["leader"]
        assert s["newest_record_age_s"] is not None and 0 <= s["newest_record_age_s"] < 30
        assert s["standbys"] == []
        assert follower.proc is not None
        os.killpg(follower.proc.pid, signal.SIGKILL)  # its row stays, and goes stale
        follower.proc.wait(timeout=10)
        follower.proc = None
        s = wait_for(lambda: (x := status(a.cfg))["up"] == 1 and x, 30, what="the stale row")
        assert len(s["replicas"]) == 2 and not _mine(s, follower)["up"]
        leader.stop()  # a clean stop removes its row
        s = status(a.cfg)
        assert [r["up"] for r in s["replicas"]] == [False] and s["leader"] is None
    finally:
        a.stop()
        b.stop()


def test_status_on_sqlite_shows_the_one_serve(tmp_path: Path) -> None:
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port)
    serve = Serve(cfg, port, env={"SLURM_CONF": str(tmp_path / "none")}).start()
    try:
        s = wait_for(lambda: status(cfg)["up"] == 1 and status(cfg), 15, what="the heartbeat")
        assert s["leader"] == _mine(s, serve)["name"]
        p = run_sg("-c", str(cfg), "serve", "status", env=sg_env(), timeout=60)
        assert p.returncode == 0 and f"leader:      {s['leader']}" in p.stdout, p.stdout
        assert "replicas up: 1 of 1 seen" in p.stdout
    finally:
        serve.stop()
