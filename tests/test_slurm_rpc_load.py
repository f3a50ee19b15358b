"""What slurmguard costs slurmctld, counted by slurmctld itself (``sdiag``, reset per phase)
on a real cluster, with real `slurmguard run` wrappers (docs/requeue.md, "What a serve outage
costs slurmctld").

- serve up: each replica reads Slurm's node table once per ``serve.slurm_view_ttl`` from its
  start, for /drains, the policy pass and the scopes together, however often it is asked:
  with no job and a prolog record every 5 s, then 10 and 25 wrappers polling /drains every
  0.5 s and a record every 1.5 s, the node reads of each 30 s phase are within 30 / ttl +- 3
  and within 3 of each other (before: the /drains cache read once a second and each record's
  policy pass read once more, so it grew with jobs and records; then, read on demand below
  that ceiling, 5 reads in the quiet phase against 15 in the busy ones). Two replicas, the
  jobs asking the follower: the reads of a quiet and a busy phase are those of one replica,
  at most 30 / ttl + 4 (the leader reads for both and publishes the view in the store), and
  equal within 5 or a quarter of the larger (each replica used to read on its own, twice
  that; earlier still a replica read only within a minute of being asked).
- serve down: each wrapper's Slurm fallback backs off to ``notice.slurm_interval_max``; the
  node reads of 10 wrappers over 30 s stay within 10 x (30 / (0.75 x max) + 1), where the
  fixed interval it replaced made 10 x 30 / slurm_interval.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO, run_sg, sg_env
from support.pgserver import pg_server  # noqa: F401  (fixture)
from support.sgserve import Serve, job_token_line, new_port, new_store, write_config
from support.wait import wait_for

pytestmark = pytest.mark.slurm


def rpcs(c: Any) -> dict[str, int]:
    """slurmctld's RPC counts by message type since the last ``sdiag --reset``."""
    out = c.run("sdiag").stdout
    part = out.split("by message type")[1].split("by user")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)}


JOBS, WINDOW, SLURM_INTERVAL, SLURM_MAX = 10, 30.0, 1.0, 4.0


def counted(c: Any, seconds: float) -> dict[str, int]:
    c.run("sdiag", "--reset")
    time.sleep(seconds)
    return rpcs(c)


def wrapped_jobs(c: Any, n: int, tmp: Path) -> list[str]:
    script = f"#!/bin/sh\nexec {sys.executable} -m slurmguard run -- sleep 600\n"
    jobs = [c.sbatch(script, "-N1", f"--output={tmp}/job-%j.out") for _ in range(n)]
    for j in jobs:
        c.wait_job(j, ["RUNNING"], timeout=120)
    return jobs


def reads_while_recording(c: Any, cfg: Path, every: float, sent: list[int]) -> int:
    """Node reads (REQUEST_NODE_INFO) in one WINDOW while a healthy prolog record goes to
    serve every ``every`` s (``sent[0]`` counts them)."""
    stop = threading.Event()

    def records() -> None:
        while not stop.wait(every):
            sent[0] += 1
            run_sg("prolog", env=sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_CONF=str(c.conf_path),
                                        SLURMD_NODENAME=c.nodes[sent[0] % len(c.nodes)]))

    t = threading.Thread(target=records)
    t.start()
    try:
        return counted(c, WINDOW).get("REQUEST_NODE_INFO", 0)
    finally:
        stop.set()
        t.join()


def serve_extra_config(port: int, d: Path) -> str:
    """The hooks' prolog check and the jobs' drain notices from serve at ``port`` (the job
    token under ``d`` their credential)."""
    return f"""
prolog = ["fs-mount"]
[checks.fs]
mounts = ["/"]
[notice]
serve_url = "http://127.0.0.1:{port}"
interval = 0.5
{job_token_line(d)}
"""


TTL, RECORD_EVERY, QUIET_RECORD_EVERY = 2.0, 1.5, 5.0


