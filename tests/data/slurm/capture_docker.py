"""Capture real Slurm output from the dockerized cluster (run by hand as root, engine up):

    python tests/data/slurm/capture_docker.py --release trixie      # Slurm 24.11 (Debian 13)
    python tests/data/slurm/capture_docker.py --release forky       # Slurm 26.05 (Debian testing)

The same moments as capture.py (the native 22.05 cluster), on a cluster of docker-slurm
containers: each node its own host, the real slurmguard hooks in Slurm's Prolog, so n6's
drain is slurmguard's own (an injected Xid), and n5 is lost for real (`docker kill`).

    n1 allocated (2/2 CPUs)           n2 mixed, then draining (our reason)
    n3 drained idle, our reason with spaces and '=' signs
    n4 drained by an admin ("maintenance")    n5 down, not responding (container killed)
    n6 idle; an Xid on GPU 2 makes its prolog drain it, and the pinned job is requeued
    then (moment "undrained") n3's drain cleared with UNDRAIN

Writes ``<what>-<moment>-<version>.{txt,json}``: ``scontrol show node -o``,
``scontrol --json show nodes`` (23.02+), ``sinfo --json``, ``squeue --json``,
``scontrol show job -o``. Times are the containers' local time (UTC).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests"), str(REPO / "docker-slurm")]

import build_image  # noqa: E402
from dockercluster import DockerCluster, wait_for  # noqa: E402

OUR_REASON = "slurmguard: gpu-xid: Xid=79 on GPU 3 (pci=0000:3b:00.0) fell off the bus"
NODES = {f"n{i}": 4 for i in range(1, 7)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="trixie", choices=sorted(build_image.RELEASES))
    ap.add_argument("--config-only", action="store_true",
                    help="only `scontrol show config` (healthcheck on), before and after the "
                         "25.05+/25.11+ settings are added")
    ap.add_argument("--expedite", action="store_true",
                    help="only a job submitted with --requeue=expedite whose node's epilog "
                         "(slurmguard, an injected Xid) fails, on a Slurm with expedited requeue on")
    args = ap.parse_args()
    image = build_image.build(include_package=False, release_name=args.release)
    if args.config_only:
        capture_config(image)
        return
    if args.expedite:
        capture_expedite(image)
        return
    c = DockerCluster(image, dict(NODES), env={"SG_CRED_EXPIRE": "120",
                                                "SG_SLURMD_TIMEOUT": "20"}).start()
    try:
        capture(c)
    except BaseException:
        print(c.sh("ctl", "grep -av 'socket error' /var/log/slurm/slurmctld.log | tail -n 40",
                   check=False))
        raise
    finally:
        c.stop()


def capture(c: DockerCluster) -> None:
    v = c.sh("ctl", "scontrol -V").split()[-1]
    staged: dict[str, str] = {}  # written only when every moment was captured

    def save(name: str, text: str) -> None:
        if name.endswith(".json"):
            json.loads(text)  # refuse to save a half answer
        staged[name] = text
        print("captured", name)

    def scontrol(*args: str) -> str:
        return c.exec("ctl", ["scontrol", *args])[1]

    def snapshot(moment: str) -> None:
        save(f"show-node-{moment}-{v}.txt", scontrol("show", "node", "-o"))
        save(f"scontrol-nodes-{moment}-{v}.json", scontrol("--json", "show", "nodes"))
        save(f"sinfo-{moment}-{v}.json", c.exec("ctl", ["sinfo", "--json"])[1])

    snapshot("idle")
    save(f"show-config-docker-{v}.txt", scontrol("show", "config"))
    j_alloc = c.sbatch("-w", "n1", "-n2", "--requeue", "--wrap", "sleep 600")
    j_mixed = c.sbatch("-w", "n2", "-n1", "--wrap", "sleep 600")
    c.wait_job(j_alloc, {"RUNNING"}, timeout=60)
    c.wait_job(j_mixed, {"RUNNING"}, timeout=60)
    scontrol("update", "nodename=n3", "state=drain", f"reason={OUR_REASON}")
    scontrol("update", "nodename=n4", "state=drain", "reason=maintenance")
    save(f"show-node-alloc-mixed-{v}.txt", scontrol("show", "node", "-o"))
    scontrol("update", "nodename=n2", "state=drain",
             "reason=slurmguard: gpu-ecc: 3 uncorrectable ECC errors on GPU 0")
    c.kill("n5")
    # 26.05 retries the lost host's name lookup (11 s each) before it marks it DOWN
    c.wait_node("n5", lambda n: "DOWN" in n["State"], "DOWN", timeout=300)
    save(f"show-job-running-{v}.txt", scontrol("show", "job", "-o", j_alloc))
    # n6's prolog (slurmguard) finds the Xid, drains n6 and fails: the pinned job is
    # requeued without a hold (nohold_on_prolog_fail) and waits cred_expire (120 s).
    c.exec("n6", ["sg-fault", "xid", "2", "79", "GPU has fallen off the bus."])
    j_req = c.sbatch("-w", "n6", "--requeue", "--wrap", "true")

    def requeued() -> bool:
        j = c.job(j_req)
        return int(j.get("Restarts", "0")) >= 1 and j.get("JobState") == "PENDING"
    wait_for(f"job {j_req} requeued", requeued, timeout=90, context=c.describe)
    save(f"show-job-pending-requeued-{v}.txt", scontrol("show", "job", "-o", j_req))
    scontrol("requeuehold", j_alloc)
    c.wait_job(j_alloc, {"PENDING"}, timeout=60)
    save(f"show-job-requeued-held-{v}.txt", scontrol("show", "job", "-o", j_alloc))
    time.sleep(2)  # let the requeue's COMPLETING flag on n1 settle
    snapshot("states")
    save(f"squeue-{v}.json", c.exec("ctl", ["squeue", "--json"])[1])
    save(f"show-job-all-{v}.txt", scontrol("show", "job", "-o"))
    # Our drain of n3 cleared with UNDRAIN: 24.11.5 keeps the old reason on the idle node
    # (22.05 clears it), which the parser must not take for a drain of ours.
    scontrol("update", "nodename=n3", "state=undrain")
    c.wait_node("n3", lambda n: n["State"] == "IDLE", "idle", timeout=60)
    save(f"show-node-undrained-{v}.txt", scontrol("show", "node", "-o"))
    save(f"scontrol-nodes-undrained-{v}.json", scontrol("--json", "show", "nodes"))
    for name, text in staged.items():
        (HERE / name).write_text(text)
        print("wrote", name)


# Settings of newer Slurm (PrologTimeout/EpilogTimeout 25.05+, HealthCheckTimeout and
# expedited requeue 25.11+) that `slurmguard doctor` and the requeue watcher read.
NEWER = ("PrologTimeout=40\nEpilogTimeout=50\nHealthCheckTimeout=20\n"
         "SlurmctldParameters=enable_expedited_requeue\n")


def capture_config(image: str) -> None:
    c = DockerCluster(image, {"n1": 4}, env={"SG_HEALTHCHECK_INTERVAL": "60"}).start()
    try:
        v = c.sh("ctl", "scontrol -V").split()[-1]
        (HERE / f"show-config-docker-{v}.txt").write_text(c.exec("ctl", ["scontrol", "show", "config"])[1])
        conf = c.shared / "slurm.conf"
        conf.write_text(conf.read_text() + NEWER)
        c.sh("ctl", "cp /shared/slurm.conf /etc/slurm/slurm.conf && scontrol reconfigure")
        time.sleep(3)
        (HERE / f"show-config-newer-{v}.txt").write_text(c.exec("ctl", ["scontrol", "show", "config"])[1])
        print("wrote", f"show-config-docker-{v}.txt", f"show-config-newer-{v}.txt")
    finally:
        c.stop()


def capture_expedite(image: str) -> None:
    """25.11+: what Slurm shows of a job that asked for expedited requeue, before and after
    the node it ran on failed its epilog (slurmguard's, finding an injected Xid)."""
    c = DockerCluster(image, {"n1": 4, "n2": 4}, env={"SG_CRED_EXPIRE": "120"}).start()
    try:
        v = c.sh("ctl", "scontrol -V").split()[-1]
        conf = c.shared / "slurm.conf"
        conf.write_text(conf.read_text() + "SlurmctldParameters=enable_expedited_requeue\n")
        c.sh("ctl", "cp /shared/slurm.conf /etc/slurm/slurm.conf && scontrol reconfigure")
        time.sleep(3)
        jid = c.sbatch("-w", "n1", "--requeue=expedite", "--wrap", "sleep 8; exit 1")
        c.wait_job(jid, {"RUNNING"}, timeout=60)
        staged = {f"show-job-expedite-running-{v}.txt": c.exec("ctl", ["scontrol", "show", "job", "-o", jid])[1],
                  f"squeue-expedite-{v}.json": c.exec("ctl", ["squeue", "--json"])[1]}
        c.exec("n1", ["sg-fault", "xid", "2", "79", "GPU has fallen off the bus."])
        wait_for(f"job {jid} requeued", lambda: int(c.job(jid).get("Restarts", "0")) >= 1,
                 timeout=120, context=c.describe)
        time.sleep(2)
        staged[f"show-job-expedite-requeued-{v}.txt"] = c.exec("ctl", ["scontrol", "show", "job", "-o", jid])[1]
        staged[f"slurmctld-expedite-{v}.log"] = c.sh(
            "ctl", "grep -a -i 'expedit\\|requeue\\|epilog' /var/log/slurm/slurmctld.log | tail -n 20",
            check=False)
        for name, text in staged.items():
            (HERE / name).write_text(text)
            print("wrote", name)
    finally:
        c.stop()


if __name__ == "__main__":
    main()
