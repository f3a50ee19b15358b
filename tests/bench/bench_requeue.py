"""Benchmark: seconds from Slurm's requeue of a job (after its node died) to the job running
again, with and without `slurmguard requeue watch`. Median over TRIALS jobs.

Run by hand (root, Slurm installed):  python tests/bench/bench_requeue.py [--trials 5]

Each mode gets its own real test cluster (tests/support/slurmcluster.py) with 2*TRIALS nodes: TRIALS
one-node `--requeue` jobs start on the first half, their nodes are lost at once (slurmd,
slurmstepd and job processes killed, tests/support/requeue_support.py), and every job is timed from
the poll that first shows it PENDING with Restarts=1 to the poll that shows it RUNNING again
(on a spare node). The polls run every 0.1 s, so each figure is good to about 0.2 s. With
the watcher the trials run one after another (independent, each at a random phase of the
watcher's poll); without it they run at once, since each waits ~2.5 min for Slurm, so those 5
share one requeue moment.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))

from support.helpers import sg_argv, sg_env  # noqa: E402
from support.requeue_support import lose_node  # noqa: E402
from support.slurmcluster import Cluster  # noqa: E402

from slurmguard.adapters.slurm.parse import parse_show_job_oneliner  # noqa: E402


def jobs(c: Cluster) -> dict[str, dict[str, str]]:
    r = c.run("scontrol", "show", "job", "-o", check=False)
    if "No jobs in the system" in r.stdout:
        return {}
    return {j["JobId"]: j for j in parse_show_job_oneliner(r.stdout)} if r.returncode == 0 else {}


def _run_batch(c: Cluster, n: int, timeout: float) -> list[float]:
    before = set(jobs(c))
    for _ in range(n):
        c.sbatch("#!/bin/sh\nsleep 1000\n", "-N1", "--requeue")
    deadline = time.monotonic() + 60
    while True:
        mine = {k: v for k, v in jobs(c).items() if k not in before}
        if len(mine) == n and all(j.get("JobState") == "RUNNING" for j in mine.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("jobs did not start")
        time.sleep(0.2)
    time.sleep(1.5 + random.random())  # let the watcher see them running; random poll phase
    for j in mine.values():
        lose_node(c, j["NodeList"])
    requeued: dict[str, float] = {}
    running: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(running) < n and time.monotonic() < deadline:
        now = time.monotonic()
        for jid, j in jobs(c).items():
            if jid not in mine:
                continue
            if j.get("Restarts") == "1" and j.get("JobState") == "PENDING":
                requeued.setdefault(jid, now)
            elif j.get("Restarts") == "1" and j.get("JobState") == "RUNNING" and jid in requeued:
                running.setdefault(jid, now)
        time.sleep(0.1)
    for jid in mine:
        c.run("scancel", jid, check=False)
    return [running[j] - requeued[j] for j in running]


def trial(tmp: Path, n: int, watcher: bool, interval: float, timeout: float,
          sequential: bool) -> list[float]:
    c = Cluster.start(tmp, nodes=2 * n)
    w = None
    try:
        if watcher:
            cfg = tmp / "sg.toml"
            cfg.write_text(f'[requeue]\nstate_file = ""\ninterval = {interval}\n'
                           f'[store]\npath = "{tmp / "none.db"}"\n')
            w = subprocess.Popen(sg_argv("requeue", "watch"), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL,
                                 env=sg_env(SLURM_CONF=str(c.conf_path), SLURMGUARD_CONFIG=str(cfg)))
        # With the watcher, one job after another (independent trials, each at a random phase
        # of the watcher's poll); without it, all at once (each waits ~2.5 min for Slurm).
        batches = [[i] for i in range(n)] if sequential else [list(range(n))]
        times: list[float] = []
        for batch in batches:
            times += _run_batch(c, len(batch), timeout)
        return times
    finally:
        if w is not None:
            w.send_signal(signal.SIGINT)
            w.wait(timeout=10)
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--interval", type=float, default=1.0, help="watcher poll interval")
    a = ap.parse_args()
    for watcher in (True, False):
        with tempfile.TemporaryDirectory() as d:
            times = trial(Path(d), a.trials, watcher, a.interval,
                          timeout=60 if watcher else 240, sequential=watcher)
        label = f"with watcher (interval {a.interval:g}s)" if watcher else "without watcher"
        if len(times) < a.trials:
            print(f"{label}: only {len(times)} of {a.trials} jobs ran again in time")
        if times:
            print(f"requeue -> running, {label}: median {statistics.median(times):.1f}s "
                  f"over {len(times)} jobs (min {min(times):.1f}s, max {max(times):.1f}s)",
                  flush=True)


if __name__ == "__main__":
    main()
