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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
