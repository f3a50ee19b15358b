"""Real hooks, real Slurm: prologs run by slurmd while serve is stopped spool their records;
after serve starts, a later prolog replays them and every record is stored exactly once."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest
from support.helpers import sg_argv, sg_env
from support.sgserve import Serve, new_port, new_store, write_config

from slurmguard.adapters import spool as spool_files
from slurmguard.store import Store

pytestmark = pytest.mark.slurm

JOBS = 20


def test_prologs_spool_while_serve_is_down_and_replay_exactly_once(slurm_cluster_factory,
                                                                   tmp_path: Path) -> None:
    from support import slurmcluster

    url = new_store(tmp_path)
    port = new_port()
    cfg = write_config(tmp_path, store_url=url, port=port)
    # Only checks that mean something on a GPU-less CI box; the hook path is the real one.
    cfg.write_text(cfg.read_text().replace(
        "[hooks]\n", '[hooks]\nprolog = ["fs-mount", "host-memory", "host-cpus"]\n'))
    env = sg_env()
    hook = slurmcluster.write_shell_hook(tmp_path / "prolog.sh", f"""
export SLURMGUARD_CONFIG={shlex.quote(str(cfg))} PYTHONPATH={shlex.quote(env["PYTHONPATH"])}
exec {" ".join(shlex.quote(a) for a in sg_argv("prolog"))}
""")
    cluster = slurm_cluster_factory(nodes=2, prolog=hook)
    spool = str(tmp_path / "spool")
    jobs = [cluster.sbatch("true") for _ in range(JOBS)]
    for j in jobs:
        cluster.wait_job(j, timeout=120)
    assert len(spool_files.pending(spool)) == JOBS, cluster.log_tail("slurmd-n1.log")
    serve = Serve(cfg, port, "--no-policy").start()
    try:
        t0 = time.monotonic()
        last = cluster.sbatch("true")
        cluster.wait_job(last, timeout=120)
        end = time.monotonic() + 60
        while spool_files.pending(spool) and time.monotonic() < end:  # a replay is time-boxed
            extra = cluster.sbatch("true")
            cluster.wait_job(extra, timeout=120)
            jobs.append(extra)
        replay = time.monotonic() - t0
    finally:
        serve.stop()
    jobs.append(last)
    assert spool_files.pending(spool) == []
    store = Store.open(url=url)
    from sqlalchemy import func, select

    from slurmguard.store.models import Run

    with store.engine.connect() as conn:
        rows = conn.execute(select(Run.job_id, Run.hook, Run.health)).all()
        distinct = conn.execute(select(func.count(func.distinct(Run.record_id)))).scalar_one()
    store.close()
    assert distinct == len(rows) == len(jobs)
    assert sorted(r.job_id for r in rows) == sorted(jobs)
    assert {r.hook for r in rows} == {"prolog"} and {r.health for r in rows} == {"healthy"}
    print(f"{JOBS} real prologs spooled; replayed within {replay:.1f} s of serve's start")
