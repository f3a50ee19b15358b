"""A training-like job loses its node (`docker kill`) mid-run; Slurm requeues it onto another
node, and `slurmguard run` resumes it from the newest complete checkpoint on the shared
filesystem, ending in exactly the state of an uninterrupted run (tests/train_job.py).

The docker version of tests/test_requeue_e2e.py: here the node is really gone (its
container is killed), and the checkpoints live on a filesystem that all nodes share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dockercluster import DockerCluster, wait_for
from helpers import REPO

pytestmark = pytest.mark.e2e

TRAIN = REPO / "tests" / "train_job.py"
STEPS, EVERY = 40, 5


def _steps(log: Path) -> list[tuple[int, int, str]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        s, r, n = line.split()
        out.append((int(s), int(r), n))
    return out


def test_node_lost_job_resumes_from_checkpoint(cluster: DockerCluster, tmp_path: Path) -> None:
    # The uninterrupted run's final state, computed here.
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(STEPS), "--every", str(EVERY),
                    "--sleep", "0", "--ckpt-dir", str(ref_dir / "ckpt"), "--log",
                    str(ref_dir / "log"), "--final", str(ref_dir / "final.json")],
                   env=env, check=True, timeout=60)
    ref = json.loads((ref_dir / "final.json").read_text())

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
    wait_for("12 training steps", lambda: len(_steps(log)) >= 12, timeout=90)

    cluster.kill(victim)
    job = cluster.wait_job(job_id, {"COMPLETED"}, timeout=200)
    out = "".join(p.read_text() for p in run.glob("job-*.out"))
    assert int(job["Restarts"]) >= 1 and job["NodeList"] != victim, job

    # Exactly the uninterrupted run's state...
    assert json.loads(final.read_text()) == ref, out
    # ...resumed from the newest complete checkpoint written before the node was lost...
    lines = _steps(log)
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