def test_serve_reads_slurm_once_per_ttl_whatever_the_jobs_and_records(
        slurm_cluster_factory: Any, tmp_path: Path) -> None:
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port,
                       extra=serve_extra_config(port, tmp_path), serve_extra=f"slurm_view_ttl = {TTL}")
    c = slurm_cluster_factory(nodes=4, gpu_partition="OverSubscribe=FORCE:8")
    c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfg))
    serve = Serve(cfg, port, env={"SLURM_CONF": str(c.conf_path)}).start()
    jobs: list[str] = []
    reads: dict[int, int] = {}
    sent = [0]
    try:
        for n, every in ((0, QUIET_RECORD_EVERY), (10, RECORD_EVERY), (25, RECORD_EVERY)):
            jobs += wrapped_jobs(c, n - len(jobs), tmp_path)
            time.sleep(3)  # the new wrappers' first polls
            reads[n] = reads_while_recording(c, cfg, every, sent)
        ingested = serve.metric("slurmguard_ingest_records_total")
    finally:
        c.run("scancel", *jobs, check=False)
        serve.stop()
    rate = WINDOW / TTL
    print(f"\nserve up, node reads in {WINDOW:.0f} s by jobs running: {reads} "
          f"(one per ttl: {rate:.0f}); {sent[0]} prologs, {ingested:.0f} records ingested")
    assert sent[0] >= 10 and ingested >= sent[0]  # the records did arrive, each its own
    assert all(rate - 3 <= r <= rate + 3 for r in reads.values()), reads
    assert max(reads.values()) - min(reads.values()) <= 3, reads  # not following the demand



@pytest.mark.postgres
def test_two_replicas_read_slurm_at_one_rate_with_and_without_jobs(
        slurm_cluster_factory: Any, pg_server: Any, tmp_path: Path) -> None:  # noqa: F811
    """Two replicas on one PostgreSQL, the first leading; the jobs' wrappers ask the second
    (its only askers, as a follower's are). Quiet: no job, a prolog record every 5 s to the
    leader; busy: 10 wrappers polling the follower's /drains every 0.5 s and a record every
    1.5 s. The node reads of each 30-s phase are those of ONE replica: at most 30 / ttl + 4
    (the leader reads and publishes the view in the store, the follower reads the store;
    serve/slurmview.py), and equal within 5 or a quarter of the larger. Before, each replica
    read on its own: 31 and 30 reads per phase, twice the rate; and before that a replica's
    refresher read only while it had been asked in the last minute."""
    from support.replicas import pg_store

    url = pg_store(pg_server)
    ports = [new_port(), new_port()]
    dirs = [tmp_path / "r0", tmp_path / "r1"]
    cfgs = []
    for d, port in zip(dirs, ports, strict=True):
        d.mkdir()
        cfgs.append(write_config(d, store_url=url, port=port, extra=serve_extra_config(ports[1], d),
                                 serve_extra=f"slurm_view_ttl = {TTL}"))
    c = slurm_cluster_factory(nodes=4, gpu_partition="OverSubscribe=FORCE:8")
    c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfgs[0]))
    serves: list[Serve] = []
    jobs: list[str] = []
    reads: dict[str, int] = {}
    sent = [0]
    try:
        for cfg, port in zip(cfgs, ports, strict=True):
            serves.append(Serve(cfg, port, env={"SLURM_CONF": str(c.conf_path)}).start(timeout=120))
        assert serves[0].metric("slurmguard_serve_leader") == 1.0
        time.sleep(5)  # the follower's first looks at the published view
        for phase, n, every in (("quiet", 0, QUIET_RECORD_EVERY), ("busy", 10, RECORD_EVERY)):
            jobs += wrapped_jobs(c, n - len(jobs), tmp_path)
            time.sleep(3)
            reads[phase] = reads_while_recording(c, cfgs[0], every, sent)
            print(f"\n{phase}: {reads[phase]} node reads in {WINDOW:.0f} s")
        # A scrape may time out on a loaded host: asked again, it is the same counter.
        polled = wait_for(lambda: serves[1].metric("slurmguard_http_requests_total",
                                                   path="/drains") or -1.0,
                          120, what="the follower's /metrics", ignore=(OSError,))
        views = [{src: s.metric("slurmguard_serve_node_views_total", source=src)
                  for src in ("slurm", "store")} for s in serves]
    finally:
        c.run("scancel", *jobs, check=False)
        for s in serves:
            s.stop()
    rate = WINDOW / TTL
    print(f"\ntwo replicas, node reads in {WINDOW:.0f} s: {reads} (one per ttl for both: "
          f"{rate:.0f}); {sent[0]} prologs; follower's /drains answered: {polled:.0f}")
    assert sent[0] >= 4 and polled >= 100  # the records and the follower's askers did come
    print(f"views taken, leader: {views[0]}; follower: {views[1]}")
    # The leader reads Slurm; the follower takes the leader's view from the store (its one
    # read of its own: at its start, before it knew whether it leads).
    assert views[0]["store"] == 0 and views[0]["slurm"] >= sum(reads.values()) - 4, views
    assert views[1]["store"] >= 1 and views[1]["slurm"] <= 2, views
    # The ceiling: one reader per ttl for both replicas, plus the follower's read after a
    # drain the policy pass made (none here: healthy records).
    assert all(1 <= r <= rate + 4 for r in reads.values()), reads
    # Not following the jobs: equal within 5 reads or a quarter of the larger (a read that
    # outlasts the ttl on a loaded host delays the next; the follower that read only while
    # asked made about half in the quiet phase).
    assert abs(reads["quiet"] - reads["busy"]) <= max(5, max(reads.values()) / 4), reads



