"""What the node_exporter textfile adds to a prolog (target: <= 2 ms).

Run by hand: `python tests/bench/bench_textfile.py [ROUNDS]` (default 40). Two measurements:

1. in-process: the hook's own write (`slurmguard.node.hooks._write_metrics` path:
   `textfile.write_hook` with the 11 default prolog checks, previous file read, rename),
   ROUNDS x 50 calls, median per call; the module's import time is measured once in a fresh
   interpreter (`-X importtime`) and added;
2. whole processes: `slurmguard prolog` with `metrics.textfile_dir` set and unset,
   interleaved (one of each per round, so load on the shared machine hits both alike);
   median of each and the median of the per-round differences.

The prolog runs the 11 default check names against a healthy stand-in node (faultsite
checks replace hardware: the cost of the checks is not what is measured here).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(REPO))

from slurmguard.metrics import textfile  # noqa: E402

CHECKS = ["gpu-count", "gpu-lost", "gpu-ecc", "gpu-remap", "gpu-thermal", "gpu-nvlink",
          "gpu-xid", "ib-link", "fs-mount", "host-memory", "host-cpus"]


def in_process(tdir: str, rounds: int) -> float:
    results = [(c, "healthy") for c in CHECKS]
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(50):
            assert textfile.write_hook(tdir, "prolog", results=results, verdict="pass",
                                       duration=0.41) is None
        per_call.append((time.perf_counter() - t0) / 50)
    return statistics.median(per_call)


def _env(**extra: str) -> dict[str, str]:
    # An installed slurmguard has its .pyc files (pip compiles them); so does this run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def import_cost(n: int = 7) -> float:
    """Self time of the modules the write imports beyond what a prolog has loaded anyway
    (median of ``n`` fresh interpreters, after one that writes the .pyc files)."""
    costs = []
    for _ in range(n + 1):
        p = subprocess.run([sys.executable, "-X", "importtime", "-c",
                            "import slurmguard.node.hooks, slurmguard.metrics.textfile"],
                           env=_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, check=True)
        total = 0
        for line in p.stderr.splitlines():
            name = line.rsplit("|", 1)[-1].strip()
            if name in ("slurmguard.metrics", "slurmguard.metrics.textfile"):
                total += int(line.split(":", 1)[1].split("|")[0])  # self microseconds
        costs.append(total / 1e6)
    return statistics.median(costs[1:])


def processes(t: Path, rounds: int) -> tuple[list[float], list[float]]:
    base = f"""
[slurm]
scontrol = "{t}/no-scontrol"
[hooks]
state_dir = "{t}/state"
prolog = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
"""
    (t / "off.toml").write_text(base)
    (t / "on.toml").write_text(base + f'[metrics]\ntextfile_dir = "{t}/textfile"\n')
    (t / "textfile").mkdir()
    argv = [sys.executable, "-m", "slurmguard", "prolog"]
    envs = {k: _env(PYTHONPATH=f"{REPO}{os.pathsep}{TESTS}",
                    SLURMGUARD_CONFIG=str(t / f"{k}.toml"), SLURMD_NODENAME="bench1")
            for k in ("off", "on")}
    for env in envs.values():
        subprocess.run(argv, env=env, capture_output=True, check=True)  # warm caches
    off, on = [], []
    for _ in range(rounds):
        for key, out in (("off", off), ("on", on)):
            t0 = time.perf_counter()
            p = subprocess.run(argv, env=envs[key], capture_output=True, text=True)
            out.append(time.perf_counter() - t0)
            if p.returncode != 0:
                raise SystemExit(f"prolog exited {p.returncode}: {p.stderr}")
    return off, on


def main(rounds: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "tf").mkdir()
        write = in_process(str(t / "tf"), rounds)
        imp = import_cost()
        print(f"textfile write, in process (11 checks): median {write * 1e3:.3f} ms per call "
              f"({rounds} x 50 calls)")
        print(f"import slurmguard.metrics + .textfile (self time, .pyc present): {imp * 1e3:.3f} ms")
        print(f"=> added to the prolog: {(write + imp) * 1e3:.3f} ms")
        off, on = processes(t, rounds)
        diffs = [b - a for a, b in zip(off, on, strict=True)]
        print(f"whole `slurmguard prolog`, {rounds} interleaved rounds: textfile off median "
              f"{statistics.median(off) * 1e3:.1f} ms, on {statistics.median(on) * 1e3:.1f} ms, "
              f"median difference {statistics.median(diffs) * 1e3:+.2f} ms "
              f"(process noise on a shared machine: stdev off {statistics.stdev(off) * 1e3:.1f} ms)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
