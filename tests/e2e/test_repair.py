"""Autonomous repair on the dockerized cluster (docs/repair.md): a node's reboot is its
container restarted for real.

`slurmguard serve` runs in the controller container with `repair.mode = "act"`; the nodes'
hooks report to it. An Xid 79 on n1: a job's prolog drains n1 and reports; serve's repair
pass keeps the evidence, reserves n1 and asks Slurm to reboot it (`scontrol reboot ASAP
nextstate=DOWN`); slurmd runs the cluster's RebootProgram (docker-slurm/sg-reboot), which asks
for a restart; the test's "BMC" restarts n1's container (`docker restart`). The container boots:
a fresh kernel log and boot id, slurmd with the container's start as its boot time, so Slurm
completes its own reboot; the node's health check at boot (what HealthCheckProgram runs when
slurmd starts) reports a pass; a quick burn-in runs as a job in n1's repair reservation; serve
verifies and returns n1 on probation, where the job that met the fault then runs. No command
is typed by a person.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from dockercluster import DockerCluster, wait_for

from slurmguard.store import Store

pytestmark = pytest.mark.e2e

TOKEN = "e2e-repair-token-0123456789abcdef"
NODES = ("n1", "n2", "n3")


class BMC:
    """Restarts the container of a node whose RebootProgram asked for it, then runs that
    node's health check once slurmd is back (the check at boot)."""

    def __init__(self, cluster: DockerCluster) -> None:
        self.cluster = cluster
        self.reboots: list[tuple[str, float, float]] = []  # node, asked at, back at
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> BMC:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for node in self.cluster.reboot_requests():
                try:
                    self._reboot(node)
                except Exception as exc:  # noqa: BLE001  (reported by the test)
                    self.errors.append(f"{node}: {exc}")

    def _reboot(self, node: str) -> None:
        asked = time.time()
        before = self.cluster.node(node).get("BootTime")
        time.sleep(1.2)  # a boot time in a later second than the reboot request
        self.cluster.restart(node)

        def booted() -> bool | None:  # registered with its new boot time, up again
            n = self.cluster.node(node)
            state = n.get("State", "")
            return (n.get("BootTime") != before and not any(
                w in state for w in ("NOT_RESPONDING", "REBOOT", "DOWN"))) or None

        wait_for(f"{node} to register after its boot", booted, 120, 0.5)
        self.cluster.exec(node, ["/usr/lib/slurmguard/prolog/slurmguard-healthcheck"],
                          check=False)
        self.reboots.append((node, asked, time.time()))


def _serve_config(cluster: DockerCluster) -> Path:
    d = cluster.shared / "serve"
    d.mkdir(exist_ok=True)
    token = d / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    cfg = d / "sg.toml"
    cfg.write_text("""
[store]
path = "/shared/serve/store.db"

[serve]
host = "0.0.0.0"
port = 8742
auth = "token"
token_file = "/shared/serve/token"
policy_interval = 1.0
batch_interval = 0.05

[repair]
mode = "act"
settle = 90.0
evidence_dir = "/shared/serve/evidence"
pause_file = "/shared/serve/repair.paused"

[triage]
connect_timeout = 2.0
""")
    return cfg


def _hooks_report_to_serve(cluster: DockerCluster, on: bool) -> None:
    for node in NODES:
        if on:
            cluster.sh(node, "install -m 0600 /shared/serve/token /etc/slurmguard/token && "
                             "printf '[serve]\\nauth = \"token\"\\n[hooks]\\n"
                             "report_url = \"http://ctl:8742/ingest\"\\n' "
                             "> /etc/slurmguard/conf.d/50-serve.toml")
        else:
            cluster.sh(node, "rm -f /etc/slurmguard/conf.d/50-serve.toml", check=False)


def _started_at(cluster: DockerCluster, node: str) -> str:
    w = cluster.wrapped(node)
    w.reload()  # the engine's view now, not the one cached at creation
    return str(w.attrs["State"]["StartedAt"])


def _serve_url(cluster: DockerCluster) -> str:
    return f"http://{cluster.address('ctl')}:8742"


