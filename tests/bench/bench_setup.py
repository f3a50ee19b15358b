"""What the install path costs: the entry script's own overhead on every job, and setup/doctor.

    python tests/bench/bench_setup.py [--runs 300]

1. The prolog entry script with a stand-in slurmguard that exits 0 at once (so only the
   script is measured): the script as it was before the loud fail-open (`exec`) and as it
   is now (defaults parsed in a subshell first, slurmguard run as a child so its exit code
   can be judged), interleaved run by run, median and p95 of each.
2. `slurmguard setup node` into a fresh prefix (SPANK plugin and agent client compiled) and
   the second, no-change run; `slurmguard doctor node` against a slurm.conf file.
Prints medians; the machine may be shared (run it anyway and say so).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SG = str(Path(sys.executable).parent / "slurmguard")

OLD = """#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
SLURMGUARD=/usr/local/bin/slurmguard
[ -r {defaults} ] && . {defaults}
export SLURMGUARD_CONFIG
[ -x "$SLURMGUARD" ] || {{ echo "slurmguard-prolog: $SLURMGUARD not executable; skipping checks" >&2; exit 0; }}
exec "$SLURMGUARD" prolog
"""


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env={}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1000:.2f} ms, p95 {xs[int(len(xs) * 0.95)] * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        fake = t / "sg"
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
        defaults = t / "default"
        defaults.write_text(f"SLURMGUARD={fake}\nSLURMGUARD_CONFIG=/x.toml\nSLURMGUARD_STATE_DIR={t}\n")
        old = t / "old"
        old.write_text(OLD.format(defaults=defaults))
        new = t / "new"
        new.write_text((REPO / "prolog/slurmguard-prolog").read_text().replace(
            "SLURMGUARD_DEFAULTS=/etc/default/slurmguard", f"SLURMGUARD_DEFAULTS={defaults}"))
        for p in (old, new):
            p.chmod(0o755)
        a, b = [], []
        for _ in range(args.runs):
            a.append(timed([str(old)]))
            b.append(timed([str(new)]))
        print(f"entry script, n={args.runs} interleaved: before {ms(a)}; now {ms(b)}; "
              f"now/before {statistics.median(b) / statistics.median(a):.2f}")
        prefix = t / "root"
        for label in ("setup node (fresh prefix)", "setup node (second run, 0 changes)"):
            t0 = time.perf_counter()
            r = subprocess.run([SG, "setup", "node", "--prefix", str(prefix)], capture_output=True,
                               text=True, check=True)
            changes = next(ln for ln in r.stdout.splitlines() if " change" in ln)
            print(f"{label}: {time.perf_counter() - t0:.2f} s ({changes.split(';')[0]})")
        conf = t / "slurm.conf"
        conf.write_text(f"SlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"
                        f"Prolog={prefix}/usr/lib/slurmguard/prolog/slurmguard-prolog\n")
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([SG, "-c", str(prefix / "etc/slurmguard/slurmguard.toml"), "doctor",
                            "node"], env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
                           capture_output=True, check=False)
            runs.append(time.perf_counter() - t0)
        print(f"doctor node (slurm.conf file, no slurmctld), n=5: median {statistics.median(runs):.2f} s")


if __name__ == "__main__":
    main()
