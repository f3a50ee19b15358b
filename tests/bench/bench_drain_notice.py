"""Benchmark: what a drain under a running job costs, with and without drain notices.

Run by hand (root, Slurm installed):
    python tests/bench/bench_drain_notice.py --mode notice    # ~1 min (2 trials)
    python tests/bench/bench_drain_notice.py --mode slurm     # serve down, ~1 min
    python tests/bench/bench_drain_notice.py --mode none      # no notice, ~2 min

Each trial: a fresh 3-node test cluster (tests/support/slurmcluster.py) with serve, the requeue watcher
and a 2-node training job (tests/train_job.py: 0.2 s steps, a checkpoint every 20 steps, a
barrier per step); the non-batch node is drained (as an admin would) 4 steps after a periodic
checkpoint. Measured:

- notice latency: drain -> the training process told (its ``should_checkpoint()`` turned
  true, or its SIGUSR1 arrived), from the program's own log of when;
- steps redone: steps computed twice (the job's step log);
- drain -> running elsewhere: the drain -> the next run's wrapper start (runs.jsonl).

``--mode notice``: the program polls ``progress.should_checkpoint()`` (serve answers).
``--mode slurm``: serve is down; the program asked for ``--notice-signal USR1`` and checkpoints
and exits on it; the wrapper asks Slurm every ``notice.slurm_interval`` (3 s here).
``--mode none``: ``--no-drain-notice``; the drained node then fails (slurmd, steps and tasks
killed) ``--fail-after`` seconds after the drain, as the fault that made it drain would.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))

from support.drain_notice import Job, Setup  # noqa: E402
from support.requeue_support import lose_node  # noqa: E402
from support.slurmcluster import Cluster  # noqa: E402

EVERY = 20


def trial(mode: str, fail_after: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sg-bench-notice-") as d:
        tmp = Path(d)
        clusters: list[Cluster] = []

        def factory(**kw: object) -> Cluster:
            c = Cluster.start(tmp / f"c{len(clusters)}", **kw)  # type: ignore[arg-type]
            clusters.append(c)
            return c

        s = Setup(factory, tmp, serve=mode != "slurm")
        try:
            wrapper = {"notice": "", "slurm": "--notice-signal USR1",
                       "none": "--no-drain-notice"}[mode]
            job = Job(s, "job", steps=80, every=EVERY, sleep=0.2, wrapper=wrapper,
                      train="--notice-poll" if mode == "notice" else "")
            job.submit()
            job.wait_steps(EVERY + 4)
            victim = job.victim()
            drained = job.drain(victim, "maintenance: bench")
            if mode == "none":
                time.sleep(fail_after)
                lose_node(s.c, victim)
            job.finish(timeout=300)
        finally:
            s.stop()
            for c in clusters:
                c.stop()
        runs = job.runs()
        told = job.told_lines()
        return {"latency_s": told[0][2] - drained if told else float("nan"),
                "redone": float(job.redone()),
                "elsewhere_s": runs[-1]["started"] - drained if len(runs) > 1 else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["notice", "slurm", "none"], default="notice")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--fail-after", type=float, default=2.0)
    a = ap.parse_args()
    got = []
    for i in range(a.trials):
        r = trial(a.mode, a.fail_after)
        got.append(r)
        print(f"trial {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    for k in got[0]:
        vals = [g[k] for g in got]
        print(f"{a.mode}: {k} median {statistics.median(vals):.2f} "
              f"(min {min(vals):.2f}, max {max(vals):.2f}, {len(vals)} trials)")


if __name__ == "__main__":
    main()