def test_serve_down_wrappers_back_off_their_slurm_reads(slurm_cluster_factory: Any,
                                                        tmp_path: Path) -> None:
    dead = new_port()  # serve configured, nothing listening: every poll falls back to Slurm
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=dead, extra=f"""
[notice]
serve_url = "http://127.0.0.1:{dead}"
interval = 0.5
timeout = 0.5
slurm_interval = {SLURM_INTERVAL}
slurm_interval_max = {SLURM_MAX}
""")
    c = slurm_cluster_factory(nodes=2, gpu_partition="OverSubscribe=FORCE:8")
    c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfg))
    jobs = wrapped_jobs(c, JOBS, tmp_path)
    try:
        time.sleep(12)  # past the doubling: 1, 2, 4 s (times up to 1.25)
        reads = counted(c, WINDOW).get("REQUEST_NODE_INFO", 0)
    finally:
        c.run("scancel", *jobs, check=False)
    fixed = JOBS * WINDOW / SLURM_INTERVAL
    bound = JOBS * (WINDOW / (0.75 * SLURM_MAX) + 1)
    print(f"\nserve down, {JOBS} wrappers, {WINDOW:.0f} s: {reads} node reads "
          f"(bound {bound:.0f}; at the fixed interval {fixed:.0f})")
    assert JOBS <= reads <= bound  # every wrapper still asks: never silent


def test_what_one_node_read_costs_slurmctld(slurm_cluster_factory: Any) -> None:
    """The RPCs of one read of one node, by ``scontrol show node -o NAME`` (the whole node
    table on 22.05, and the partitions: what the node side used before SlurmCLI.node read
    ``sinfo -n NAME -O``, tests/test_slurm_node_read.py) and by ``sinfo -n NAME``
    (REQUEST_NODE_INFO_SINGLE: that node only), as sdiag counts them; the
    scale harness's controller/node split (footprint.RPCS_PER_CALL) rests on these."""
    from support import footprint
    from support.slurmcluster import BIN

    c = slurm_cluster_factory(nodes=2)
    name = c.nodes[0]
    cost = {}
    for kind, argv in (("scontrol show node NAME", [BIN["scontrol"], "show", "node", "-o", name]),
                       ("sinfo node NAME", [BIN["sinfo"], "-h", "-N", "-n", name, "-o", "%N %T"])):
        c.run("sdiag", "--reset")
        for _ in range(3):
            r = subprocess.run(argv, env=c.env, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and name in r.stdout, (argv, r.stdout, r.stderr)
        counts = {t: n for t, n in rpcs(c).items() if t != "REQUEST_STATS_INFO"}
        cost[kind] = counts
        assert sum(counts.values()) == 3 * footprint.RPCS_PER_CALL[kind], (kind, counts)
    print(f"\nRPCs of 3 reads of one node: {cost}")
    assert cost["scontrol show node NAME"] == {"REQUEST_NODE_INFO": 3, "REQUEST_PARTITION_INFO": 3}
    assert cost["sinfo node NAME"].get("REQUEST_NODE_INFO_SINGLE") == 3, cost
    assert "REQUEST_NODE_INFO" not in cost["sinfo node NAME"], cost
