"""A training-like job loses a node mid-run; Slurm requeues it, and `slurmguard run` resumes it
from the newest complete checkpoint, ending in exactly the state of an uninterrupted run
(tests/train_job.py). One capability, tested on the two real clusters:

- ``test_node_loss_resume`` (marker ``slurm``, the native multi-slurmd cluster): a 2-node job;
  the requeue watcher puts it back on healthy nodes at once (excluding the lost one) and
  records the recovery in the store; variants: wrapper flags, a torn newest checkpoint
  (resumes from the one before), the SPANK plugin's options.
- ``test_node_lost_job_resumes_from_checkpoint`` (marker ``e2e``, the dockerized cluster): the
  node is really gone (``docker kill``) and the checkpoints live on a filesystem all nodes
  share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dockercluster import DockerCluster
from dockercluster import wait_for as wait_until
from support.helpers import REPO, sg_argv, sg_env
from support.requeue_support import Watcher, log_lines, lose_node, quiet
from support.wait import wait_for
from test_spank import build_plugin

from slurmguard.nodeset import expand

TRAIN = REPO / "tests" / "train_job.py"
STEPS, EVERY = 40, 5


def reference_state(tmp: Path) -> dict[str, Any]:
    d = tmp / "reference"
    (d / "ckpt").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(STEPS), "--every", str(EVERY),
                    "--sleep", "0", "--ckpt-dir", str(d / "ckpt"), "--log", str(d / "log"),
                    "--final", str(d / "final.json")], env=env, check=True, timeout=60)
    return json.loads((d / "final.json").read_text())


def run_scenario(factory: Any, tmp: Path, mode: str) -> None:
    so = build_plugin(tmp)
    (tmp / "plugstack.conf").write_text(f"required {so}\n")
    c = factory(nodes=3, extra_conf=[f"PlugStackConfig={tmp / 'plugstack.conf'}", "RequeueExit=75"])
    c.env["PYTHONPATH"] = str(REPO)
    ck = tmp / "ckpt"
    ck.mkdir()
    log, final = tmp / "steps.log", tmp / "final.json"
    cfg = tmp / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp / "sg.db"}"\n'
                   f'[requeue]\nstate_file = "{tmp / "watch.json"}"\n')
    r = subprocess.run(sg_argv("db", "upgrade"), env=sg_env(SLURMGUARD_CONFIG=str(cfg)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ref = reference_state(tmp)

    train = (f"{sys.executable} {TRAIN} --steps {STEPS} --every {EVERY} --sleep 0.25 "
             f"--ckpt-dir {ck} --log {log} --final {final}")
    if mode == "spank":
        script = f"#!/bin/sh\nexec {sys.executable} -m slurmguard run -- srun {train}\n"
        opts = [f"--guard-checkpoint-dir={ck}", "--guard-max-requeues=2"]
    else:
        script = (f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir {ck} "
                  f"--max-requeues 2 -- srun {train}\n")
        opts = []
    watcher = Watcher(c, cfg, state_file=tmp / "watch.json")  # polling before the job starts
    try:
        jid = c.sbatch(script, "-N2", "--requeue", *opts)
        c.wait_job(jid, ["RUNNING"], timeout=60)
        wait_for(lambda: len(log_lines(log)) >= 12, 60, interval=0.2, what="12 steps")
        job = c.job(jid)
        victim = next(n for n in expand(job["NodeList"]) if n != job["BatchHost"])
        lose_node(c, victim)
        # The survivor blocks in its next collective, as with NCCL: wait until it has.
        wait_for(lambda: quiet(log, 1.5), 30, interval=0.2, what="the surviving rank to block")
        run0 = [s for s, r, _ in log_lines(log) if r == 0]
        newest = EVERY * (max(run0) // EVERY)
        expect = newest
        if mode == "torn":
            (ck / f"step-{newest:06d}" / "shard1.bin").unlink()  # torn: a shard missing
            expect = newest - EVERY
        job = wait_for(lambda: (j := c.job(jid))["JobState"] == "PENDING"
                       and j["Restarts"] == "1" and j, 120, what="Slurm to requeue the job")
        t_requeue = time.monotonic()
        c.wait_job(jid, ["RUNNING", "COMPLETED"], timeout=30)
        recovery = time.monotonic() - t_requeue
        done = c.wait_job(jid, ["COMPLETED"], timeout=120)
    finally:
        events = watcher.stop()
    out = (c.root / "log" / f"job-{jid}.out").read_text()

    # Finished, once requeued, in exactly the uninterrupted run's state.
    assert json.loads(final.read_text()) == ref, out
    assert done["Restarts"] == "1"
    assert victim in expand(done["ExcNodeList"])
    # Resumed from the newest complete checkpoint (the one before it when that one was torn).
    runs = [json.loads(x) for x in (ck / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    second = [x for x in runs if x["restart"] == 1][-1]
    resumed = second["resumed_from"]
    assert resumed["step"] == expect, out
    # The resumed run recorded what the requeue cost (from the first run's record).
    lost = second["recovery"]
    assert 0 <= lost["steps_lost_at_least"] <= max(run0) - expect
    assert lost["seconds_since_previous_run"] < 15
    if mode == "torn":
        assert "skipping checkpoint" in out and "shard1.bin is missing" in out
    # No step lost twice: the resumed run did exactly the steps after that checkpoint.
    lines = log_lines(log)
    run1 = [(s, n) for s, r, n in lines if r == 1]
    assert [s for s, _ in run1] == list(range(expect + 1, STEPS + 1))
    assert all(n != victim for _, n in run1)
    assert sorted(s for s, r, _ in lines if r == 0) == list(range(1, max(run0) + 1))
    # The watcher saw it, excluded the node, and it ran again within seconds.
    kinds = {(e["event"], e["job_id"]) for e in events}
    assert ("requeue-expedite", jid) in kinds, events
    exp = next(e for e in events if e["event"] == "requeue-expedite")
    assert exp["failed_nodes"] == [victim]
    assert recovery < 15, recovery
    # ... and recorded the recovery in the store.
    from slurmguard.store import Store

    store = Store.open(section={"path": str(tmp / "sg.db")})
    evs = [e for e in store.nodes.events(node=victim) if e.source == "requeue"]
    assert evs and f"job {jid}" in evs[-1].reason
    print(f"\n{mode}: requeue -> running again in {recovery:.1f}s; resumed from step "
          f"{expect}; {len(run0)} + {len(run1)} steps")


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["flags", "torn", "spank"])
def test_node_loss_resume(slurm_cluster_factory: Any, tmp_path: Path, mode: str) -> None:
    run_scenario(slurm_cluster_factory, tmp_path, mode)


@pytest.mark.e2e
def test_node_lost_job_resumes_from_checkpoint(cluster: DockerCluster, tmp_path: Path) -> None:
    ref = reference_state(tmp_path)

    # The job, on the shared filesystem (/shared in every container).
    run = cluster.shared / "run1"
    (run / "ckpt").mkdir(parents=True)  # `slurmguard run` wants it to exist
    (cluster.shared / "train_job.py").write_bytes(TRAIN.read_bytes())
    ck, log, final = "/shared/run1/ckpt", run / "steps.log", run / "final.json"
    train = (f"/opt/slurmguard/bin/python /shared/train_job.py --steps {STEPS} --every {EVERY} "
             f"--sleep 0.25 --ckpt-dir {ck} --log /shared/run1/steps.log "
             f"--final /shared/run1/final.json")
    job_id = cluster.sbatch("--requeue", "-N1", "-o", "/shared/run1/job-%j.out", "--wrap",
                            f"exec /usr/local/bin/slurmguard run --checkpoint-dir {ck} "
                            f"--max-requeues 2 -- {train}")
    victim = cluster.wait_job(job_id, {"RUNNING"}, timeout=60)["NodeList"]
    wait_until("12 training steps", lambda: len(log_lines(log)) >= 12, timeout=90)

    cluster.kill(victim)
    job = cluster.wait_job(job_id, {"COMPLETED"}, timeout=200)
    out = "".join(p.read_text() for p in run.glob("job-*.out"))
    assert int(job["Restarts"]) >= 1 and job["NodeList"] != victim, job

    # Exactly the uninterrupted run's state...
    assert json.loads(final.read_text()) == ref, out
    # ...resumed from the newest complete checkpoint written before the node was lost...
    lines = log_lines(log)
    run0 = [s for s, r, _ in lines if r == 0]
    newest = EVERY * (max(run0) // EVERY)
    runs = [json.loads(x) for x in (run / "ckpt" / ".slurmguard" / "runs.jsonl")
            .read_text().splitlines()]
    resumed = [x for x in runs if x["restart"] >= 1][-1]["resumed_from"]
    assert resumed["step"] == newest, (resumed, out)
    # ...doing exactly the steps after it, on another node.
    run1 = [(s, n) for s, r, n in lines if r >= 1]
    assert [s for s, _ in run1] == list(range(newest + 1, STEPS + 1)), lines
    assert all(n != victim for _, n in run1), lines
