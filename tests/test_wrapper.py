"""`slurmguard run` as a real subprocess around the training-like program (no Slurm needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.helpers import REPO, sg_argv, sg_env
from support.wait import wait_for

TRAIN = str(REPO / "tests" / "train_job.py")


class Job:
    def __init__(self, tmp: Path, steps: int = 20, every: int = 5) -> None:
        self.tmp = tmp
        self.ckpt = tmp / "ckpt"
        self.ckpt.mkdir()
        self.log = tmp / "steps.log"
        self.final = tmp / "final.json"
        self.train = [sys.executable, TRAIN, "--steps", str(steps), "--every", str(every),
                      "--sleep", "0.02", "--ckpt-dir", str(self.ckpt), "--log", str(self.log),
                      "--final", str(self.final)]

    def run(self, *train_args: str, restart: int | None = None, wrapper: tuple[str, ...] = (),
            env_extra: dict[str, str] | None = None, flags: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = sg_env(SLURMGUARD_PROGRESS_INTERVAL="0", SLURM_JOB_ID="4242", **(env_extra or {}))
        env.pop("SLURM_RESTART_COUNT", None)
        if restart is not None:
            env["SLURM_RESTART_COUNT"] = str(restart)
        opts = ("--checkpoint-dir", str(self.ckpt)) if flags else ()
        return subprocess.run(sg_argv("run", *opts, *wrapper, "--", *self.train, *train_args),
                              env=env, capture_output=True, text=True, timeout=timeout)

    def steps(self) -> list[int]:
        return [int(line.split()[0]) for line in self.log.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    job = Job(tmp_path_factory.mktemp("ref"))
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert "starting from the beginning" in r.stderr
    return json.loads(job.final.read_text())


def test_app_error_is_not_requeued(tmp_path: Path) -> None:
    r = Job(tmp_path).run("--fail-at", "7")
    assert r.returncode == 1
    assert "application error: exited 1; not requeued" in r.stderr


@pytest.mark.parametrize("fault", ["--bus-at", "--nccl-at"])
def test_infra_fault_requeues_and_resumes(tmp_path: Path, fault: str,
                                          reference: dict[str, object]) -> None:
    job = Job(tmp_path)
    r = job.run(fault, "13")
    assert r.returncode == 75, r.stderr
    assert "exiting 75 so Slurm requeues" in r.stderr
    assert ("SIGBUS" if fault == "--bus-at" else "NCCL error") in r.stderr
    r = job.run(fault, "13", restart=1)
    assert r.returncode == 0, r.stderr
    assert f"resuming from {job.ckpt}/step-000010 (step 10, manifest)" in r.stderr
    assert json.loads(job.final.read_text()) == reference
    # Steps 11-12 ran twice (lost once, since after the last checkpoint); nothing else did.
    steps = job.steps()
    assert sorted(steps) == sorted(list(range(1, 21)) + [11, 12])
    record = [json.loads(x) for x in (job.ckpt / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    assert [x["verdict"] for x in record] == ["infra", "success"]
    assert record[1]["resumed_from"]["step"] == 10 and record[0]["last_step"] == 12
    assert record[1]["recovery"]["steps_lost_at_least"] == 2
    assert "recovering: previous run reached step 12, resuming from 10" in r.stderr


def test_torn_checkpoint_resumes_from_the_one_before(tmp_path: Path,
                                                     reference: dict[str, object]) -> None:
    job = Job(tmp_path)
    assert job.run("--bus-at", "13").returncode == 75
    (job.ckpt / "step-000010" / "shard1.bin").unlink()  # torn: a shard missing
    r = job.run(restart=1)
    assert r.returncode == 0, r.stderr
    assert "skipping checkpoint" in r.stderr and "shard1.bin is missing" in r.stderr
    assert "resuming from" in r.stderr and "step-000005 (step 5" in r.stderr
    assert json.loads(job.final.read_text()) == reference


def test_requeue_cap(tmp_path: Path) -> None:
    job = Job(tmp_path)
    r = job.run("--bus-at", "3", "--fault-restart", "2", restart=2, wrapper=("--max-requeues", "2"))
    assert r.returncode == 7
    assert "already requeued 2 times (--max-requeues 2): not requeueing again" in r.stderr
    before = job.steps()
    r = job.run(restart=3, wrapper=("--max-requeues", "2"))
    assert r.returncode == 7
    assert r.stderr.strip().splitlines()[-1].startswith("slurmguard: error: job was requeued 3 times")
    assert job.steps() == before  # the command never started


def test_stall_requeue(tmp_path: Path) -> None:
    job = Job(tmp_path)
    t0 = time.monotonic()
    r = job.run("--stall-at", "4", wrapper=("--stall-timeout", "1", "--stall-action", "requeue",
                                             "--grace", "5"))
    assert r.returncode == 75, r.stderr
    assert "stall: no step reported for 1s (last step 3" in r.stderr
    assert time.monotonic() - t0 < 20


def test_sigusr1_checkpoints_and_requeues(tmp_path: Path, reference: dict[str, object]) -> None:
    job = Job(tmp_path, steps=400)
    env = sg_env()
    env.pop("SLURM_RESTART_COUNT", None)
    p = subprocess.Popen(sg_argv("run", "--checkpoint-dir", str(job.ckpt), "--", *job.train),
                         env=env, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: job.log.exists() and len(job.steps()) >= 7, 30, interval=0.05,
             what="7 training steps")
    p.send_signal(signal.SIGUSR1)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 75, err
    last = job.steps()[-1]
    assert (job.ckpt / f"step-{last:06d}" / ".slurmguard-manifest.json").exists()


def test_sigterm_forwarded_then_killed_after_grace(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text("import signal, time, sys\n"
                      "signal.signal(signal.SIGTERM, lambda *a: print('got TERM', flush=True))\n"
                      "print('ready', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen(sg_argv("run", "--grace", "1", "--", sys.executable, str(script)),
                         env=sg_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert "got TERM" in out
    assert "did not stop within 1s" in err
    assert p.returncode == 137  # SIGKILL: cancelled, passed through, not 75
    assert time.monotonic() - t0 < 10


def test_env_vars_behave_like_flags(tmp_path: Path) -> None:
    job = Job(tmp_path)
    env = {"SLURMGUARD_CHECKPOINT_DIR": str(job.ckpt), "SLURMGUARD_MAX_REQUEUES": "0"}
    r = job.run("--bus-at", "8", env_extra=env, flags=False)
    assert r.returncode == 7 and "--max-requeues 0" in r.stderr
    r = job.run(env_extra={**env, "SLURMGUARD_MAX_REQUEUES": "1"}, flags=False, restart=1)
    assert r.returncode == 0 and "resuming from" in r.stderr and "step 5," in r.stderr
    r = job.run(env_extra={**env, "SLURMGUARD_RESUME": "off"}, flags=False)
    assert r.returncode == 0 and "resuming" not in r.stderr


@pytest.mark.parametrize("args,env,needle", [
    (("--checkpoint-dir", "rel/dir", "--", "true"), {}, "--checkpoint-dir: expected an absolute path"),
    (("--checkpoint-dir", "/nonexistent/x", "--", "true"), {}, "does not exist"),
    (("--", "true"), {"SLURM_RESTART_COUNT": "lots"}, "SLURM_RESTART_COUNT: expected a count, got 'lots'"),
    ((), {}, "no command given"),
    (("--", "/nonexistent/prog"), {}, "cannot start '/nonexistent/prog'"),
])
def test_bad_input_one_line(args: tuple[str, ...], env: dict[str, str], needle: str) -> None:
    r = subprocess.run(sg_argv("run", *args), env=sg_env(**env), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 6, r.stderr
    assert r.stderr.count("\n") == 1 and needle in r.stderr and "Traceback" not in r.stderr


def test_show_checkpoint(tmp_path: Path) -> None:
    job = Job(tmp_path)
    assert job.run("--bus-at", "12").returncode == 75
    r = subprocess.run(sg_argv("run", "--checkpoint-dir", str(job.ckpt), "--show-checkpoint"),
                       env=sg_env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["latest"]["step"] == 10 and [c["step"] for c in doc["complete"]] == [10, 5]


def test_progress_is_silent_without_wrapper(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLURMGUARD_PROGRESS"}
    env["PYTHONPATH"] = str(REPO)
    code = "from slurmguard import progress; progress.step(1); progress.checkpoint_saved('/x', 1)"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=30).returncode == 0
    env["SLURMGUARD_PROGRESS"] = str(tmp_path / "nodir" / "p.jsonl")  # unwritable: warn once
    r = subprocess.run([sys.executable, "-c", code], env=env, timeout=30, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.count("cannot report") == 1


def test_progress_reports_are_throttled(tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(REPO), SLURMGUARD_PROGRESS=str(out), SLURMGUARD_PROGRESS_INTERVAL="30",
               SLURMD_NODENAME="n7", SLURM_PROCID="3")
    code = ("from slurmguard import progress\n"
            "for i in range(1, 1001): progress.step(i)\n"
            "progress.checkpoint_saved('/c/1000', 1000)\n")
    subprocess.run([sys.executable, "-c", code], env=env, timeout=30, check=True)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["ev"], x["step"]) for x in lines] == [("step", 1), ("ckpt", 1000)]
    assert lines[0]["node"] == "n7" and lines[0]["rank"] == 3


def test_the_command_starts_before_the_config_and_a_late_fault_never_stops_it(tmp_path, capsys):
    """What the run needs only once its command runs (`late`: the config's drain watch and
    reporters) is built after the command started (`late` waits for the command's first
    instant: asked before the command's start, it would wait in vain and fail otherwise);
    if building it fails, that is said once and the command runs to its end."""
    from slurmguard.job import wrapper

    marker = tmp_path / "started"

    def late() -> dict:
        wait_for(marker.exists, 30, interval=0.01, what="the command's start")
        raise RuntimeError("serve's client is broken")

    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close(); import time; time.sleep(0.3)"]
    code = wrapper.run(wrapper.RunOptions(command=cmd, late=late,
                                          env=dict(os.environ, SLURM_JOB_ID="1")))
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("drain notices and slow-node reports off: RuntimeError: serve's client "
                     "is broken") == 1, err
