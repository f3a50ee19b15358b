"""Support for the drain-notice tests and benchmark: a 3-node cluster with serve, the requeue
watcher and a 2-node training job (tests/train_job.py) under `slurmguard run`; drain one of
its nodes while it runs and read what happened (steps, notices, runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slurmguard.nodeset import expand
from support.helpers import REPO, sg_argv, sg_env
from support.requeue_support import Watcher, log_lines
from support.sgserve import Serve, job_token_line, new_store, write_config
from support.wait import wait_for

TRAIN = REPO / "tests" / "train_job.py"


class Setup:
    """The cluster's side: store, serve (unless ``serve=False``), the requeue watcher."""

    def __init__(self, factory: Any, tmp: Path, *, serve: bool = True,
                 notice: str = ("interval = 0.5\nslurm_interval = 3.0\n"
                                "slurm_interval_max = 3.0"), hooks: str = "",
                 extra: str = "", policy: bool = False, accounting: Any = None) -> None:
        """``hooks``: more ``[hooks]`` keys; ``extra``: more sections (the node checks);
        ``policy``: serve's fleet policy (its /permit, and the ledger of the hooks' drains);
        ``accounting``: a running slurmdbd (sacct then knows every run's nodes)."""
        from support.pgserver import free_port

        self.tmp = tmp
        self.c = factory(nodes=3, extra_conf=["RequeueExit=75"], accounting=accounting)
        port = free_port()
        url = new_store(tmp)
        if "job_token_file" not in notice:  # the wrappers' credential for /drains
            notice = f"{notice}\n{job_token_line(tmp)}"
        self.cfg = write_config(tmp, store_url=url, port=port, extra=(
            f'{hooks}\n[requeue]\nstate_file = "{tmp / "watch.json"}"\ninterval = 0.5\n'
            f'[goodput]\nrun_dirs = ["{tmp}/*/ckpt"]\n'
            f'[notice]\nserve_url = "http://127.0.0.1:{port}"\n{notice}\n{extra}'),
            serve_extra="" if policy else "policy = false")
        self.serve = Serve(self.cfg, port, env={"SLURM_CONF": str(self.c.conf_path)})
        if serve:
            # serve's start (its imports, the store) outlasted 30 s at load 1,000 on 2 cores
            # (beside the 10,000-node scale run): a deadline for a dead serve, not a slow one
            self.serve.start(timeout=120)
        # Every step reported: the wrapper's count of steps to redo is then exact.
        self.c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(self.cfg),
                          SLURMGUARD_PROGRESS_INTERVAL="0")
        try:  # the watcher polling before any job starts (its docstring says why)
            self.watcher = Watcher(self.c, self.cfg, state_file=tmp / "watch.json")
        except AssertionError:
            self.serve.stop()
            raise

    def stop(self) -> list[dict[str, Any]]:
        if self.serve.proc is not None:
            self.serve.stop()
        return self.watcher.stop()


class Job:
    """One 2-node training job: its files, submission and what it left behind."""

    def __init__(self, setup: Setup, name: str, *, steps: int = 60, every: int = 20,
                 sleep: float = 0.25, wrapper: str = "", train: str = "--notice-poll") -> None:
        self.s, self.d = setup, setup.tmp / name
        self.ck = self.d / "ckpt"
        self.ck.mkdir(parents=True)
        self.log, self.told, self.final = self.d / "steps.log", self.d / "told", self.d / "final"
        self.train = (f"{sys.executable} {TRAIN} --steps {steps} --every {every} --sleep {sleep} "
                      f"--ckpt-dir {self.ck} --log {self.log} --final {self.final} "
                      f"--told {self.told} {train}")
        self.wrapper = wrapper
        self.steps, self.every = steps, every
        self.jid = ""

    def submit(self) -> str:
        script = (f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir {self.ck} "
                  f"--max-requeues 2 {self.wrapper} -- srun {self.train}\n")
        self.jid = self.s.c.sbatch(script, "-N2", "--requeue", f"--output={self.d}/job-%j.out",
                                  "--open-mode=append")
        self.s.c.wait_job(self.jid, ["RUNNING"], timeout=60)
        return self.jid

    def victim(self) -> str:
        job = self.s.c.job(self.jid)
        return next(n for n in expand(job["NodeList"]) if n != job["BatchHost"])

    def drain(self, node: str, reason: str) -> float:
        t = time.time()
        self.s.c.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")
        return t

    def wait_steps(self, n: int, timeout: float = 90) -> None:
        wait_for(lambda: len(log_lines(self.log)) >= n, timeout, what=f"{n} steps")

    def finish(self, timeout: float = 240) -> None:
        self.s.c.wait_job(self.jid, ["COMPLETED"], timeout=timeout)

    def runs(self) -> list[dict[str, Any]]:
        path = self.ck / ".slurmguard" / "runs.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def told_lines(self) -> list[tuple[str, int, float]]:
        if not self.told.exists():
            return []
        return [(a, int(b), float(c)) for a, b, c in
                (line.split() for line in self.told.read_text().splitlines())]

    def output(self) -> str:
        return "".join(p.read_text() for p in sorted(self.d.glob("job-*.out")))

    def redone(self) -> int:
        """Steps computed more than once (work lost to the fault)."""
        seen = [s for s, _, _ in log_lines(self.log)]
        return len(seen) - len(set(seen))


def reference_state(tmp: Path, steps: int, every: int) -> dict[str, Any]:
    d = tmp / "reference"
    (d / "ckpt").mkdir(parents=True)
    env = {k: v for k, v in sg_env().items() if not k.startswith("SLURM")}
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--every", str(every),
                    "--sleep", "0", "--ckpt-dir", str(d / "ckpt"), "--log", str(d / "log"),
                    "--final", str(d / "final")], env=env, check=True, timeout=60)
    return json.loads((d / "final").read_text())


def sg(setup: Setup, *args: str, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sg_argv("-c", str(setup.cfg), *args),
                          env=sg_env(SLURM_CONF=str(setup.c.conf_path), **(env or {})),
                          capture_output=True, text=True, timeout=180)
