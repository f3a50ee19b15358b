"""Goodput of a real job on the real Slurm test cluster with accounting on (slurmdbd + MariaDB).

A 2-node checkpointing job (tests/train_job.py) under `slurmguard run` loses a node twice (the
second time with its newest checkpoint torn), stalls once, and finishes; the requeue watcher
puts it back each time. `slurmguard goodput --job ID --json` then reads sacct (real slurmdbd),
the wrapper's runs.jsonl and the store, and its parts must add up to the allocated time the test
measured itself within 2 %, with the lost work equal to the steps redone x the step time
measured from the job's own log within 10 %.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO, run_sg, sg_env
from support.requeue_support import Watcher, log_lines, lose_node, quiet
from support.wait import wait_for

from slurmguard.adapters.slurm.parse import SACCT_FIELDS, parse_sacct_parsable
from slurmguard.goodput.account import PARTS
from slurmguard.nodeset import expand

pytestmark = pytest.mark.slurm

TRAIN = REPO / "tests" / "train_job.py"
STEPS, EVERY, SLEEP = 40, 5, 0.5
STALL_AT, STALL_FOR, STALL_TIMEOUT = 33, 6.0, 3


def step_times(path: Path) -> dict[int, list[tuple[int, float]]]:
    """Per restart, (step, time it ended) from the job's log (rank 0 writes one line a step)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for line in path.read_text().splitlines():
        s, r, _, t = line.split()
        out.setdefault(int(r), []).append((int(s), float(t)))
    return out


def lose_a_node(c: Any, jid: str, log: Path, restart: int, at_step: int) -> tuple[str, int]:
    """Wait for ``at_step`` in run ``restart``, kill a non-batch node of the job like a power
    loss, wait until the survivor blocks; returns the node and the last step of that run."""
    wait_for(lambda: any(s >= at_step and r == restart for s, r, _ in log_lines(log)), 90,
             interval=0.2, what=f"step {at_step} of run {restart}")
    job = c.job(jid)
    victim = next(n for n in expand(job["NodeList"]) if n != job["BatchHost"])
    lose_node(c, victim)
    wait_for(lambda: quiet(log, 1.5), 30, interval=0.2, what="the surviving rank to block")
    return victim, max(s for s, r, _ in log_lines(log) if r == restart)


def wait_requeued(c: Any, jid: str, restarts: int) -> None:
    wait_for(lambda: (j := c.job(jid))["JobState"] == "PENDING" and j["Restarts"] == str(restarts),
             120, interval=0.2, what=f"Slurm to requeue the job (restart {restarts})")
    c.wait_job(jid, ["RUNNING", "COMPLETED"], timeout=60)


