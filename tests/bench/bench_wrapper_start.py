"""What `slurmguard run` adds to a job's start: the wrapper's own start, against bare Python.

Run by hand: `python tests/bench/bench_wrapper_start.py [RUNS]` (default 21). Each variant is
started RUNS times in turn (interleaved, so a change of the machine's load hits every variant
alike) and the median wall time from exec to exit is printed:

* python -c pass:             the interpreter alone (what any Python job pays)
* run -- true, bytecode:      `python -m slurmguard run -- true` with the package's bytecode
                              compiled (what a pip install leaves)
* run -- true, no bytecode:   the same from a copy of the package without __pycache__, with
                              PYTHONDONTWRITEBYTECODE=1 (every start compiles the modules it
                              imports: what the fleet day measured on these machines until
                              the scale harness compiled the package first)
* import wrapper only:        `import slurmguard.job.wrapper` with bytecode (the wrapper's
                              modules without the CLI)

With ``--base REF`` it measures instead what a job waits for: from the wrapper's exec to its
command's first instant (the command is `date +%s.%N`), for this tree and for REF (exported
with `git archive`, compiled), both with a node's config (serve's URL, a job token) and a
checkpoint directory of 18 complete checkpoints, interleaved:

    python tests/bench/bench_wrapper_start.py 41 --base HEAD~1

The load average is printed before and after: the figures mean something only beside it.
"""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _time(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd="/")
    return time.perf_counter() - t


def main(runs: int) -> None:
    compileall.compile_dir(str(REPO / "slurmguard"), quiet=1)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLURMGUARD_CONFIG")}
    with tempfile.TemporaryDirectory(prefix="sg-wrapstart-") as tmp:
        shutil.copytree(REPO / "slurmguard", Path(tmp) / "slurmguard",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        py = sys.executable
        variants = {
            "python -c pass": ([py, "-c", "pass"], dict(base)),
            "run -- true, bytecode": ([py, "-m", "slurmguard", "run", "--", "true"],
                                      dict(base, PYTHONPATH=str(REPO))),
            "run -- true, no bytecode": ([py, "-m", "slurmguard", "run", "--", "true"],
                                         dict(base, PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1")),
            "import wrapper only": ([py, "-c", "import slurmguard.job.wrapper"],
                                    dict(base, PYTHONPATH=str(REPO))),
        }
        print(f"load before: {os.getloadavg()[0]:.2f}")
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(runs):
            for name, (argv, env) in variants.items():
                times[name].append(_time(argv, env))
        print(f"load after:  {os.getloadavg()[0]:.2f}")
        bare = statistics.median(times["python -c pass"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"{name:<28} median {med * 1000:7.1f} ms  (+{(med - bare) * 1000:6.1f} ms "
                  f"over bare python, {runs} runs)")


def _to_child(argv: list[str], env: dict[str, str]) -> float:
    t = time.time()
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True, cwd="/")
    return float(out.stdout.split()[0]) - t


def to_child(runs: int, base: str) -> None:
    """Exec to the command's first instant, this tree against ``base`` (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="sg-wrapstart-") as tmp:
        t = Path(tmp)
        old = t / "base"
        old.mkdir()
        arch = subprocess.run(["git", "-C", str(REPO), "archive", base, "slurmguard"],
                              check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=arch, check=True)
        for tree in (REPO, old):
            compileall.compile_dir(str(tree / "slurmguard"), quiet=1)
        (t / "token").write_text("job-token\n")
        (t / "token").chmod(0o600)
        (t / "sg.toml").write_text(
            '[serve]\nhost = "127.0.0.1"\nport = 9\n[hooks]\n'
            f'report_url = "http://127.0.0.1:9/ingest"\ntoken_file = "{t}/token"\n'
            f'[notice]\njob_token_file = "{t}/token"\n')
        ck = t / "ck"
        subprocess.run([sys.executable, str(REPO / "tests" / "train_job.py"), "--steps", "180",
                        "--every", "10", "--sleep", "0", "--ckpt-dir", str(ck), "--log",
                        str(t / "steps.log"), "--final", str(t / "final.json")],
                       check=True, stdout=subprocess.DEVNULL)
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        base_env.update(SLURMGUARD_CONFIG=str(t / "sg.toml"), SLURM_JOB_ID="5",
                        SLURM_JOB_NODELIST="n1", SLURMD_NODENAME="n1", SLURM_RESTART_COUNT="1")
        argv = [sys.executable, "-m", "slurmguard", "run", "--checkpoint-dir", str(ck),
                "--max-requeues", "50", "--", "date", "+%s.%N"]
        variants = {"this tree": dict(base_env, PYTHONPATH=str(REPO)),
                    base: dict(base_env, PYTHONPATH=str(old))}
        print(f"load before: {os.getloadavg()[0]:.2f}")
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(runs):
            for name, env in variants.items():
                times[name].append(_to_child(argv, env))
        print(f"load after:  {os.getloadavg()[0]:.2f}")
        for name, ts in times.items():
            print(f"exec to the command's start, {name:<12} median "
                  f"{statistics.median(ts) * 1000:7.1f} ms ({runs} runs)")


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args[0]) if args and args[0].isdigit() else 21
    if "--base" in args:
        to_child(n, args[args.index("--base") + 1])
    else:
        main(n)
