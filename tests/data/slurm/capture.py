"""Capture real Slurm output into this directory (run by hand as root: python capture.py).

Starts a 6-node test cluster (tests/support/slurmcluster.py), puts nodes into the states the adapter
must read, and writes what `scontrol show node -o`, `scontrol show job -o`, `sinfo --json`
and `squeue --json` print. File names carry the Slurm version (e.g. ``22.05.8``).

    n1 allocated (2/2 CPUs)           n2 mixed, then draining (our reason)
    n3 drained idle, our reason with spaces and '=' signs
    n4 drained by an admin ("maintenance")    n5 down, not responding (slurmd killed)
    n6 idle; its Prolog drains it and fails while /tmp/.../fail-n6 exists
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parents[1]))

from support.slurmcluster import Cluster, write_shell_hook  # noqa: E402

OUR_REASON = "slurmguard: gpu-xid: Xid=79 on GPU 3 (pci=0000:3b:00.0) fell off the bus"


def main() -> None:
    version = subprocess.run(["/usr/sbin/slurmd", "-V"], capture_output=True,
                             text=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        flag = Path(tmp) / "fail-n6"
        prolog = write_shell_hook(Path(tmp) / "prolog.sh", f"""
if [ "$SLURMD_NODENAME" = n6 ] && [ -e {flag} ]; then
  /usr/bin/scontrol update nodename=n6 state=drain reason="slurmguard: test: prolog failed"
  exit 1
fi
exit 0""")
        c = Cluster.start(tmp, nodes=6, prolog=prolog, slurmd_timeout=6)
        try:
            capture(c, version, flag)
        finally:
            c.stop()


def capture(c: Cluster, v: str, flag: Path) -> None:
    def save(name: str, text: str) -> None:
        (HERE / name).write_text(text)
        print("wrote", name)

    save(f"show-node-idle-{v}.txt", c.run("scontrol", "show", "node", "-o").stdout)
    save(f"sinfo-idle-{v}.json", c.run("sinfo", "--json").stdout)
    sleeper = "#!/bin/sh\nsleep 600\n"
    j_alloc = c.sbatch(sleeper, "-w", "n1", "-n2", "--requeue")
    j_mixed = c.sbatch(sleeper, "-w", "n2", "-n1")
    c.wait_job(j_alloc, {"RUNNING"})
    c.wait_job(j_mixed, {"RUNNING"})
    c.run("scontrol", "update", "nodename=n3", "state=drain", f"reason={OUR_REASON}")
    c.run("scontrol", "update", "nodename=n4", "state=drain", "reason=maintenance")
    save(f"show-node-alloc-mixed-{v}.txt", c.run("scontrol", "show", "node", "-o").stdout)
    c.run("scontrol", "update", "nodename=n2", "state=drain",
          "reason=slurmguard: gpu-ecc: 3 uncorrectable ECC errors on GPU 0")
    c.kill_slurmd("n5")
    deadline = time.monotonic() + 60
    while "DOWN" not in c.run("scontrol", "show", "node", "-o", "n5").stdout:
        if time.monotonic() > deadline:
            raise SystemExit("n5 never went DOWN")
        time.sleep(1)
    save(f"show-job-running-{v}.txt", c.run("scontrol", "show", "job", "-o", j_alloc).stdout)
    # A job whose Prolog fails on n6: with nohold_on_prolog_fail it is requeued, not held.
    flag.touch()
    j_req = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n6", "--requeue")
    deadline = time.monotonic() + 60
    while True:
        fields = c.job(j_req)
        if int(fields.get("Restarts", "0")) >= 1 and fields["JobState"] == "PENDING":
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"job {j_req} was not requeued: {fields}")
        time.sleep(0.5)
    save(f"show-job-pending-requeued-{v}.txt", c.run("scontrol", "show", "job", "-o", j_req).stdout)
    c.run("scontrol", "requeuehold", j_alloc)
    c.wait_job(j_alloc, {"PENDING"})
    save(f"show-job-requeued-held-{v}.txt", c.run("scontrol", "show", "job", "-o", j_alloc).stdout)
    save(f"show-node-states-{v}.txt", c.run("scontrol", "show", "node", "-o").stdout)
    save(f"sinfo-states-{v}.json", c.run("sinfo", "--json").stdout)
    save(f"squeue-{v}.json", c.run("squeue", "--json").stdout)
    save(f"show-job-all-{v}.txt", c.run("scontrol", "show", "job", "-o").stdout)


if __name__ == "__main__":
    main()