def _healthz(cluster: DockerCluster) -> dict | None:
    try:
        with urllib.request.urlopen(_serve_url(cluster) + "/healthz", timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


def test_a_transient_xid_is_repaired_by_restarting_the_node_container(
        cluster: DockerCluster) -> None:
    _serve_config(cluster)
    rc, out = cluster.exec("ctl", ["slurmguard", "-c", "/shared/serve/sg.toml", "db", "upgrade"],
                           check=False)
    assert rc == 0, out
    cluster.sh("ctl", "setsid slurmguard -c /shared/serve/sg.toml serve "
                      "> /shared/serve/serve.log 2>&1 < /dev/null &")
    store = None
    try:
        wait_for("serve to answer", lambda: _healthz(cluster), 60, 1.0)
        _hooks_report_to_serve(cluster, True)
        boot_before = cluster.node("n1").get("BootTime")
        started_before = _started_at(cluster, "n1")
        with BMC(cluster) as bmc:
            cluster.exec("n1", ["sg-fault", "xid", "0", "79", "GPU has fallen off the bus."])
            t0 = time.time()
            job_id = cluster.sbatch("--requeue", "-N1", "-w", "n1", "--wrap", "hostname")
            cluster.wait_node("n1", lambda n: "DRAIN" in n["State"], "drained by the prolog",
                              timeout=60)
            store = Store.open(section={"path": str(cluster.shared / "serve" / "store.db")})
            wait_for("repair to return n1",
                     lambda: store.nodes.events(node="n1", kinds=["repair_return"]) or None,
                     300, 1.0)
            t_return = time.time()
            info = cluster.wait_node("n1", lambda n: "DRAIN" not in n["State"]
                                     and "DOWN" not in n["State"], "back in service", timeout=60)
            job = cluster.wait_job(job_id, {"COMPLETED"}, timeout=120)
        assert bmc.errors == [], bmc.errors
        ev = sorted(store.nodes.events(node="n1", limit=200), key=lambda e: (e.at, e.id))
        kinds = [e.kind for e in ev]
        reservations = cluster.sh("ctl", "scontrol show reservation", check=False)
        started_after = _started_at(cluster, "n1")
        kern_log = cluster.sh("n1", "cat /var/lib/fakehw/kern.log")
        log = (cluster.shared / "serve" / "serve.log").read_text()
    finally:
        _hooks_report_to_serve(cluster, False)
        cluster.sh("ctl", "pkill -f 'slurmguard -c /shared/serve/sg.toml serve'; true",
                   check=False)
        if store is not None:
            store.close()
    assert [n for n, _, _ in bmc.reboots] == ["n1"], bmc.reboots  # one reboot, through Slurm
    assert started_after != started_before  # the container really restarted
    assert info.get("BootTime") != boot_before  # and Slurm saw a new boot
    assert "Xid" not in kern_log  # a fresh kernel log: the boot cleared the Xid
    assert kinds.count("repair_rung") == 1 and kinds.count("repair_return") == 1, kinds
    rung = next(e for e in ev if e.kind == "repair_rung")
    assert rung.details["rung"] == "reboot"
    assert [e.details.get("result") for e in ev if e.kind == "repair_outcome"] == [
        "proven", "verified"], log[-3000:]
    # Verification: the health check at boot, then the quick burn-in as a job in the node's
    # repair reservation (repair.verify_burnin), judged before the return.
    assert kinds.count("repair_burnin") == 1, kinds
    verified = next(e for e in ev if e.details.get("result") == "verified")
    assert verified.details.get("burnin_verdict") in ("pass", "no_verdict", "degrading"), verified
    assert "repair_ticket" not in kinds and all(e.actor_kind != "admin" for e in ev)
    start = next(e for e in ev if e.kind == "repair_start")
    # The evidence bundle, kept before the reboot. This image has no ssh extra (paramiko):
    # the bundle holds Slurm's record and the store's runs, and says what is missing.
    evidence, _, missing = start.details["evidence"].partition(" (incomplete: ")
    bundle = cluster.shared / Path(evidence).relative_to("/shared")
    assert "Xid 79" in (bundle / "slurm-node.json").read_text()
    assert (bundle / "results.json").is_file()
    assert missing.startswith("no SSH collection: paramiko is not installed"), missing
    assert "sg_repair_n1" not in reservations
    assert job["NodeList"] == "n1"  # the job that met the fault ran on the repaired node
    drain = next(e for e in ev if e.kind == "drain")
    asked, back = bmc.reboots[0][1], bmc.reboots[0][2]
    print(f"\nrepair on the dockerized cluster: drain->reboot asked "
          f"{asked - drain.at:.1f} s, container restart + slurmd back {back - asked:.1f} s, "
          f"back->returned {t_return - back:.1f} s, drain->return {t_return - t0:.1f} s")
