"""One node's health check: slurmguard's installed HealthCheckProgram against LBNL NHC, on the
same node view of the same test cluster (the fleet day's checks, support/fleet_day.py).

Run by hand: `python tests/bench/bench_healthcheck_vs_nhc.py [RUNS] [--nodes N]` (default 15
runs on 4 nodes). It starts a small scale harness as the fleet day does (the fleet day's check
list, two IB ports a node, serve on PostgreSQL), then runs each node's check RUNS times,
slurmguard's and NHC's in turn (interleaved, so a change of load hits both alike), and prints
the medians of each run's wall time and of its CPU time (user + system of the run and all its
children, from the kernel's rusage), with the host's load average before and after. With
``--profile`` it also prints where slurmguard's CPU goes: `python -X importtime`'s ten
slowest imports and the check runner's own per-check timings.

What it compares is what a site pays on every node every HealthCheckInterval: NHC is bash
reading /proc and sysfs, plus one `nvidia-smi` (here the stand-in); slurmguard is a Python
process that imports its checks, runs them and reports to serve.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from support.fleet_day import fleet_spec  # noqa: E402
from support.nhc_node import NHCNodes, require_nhc  # noqa: E402
from support.scaleharness import ScaleHarness, ScaleSpec  # noqa: E402


def timed(fn) -> tuple[float, float, int]:
    """(wall s, CPU s of the children it ran, rc)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    r = fn()
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", type=int, nargs="?", default=15)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    require_nhc()
    with tempfile.TemporaryDirectory(prefix="sg-hc-nhc-") as tmp:
        spec = fleet_spec(ScaleSpec(nodes=a.nodes, agents=0, replicas=1), slurmguard=True)
        h = ScaleHarness.start(Path(tmp) / "h", spec)
        try:
            nhc = NHCNodes(h, Path(tmp) / "nhc")
            print(f"load before: {os.getloadavg()[0]:.2f}")
            res: dict[str, list[tuple[float, float, int]]] = {"slurmguard": [], "nhc": []}
            for _ in range(a.runs):
                for n in h.nodes:
                    res["slurmguard"].append(timed(lambda n=n: h.run_entry("healthcheck", n)))
                    res["nhc"].append(timed(lambda n=n: nhc.run(n)))
            print(f"load after: {os.getloadavg()[0]:.2f}")
            print(f"{'check':<12} {'runs':>5} {'wall ms':>9} {'CPU ms':>8} {'rc != 0':>8}")
            for k, v in res.items():
                print(f"{k:<12} {len(v):>5} {statistics.median(w for w, _, _ in v) * 1e3:>9.1f} "
                      f"{statistics.median(c for _, c, _ in v) * 1e3:>8.1f} "
                      f"{sum(1 for _, _, rc in v if rc):>8}")
            sg = statistics.median(c for _, c, _ in res["slurmguard"])
            nh = statistics.median(c for _, c, _ in res["nhc"])
            print(f"CPU ratio slurmguard / NHC: {sg / nh:.2f}")
            if a.profile:
                profile(h, h.nodes[0])
        finally:
            h.stop()
    return 0


def profile(h: ScaleHarness, node: str) -> None:
    env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "1", "PYTHONPROFILEIMPORTTIME": "1"}
    r = subprocess.run([h.entry("prolog/slurmguard-healthcheck")], env=env, capture_output=True,
                       text=True, timeout=120)
    rows = []
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:"):].split("|")]
            if parts[0].isdigit():
                rows.append((int(parts[1]), parts[2]))
    print("slowest imports (cumulative us):")
    for us, name in sorted(rows, reverse=True)[:15]:
        print(f"  {us:>8}  {name}")
    # The same run under cProfile: the defaults file's variables, as the entry script sets them.
    env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    out = subprocess.run(["sh", "-c", f". {h.prefix}/etc/default/slurmguard && env"], env=env,
                         capture_output=True, text=True, timeout=30).stdout
    env.update(line.split("=", 1) for line in out.splitlines() if "=" in line)
    import shutil

    if shutil.which("strace"):  # what each run executes: the programs it starts
        tr = h.root / "exec.trace"
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(tr),
                        h.entry("prolog/slurmguard-healthcheck")], env=env, capture_output=True,
                       timeout=120)
        progs = [line.split('execve("', 1)[1].split('"', 1)[0]
                 for line in tr.read_text().splitlines() if 'execve("' in line and "ENOENT" not in line]
        print(f"programs executed by one slurmguard run ({len(progs)}): {', '.join(progs)}")
        nhc = NHCNodes(h, h.root / "nhc-trace")
        tr2 = h.root / "exec-nhc.trace"
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(tr2), "unshare",
                        "--mount", "--uts", "--propagation", "private", "sh", "-c", nhc.script(node)],
                       env=nhc.env(node), capture_output=True, timeout=120)
        progs = [line.split('execve("', 1)[1].split('"', 1)[0]
                 for line in tr2.read_text().splitlines() if 'execve("' in line and "ENOENT" not in line]
        print(f"programs executed by one NHC run ({len(progs)}): {', '.join(progs)}")
    prof = h.root / "healthcheck.prof"
    code = ("import cProfile\n"
            f"cProfile.run('import slurmguard.node.hooks as h; h.run_hook(\"healthcheck\", "
            f"node_flag=None, config_path=None, only=None, as_json=False, dry_run=False)', "
            f"{str(prof)!r})\n")
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                   timeout=120)
    import pstats

    print("where slurmguard's healthcheck spends its time (cProfile, cumulative):")
    pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    sys.exit(main())