def test_goodput_of_a_job_that_lost_two_nodes_and_stalled(
        slurm_cluster_factory: Any, slurmdbd: Any, tmp_path: Path) -> None:
    c = slurm_cluster_factory(nodes=4, accounting=slurmdbd, extra_conf=["RequeueExit=75"])
    c.env["PYTHONPATH"] = str(REPO)
    c.env["SLURMGUARD_PROGRESS_INTERVAL"] = "0"  # every step reported: exact frontier
    ck = tmp_path / "ckpt"
    ck.mkdir()
    log, final = tmp_path / "steps.log", tmp_path / "final.json"
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "sg.db"}"\n'
                   f'[requeue]\nstate_file = "{tmp_path / "watch.json"}"\n'
                   f'[goodput]\nrun_dirs = ["{ck}"]\n')
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_CONF=str(c.conf_path))
    r = run_sg("db", "upgrade", env=env)
    assert r.returncode == 0, r.stderr
    train = (f"{sys.executable} {TRAIN} --steps {STEPS} --every {EVERY} --sleep {SLEEP} "
             f"--ckpt-dir {ck} --log {log} --final {final} --stall-at {STALL_AT} "
             f"--stall-for {STALL_FOR} --fault-restart 2")
    script = (f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir {ck} "
              f"--max-requeues 3 --stall-timeout {STALL_TIMEOUT} -- srun {train}\n")
    watcher = Watcher(c, cfg, state_file=tmp_path / "watch.json")  # polling before the job starts
    try:
        jid = c.sbatch(script, "-N2", "--requeue")
        c.wait_job(jid, ["RUNNING"], timeout=60)
        t_start = time.time()
        # Loss 1 after step 12 (checkpoint 10 complete): resumes from 10.
        victim1, last0 = lose_a_node(c, jid, log, 0, 12)
        wait_requeued(c, jid, 1)
        # Loss 2 after step 22, newest checkpoint torn (a shard gone): resumes from the one before.
        victim2, last1 = lose_a_node(c, jid, log, 1, 22)
        newest = EVERY * (last1 // EVERY)
        (ck / f"step-{newest:06d}" / "shard1.bin").unlink()
        wait_requeued(c, jid, 2)
        done = c.wait_job(jid, ["COMPLETED"], timeout=180)
        t_end = time.time()
    finally:
        watcher.stop()
    assert done["Restarts"] == "2" and victim1 != victim2
    measured = t_end - t_start  # what the test saw: first RUNNING to COMPLETED
    redone = (last0 - 10) + (last1 - (newest - EVERY))

    # sacct answers for real; wait until slurmdbd has the final record.
    recs = wait_for(lambda: (x := c.cli().accounting([jid])) and any(
        a.state == "COMPLETED" and a.end for a in x) and x, 60, interval=0.2,
        what="sacct to show the job ended")
    assert [a.state for a in recs][-1] == "COMPLETED" and len(recs) == 3, recs
    # sacct -P (the fallback where --json is missing) reads the same allocations.
    text = c.run("sacct", "-D", "-X", "-P", "-n", f"--format={SACCT_FIELDS}", "-j", jid).stdout
    assert [(a.state, a.start, a.end, a.nodes) for a in parse_sacct_parsable(text)] == [
        (a.state, a.start, a.end, a.nodes) for a in recs]

    # The hourly collection (the timer's command): sacct for the window, then the same sources.
    r = run_sg("goodput", "--since", "1h", "--collect", "--json", env=env)
    assert r.returncode == 0, r.stderr
    collected = json.loads(r.stdout)
    assert collected["jobs"] == 1 and collected["jobs_with_unknown"] == 0, collected
    # A job the real accounting does not know: said so in one line, exit 6 (no zeros).
    r = run_sg("goodput", "--job", "987654", "--json", env=env)
    assert r.returncode == 6 and r.stdout == "", (r.stdout, r.stderr)
    assert "--job 987654: nothing to account: Slurm accounting has no such job" in r.stderr
    r = run_sg("goodput", "--job", jid, "--json", env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert abs(collected["parts"]["lost_work"] - d["parts"]["lost_work"]) < 0.01
    parts = d["parts"]
    print(f"\ngoodput of job {jid}: measured {measured:.1f}s, " + json.dumps(parts)
          + f", steps lost {d['steps_lost']} (redone {redone}), step {d['step_time_s']}")
    assert d["unknown"] == [] and parts["unknown"] == 0, d["unknown"]
    assert set(parts) == set(PARTS) and all(v >= 0 for v in parts.values())
    # The parts add up to the allocated time this test measured, within 2 %.
    assert abs(sum(parts.values()) - measured) <= 0.02 * measured, (sum(parts.values()), measured)
    # Lost work = steps redone x the step time measured from the job's own log, within 10 %.
    by_run = step_times(log)
    deltas = [b[1] - a[1] for run in by_run.values() for a, b in zip(run, run[1:], strict=False)
              if b[0] == a[0] + 1]
    step = statistics.median(deltas)
    assert d["steps_lost"] == redone
    assert abs(parts["lost_work"] - redone * step) <= 0.10 * redone * step, (
        parts["lost_work"], redone, step)
    # Each cause where the scenario put it.
    assert STALL_FOR - 1.5 <= parts["stall"] <= STALL_FOR + 6, parts["stall"]
    assert parts["requeue_wait"] > 0 and parts["drained_node"] > 2 * 5  # two hangs on dead nodes
    assert parts["restart"] > 0 and parts["checkpoint_save"] > 0
    assert parts["productive"] >= 0.9 * STEPS * step
    runs = d["runs"]
    assert [x["resume_step"] for x in runs] == [None, 10, newest - EVERY]
    assert runs[0]["steps_lost"] == last0 - 10 and runs[1]["steps_lost"] == last1 - newest + EVERY
    assert victim1 in runs[0]["nodes"] and victim2 in runs[1]["nodes"]
    assert 0 < d["ettr"] < 1
    # Stored once: the fleet report still has one job, per node too.
    r = run_sg("goodput", "--since", "1h", "--by", "node", "--json", env=env)
    fleet = json.loads(r.stdout)
    assert r.returncode == 0 and set(fleet["groups"]) == {"n1", "n2", "n3", "n4"}, fleet
    assert fleet["groups"][victim1]["jobs"] == 1
