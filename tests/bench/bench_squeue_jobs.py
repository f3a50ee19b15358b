"""What the requeue watcher's poll costs at N jobs in the queue: `squeue --json` (what
`slurmguard requeue watch` ran every requeue.interval, 2 s), the same with a state filter,
a plain `squeue -o` of three fields, and the watcher's `squeue -h -O` (SlurmCLI.queue, what
it runs now); each run's wall time, the adapter's parse time, the output's size and
slurmctld's average time for the REQUEST_JOB_INFO it serves (sdiag).

Run by hand as root with Slurm and munge: `python tests/bench/bench_squeue_jobs.py [N]`
(default 1000 held one-line jobs on a 2-node test cluster). docs/requeue.md has a run.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from support import slurmcluster  # noqa: E402

from slurmguard.adapters.slurm.formatted import SQUEUE_FORMAT, parse_squeue_brief  # noqa: E402
from slurmguard.adapters.slurm.parse import parse_squeue_json  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
c = slurmcluster.Cluster.start(tempfile.mkdtemp(), nodes=2, extra_conf=["MaxJobCount=20000"])
try:
    e = {**os.environ, "SLURM_CONF": str(c.conf_path)}
    def sub(i):
        return subprocess.run(["sbatch", "--hold", "-o", "/dev/null", "--wrap", "sleep 1"], env=e, capture_output=True, text=True).returncode
    t = time.time()
    with ThreadPoolExecutor(8) as p:
        rcs = list(p.map(sub, range(N)))
    print("submitted", rcs.count(0), "in", round(time.time() - t, 1), "s", flush=True)
    for args in (["squeue", "--json"], ["squeue", "--json", "-t", "RUNNING"],
                 ["squeue", "-h", "-o", "%i %T %N", "-t", "R,PD"],
                 ["squeue", "-h", "-O", SQUEUE_FORMAT]):  # the watcher's read (SlurmCLI.queue)
        walls, parses, size = [], [], 0
        subprocess.run(["sdiag", "--reset"], env=e, capture_output=True)
        for _ in range(5):
            t = time.perf_counter()
            r = subprocess.run(args, env=e, capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            size = len(r.stdout)
            parser = (parse_squeue_json if "--json" in args else
                      parse_squeue_brief if "-O" in args else None)
            if parser is not None:
                t = time.perf_counter()
                parser(r.stdout)
                parses.append(time.perf_counter() - t)
        sd = subprocess.run(["sdiag"], env=e, capture_output=True, text=True).stdout
        m = re.search(r"REQUEST_JOB_INFO\s*\(\s*\d+\)\s*count:(\d+)\s*ave_time:(\d+)", sd)
        print(" ".join(args), f"(N={N}): wall median {statistics.median(walls)*1000:.0f} ms, parse {statistics.median(parses)*1000 if parses else 0:.0f} ms, {size/1e6:.2f} MB, slurmctld JOB_INFO ave_time {m.group(2) if m else '?'} us; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
finally:
    c.stop()
