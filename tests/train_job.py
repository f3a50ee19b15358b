#!/usr/bin/env python3
"""A training-like program for the requeue tests (no GPU, standard library + slurmguard.progress).

Numbered steps; a deterministic "model state" (a hash chain over the steps), so a run that
resumed correctly ends in exactly the state of an uninterrupted one; a checkpoint every K steps
in slurmguard's manifest format; one log line per step (step, restart, node, the time it ended).
Only rank 0 (SLURM_PROCID) writes checkpoints, the log and the final state; every rank reports
progress.

Fault switches (each fires only on the run whose SLURM_RESTART_COUNT matches --fault-restart):
  --fail-at N     exit 1 at step N (an application bug)
  --bus-at N      die by SIGBUS at step N (a hardware memory error)
  --nccl-at N     print an NCCL system error and exit 1 at step N
  --stall-at N    stop making progress at step N (sleep --stall-for seconds, default 3600)
  --last-save N   no periodic checkpoint after step N: after it, only a save a drain notice
                  asks for (--notice-poll), however late the notice or the kill comes
SIGUSR1: write a checkpoint now and exit 75 (asks the wrapper for a requeue).
--notice-poll: ask progress.should_checkpoint() after every step; when true, write a checkpoint
  now and carry on (the wrapper ends the run once it is complete).
--told FILE: append "<how> <step> <time>" when the process learns of a drain notice.
--slow-node NAME --slow-sleep S: steps on node NAME take S seconds more (a slow node);
  with --no-barrier the ranks do not wait for each other.
--fault-dir DIR: what a hardware fault does to the job (the fleet day's stand-in for a CUDA
  or NCCL error): before each step, DIR/NODE for any node of the job's allocation says
  "crash" (print an NCCL system error, exit 1, as a collective over a lost GPU or link does)
  or "slow F" (the step takes F times as long: a throttled GPU, a link down to fewer lanes);
  while DIR/ALL exists (a shared filesystem hung) the step waits.
--began FILE: append "<first instant> <job id> <restart>" (rank 0), the program's start.
--resume-latest: without `slurmguard run`'s SLURMGUARD_RESUME_FROM, resume from the newest
  complete checkpoint in --ckpt-dir itself (what a training script does on its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time

BEGAN = time.time()  # the program's first instant, before its own imports (--began)
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's slurmguard
from slurmguard import progress  # noqa: E402
from slurmguard.job.checkpoint import scan, write_manifest  # noqa: E402
from slurmguard.nodeset import expand  # noqa: E402


def fault_effect(fault_dir: str, nodes: list[str]) -> tuple[str, float]:
    """("crash", 0) / ("slow", factor) / ("stall", 0) / ("", 1) from the fault files."""
    d = Path(fault_dir)
    if (d / "ALL").exists():
        return "stall", 0.0
    slow = 1.0
    for n in nodes:
        try:
            what = (d / n).read_text().split()
        except OSError:
            continue
        if what and what[0] == "crash":
            return "crash", 0.0
        if len(what) == 2 and what[0] == "slow":
            slow = max(slow, float(what[1]))
    return ("slow", slow) if slow > 1.0 else ("", 1.0)


def advance(state: str, step: int) -> str:
    return hashlib.sha256(f"{state}:{step}".encode()).hexdigest()


def save(root: Path, step: int, state: str) -> Path:
    d = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    tmp.mkdir(parents=True)
    (tmp / "state.json").write_text(json.dumps({"step": step, "state": state}))
    for i in range(2):  # two "shards", as a sharded save would have
        (tmp / f"shard{i}.bin").write_bytes(hashlib.sha256(f"{state}/{i}".encode()).digest() * 64)
    if d.exists():  # a step redone after a crash: replace its old save
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
    os.rename(tmp, d)
    write_manifest(d, step)  # last: the save is complete only once this exists
    return d


def barrier(d: Path, rank: int, ntasks: int, step: int, flag: bool = False) -> bool:
    """Wait until every rank finished ``step``, as an all-reduce would: a dead peer blocks all.
    Returns whether any rank brought ``flag`` to this step (an all-reduce of a stop flag, as
    real training code does before it acts on a signal: every rank decides at the same step;
    a rank acting on its own signal alone would leave the others waiting for it forever)."""
    tmp = d / f".r{rank}-{step}.tmp"
    tmp.write_text("1" if flag else "0")
    os.replace(tmp, d / f"r{rank}-{step}")
    while True:
        flags = []
        for r in range(ntasks):
            try:
                flags.append((d / f"r{r}-{step}").read_text() == "1")
            except OSError:
                break
        if len(flags) == ntasks:
            return any(flags)
        time.sleep(0.01)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--sleep", type=float, default=0.1)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--final", required=True)
    for f in ("fail", "bus", "nccl", "stall"):
        ap.add_argument(f"--{f}-at", type=int, default=-1)
    ap.add_argument("--stall-for", type=float, default=3600.0)
    ap.add_argument("--last-save", type=int, default=-1)
    ap.add_argument("--fault-restart", type=int, default=0)
    ap.add_argument("--notice-poll", action="store_true")
    ap.add_argument("--told", default="")
    ap.add_argument("--slow-node", default="")
    ap.add_argument("--slow-sleep", type=float, default=0.0)
    ap.add_argument("--fault-dir", default="")
    ap.add_argument("--resume-latest", action="store_true")
    ap.add_argument("--began", default="")
    ap.add_argument("--no-barrier", action="store_true")  # ranks step on their own (a slow
    # node then shows in its own step times, as in pipeline stages or independent workers)
    a = ap.parse_args()
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    faulty = restart == a.fault_restart
    if a.began and rank == 0:
        with open(a.began, "a") as fh:
            fh.write(f"{BEGAN:.6f} {os.environ.get('SLURM_JOB_ID', 'local')} {restart}\n")
    root = Path(a.ckpt_dir)
    state, step = "init", 0
    if progress.resume_from():
        saved = json.loads((Path(progress.resume_from()) / "state.json").read_text())
        state, step = saved["state"], saved["step"]
        assert progress.resume_step() == step
    elif a.resume_latest and root.is_dir():
        latest = scan(root.resolve()).latest
        if latest is not None:
            saved = json.loads((Path(latest.path) / "state.json").read_text())
            state, step = saved["state"], saved["step"]
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    job_nodes = expand(nodelist) if a.fault_dir and nodelist else []
    ntasks = int(os.environ.get("SLURM_NTASKS", "1"))
    bdir = root / f".barrier-{os.environ.get('SLURM_JOB_ID', 'local')}-{restart}"
    if a.no_barrier:
        ntasks = 1
    if ntasks > 1:
        bdir.mkdir(parents=True, exist_ok=True)
    usr1: list[float] = []
    signal.signal(signal.SIGUSR1, lambda *_: usr1.append(time.time()))
    node = os.environ.get("SLURMD_NODENAME", "-")

    def told(how: str, at: float) -> None:
        if a.told and rank == 0:
            with open(a.told, "a") as fh:
                fh.write(f"{how} {step} {at:.3f}\n")

    while step < a.steps:
        step += 1
        state = advance(state, step)
        slow = 1.0
        if a.fault_dir:
            effect, slow = fault_effect(a.fault_dir, job_nodes)
            while effect == "stall":
                time.sleep(0.2)
                effect, slow = fault_effect(a.fault_dir, job_nodes)
            if effect == "crash":
                print("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system "
                      "error (a fault on this job's nodes)", file=sys.stderr, flush=True)
                return 1
        time.sleep(a.sleep * slow + (a.slow_sleep if node == a.slow_node else 0.0))
        if faulty and step == a.stall_at:
            time.sleep(a.stall_for)
        if faulty and step == a.fail_at:
            print(f"train_job: ValueError at step {step}", file=sys.stderr)
            return 1
        if faulty and step == a.bus_at:
            os.kill(os.getpid(), signal.SIGBUS)
        if faulty and step == a.nccl_at:
            print("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error",
                  file=sys.stderr, flush=True)
            return 1
        stop = bool(usr1)
        if ntasks > 1:
            stop = barrier(bdir, rank, ntasks, step, stop)
        if rank == 0:
            with open(a.log, "a") as fh:
                fh.write(f"{step} {restart} {os.environ.get('SLURMD_NODENAME', '-')} "
                         f"{time.time():.3f}\n")
        progress.step(step)
        now_asked = a.notice_poll and progress.should_checkpoint()
        if now_asked:
            told("poll", time.time())
        if stop:
            told("signal", usr1[0] if usr1 else time.time())
        periodic = step % a.every == 0 and not (faulty and 0 <= a.last_save < step)
        if rank == 0 and (periodic or stop or now_asked):
            with progress.saving(str(root / f"step-{step:06d}"), step):
                save(root, step, state)
        if stop:
            return 75
    if rank == 0:
        Path(a.final).write_text(json.dumps({"step": step, "state": state}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
