"""The repair tests' real cluster (tests/test_repair_cluster.py,
tests/test_repair_verify_cluster.py): nodes that report their own health through Slurm, a BMC
that reboots them, and what their health checks read.

* :class:`NodeHardware`: per node, the kernel log the ``gpu-xid`` check reads
  (``checks.xid.source = "file"``, tests/fakehw/kmsg.py's real record format), a boot id and
  the driver's /proc GPU tree. A reboot (:meth:`NodeHardware.boot`) gives the node a new boot
  id and a fresh kernel log; a GPU still broken (``broken``) is logged by the driver again as
  it loads, so a fault that survives the reboot is seen by the check at boot.
* :class:`BMC`: restarts a node whose ``RebootProgram`` ran, and nothing else: slurmd killed,
  the node's hardware booted, slurmd started in a time namespace whose boot time is now.
  slurmd then runs ``HealthCheckProgram`` before it registers (Slurm runs it at every slurmd
  start): the node's own `slurmguard healthcheck` judges it and reports to serve.
* :class:`Rig`: one cluster for the module, its ``HealthCheckProgram`` a wrapper of this
  checkout's `slurmguard healthcheck` reading the running test's config (``Rig.config``, a
  link to it); :meth:`Rig.reset` puts every node back in service between tests.
* :func:`prepare`: one test's store, `slurmguard serve` and config on the rig (the nodes'
  health checks report to that serve); :func:`xid_drain` drains a node through its own
  health check, :func:`fake_drain` stands in for a hook where the cause matters more than
  the check (limits, ledgers); :func:`peers_burnin` runs the nightly burn-in's own command
  on the peers a quick burn-in is judged against.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from fakehw.kmsg import DEFAULT_GPUS, inject_xid, write_gpu_tree

from slurmguard import config
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.store import Store
from support.helpers import REPO, require, run_sg, sg_argv, sg_env
from support.sgserve import Serve, new_port, new_store, write_config
from support.slurmcluster import Cluster, write_shell_hook

TESTS = REPO / "tests"
GPU0 = DEFAULT_GPUS[0]

REBOOT_SCRIPT = """#!/bin/sh
# RebootProgram of the test cluster: find this node's slurmd (an ancestor run as `slurmd -N NODE`)
# and ask the test's BMC to restart that node.
p=$PPID; n=""
while [ -z "$n" ] && [ "$p" -gt 1 ]; do
  n=$(tr '\\0' ' ' < /proc/$p/cmdline | sed -n 's/.*-N \\([^ ]*\\).*/\\1/p')
  p=$(awk '{{print $4}}' /proc/$p/stat)
done
date +%s.%N > {dir}/reboot-$n
"""


class NodeHardware:
    """What the nodes' health checks read, one set per node under ``root``."""

    def __init__(self, root: Path, nodes: list[str]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.gpus = write_gpu_tree(root / "gpus")
        self.nodes = nodes
        self.broken: set[str] = set()  # GPU 0 of these stays off the bus across reboots
        for n in nodes:
            self.boot(n)

    def kmsg(self, node: str) -> Path:
        return self.root / f"{node}.kmsg"

    def xid79(self, node: str) -> None:
        """GPU 0 falls off the bus: the driver's Xid 79 line in the node's kernel log."""
        inject_xid(self.kmsg(node), GPU0, 79, "GPU has fallen off the bus.")

    def boot(self, node: str) -> None:
        """What a boot does to what the checks read: a new boot id and a fresh kernel log (a
        new file: the reader's cursor in the old one means nothing there). A GPU still broken
        is reported again by the driver as it loads."""
        boot = str(uuid.uuid4())
        (self.root / f"{node}.boot_id").write_text(boot + "\n")
        log = self.root / f"{node}.kmsg.{boot}"
        log.write_text("")
        tmp = self.root / f".{node}.kmsg.link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(log.name)
        tmp.replace(self.kmsg(node))
        if node in self.broken:
            self.xid79(node)

    def config(self) -> str:
        """The healthcheck's config lines: the gpu-xid check on each node's own fixtures."""
        groups = "".join(f"""
[[group]]
nodes = "{n}"
hooks.state_dir = "{self.root}/state/{n}"
checks.xid.file = "{self.kmsg(n)}"
checks.xid.boot_id_path = "{self.root}/{n}.boot_id"
""" for n in self.nodes)
        return f"""
[checks.xid]
source = "file"
nvidia_proc_root = "{self.gpus}"
{groups}"""


class BMC:
    """Restarts a node whose RebootProgram ran: its slurmd killed, its hardware booted, slurmd
    started again with a fresh boot time. It writes no health record: the node's own
    HealthCheckProgram, run by slurmd as it starts, reports."""

    def __init__(self, cluster: Cluster, d: Path, hw: NodeHardware) -> None:
        self.cluster, self.d, self.hw = cluster, d, hw
        self.reboots: list[tuple[str, float]] = []  # node, when the BMC started the reboot
        self.go = threading.Event()  # cleared: reboot requests wait (a slow BMC)
        self.go.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> BMC:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if not self.go.is_set():
                continue
            for f in sorted(self.d.glob("reboot-n*")):
                f.unlink()  # one request, one reboot
                self._reboot(f.name.split("-", 1)[1])

    def _reboot(self, node: str) -> None:
        self.reboots.append((node, time.time()))
        self.cluster.kill_slurmd(node)
        self.hw.boot(node)
        time.sleep(1.5)  # a boot time in a later second than the reboot request
        self.cluster.start_slurmd(node, fresh_boot=True)


class Rig:
    """One cluster for a test module; each test points ``config`` at its own config."""

    def __init__(self, cluster: Cluster, root: Path, bmc_dir: Path, healthcheck: str) -> None:
        self.cluster, self.root, self.bmc_dir, self.healthcheck = (cluster, root, bmc_dir,
                                                                   healthcheck)

    @property
    def config(self) -> Path:
        return self.root / "sg.toml"

    @classmethod
    def start(cls, root: Path, nodes: int) -> Rig:
        root = root.resolve()
        d = root / "bmc"
        d.mkdir(parents=True)
        script = d / "reboot.sh"
        script.write_text(REBOOT_SCRIPT.format(dir=d))
        script.chmod(0o755)
        conf = root / "slurm" / "etc" / "slurm.conf"  # where Cluster.start writes it
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}",
               "SLURMGUARD_CONFIG": str(root / "sg.toml"), "SLURM_CONF": str(conf)}
        # slurmd starts HealthCheckProgram with almost no environment and no SLURM_CONF
        # (tests/test_doctor.py): the wrapper carries them. Between tests there is no config:
        # nothing to check, and the cluster's own start stays quick.
        body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        body += '[ -e "$SLURMGUARD_CONFIG" ] || exit 0\n'
        body += "exec " + " ".join(shlex.quote(a) for a in sg_argv("healthcheck")) + "\n"
        hc = write_shell_hook(root / "healthcheck", body)
        # HealthCheckInterval is long: here the health check runs when slurmd starts (a
        # reboot), as it does on every node; the periodic run would only blur what is tested.
        cluster = Cluster.start(root, nodes=nodes, health_check_program=hc,
                                health_check_interval=3600,
                                # debug: slurmctld logs each reboot it issues or defers
                                # (repair_state reads it when a repair does not end)
                                extra_conf=[f"RebootProgram={script}", "ResumeTimeout=60",
                                            "SlurmctldDebug=debug"],
                                timeout=120)
        assert cluster.conf_path == conf
        return cls(cluster, root, d, hc)

    def use(self, cfg: Path) -> None:
        """The running test's config is the one the nodes' health checks read."""
        link = self.root / ".sg.toml.link"
        link.unlink(missing_ok=True)
        link.symlink_to(cfg)
        link.replace(self.config)

    def run_healthcheck(self, node: str) -> subprocess.CompletedProcess[str]:
        """The node's HealthCheckProgram, run as slurmd runs it (``SLURMD_NODENAME`` only)."""
        return subprocess.run([self.healthcheck], env={"SLURMD_NODENAME": node},
                              capture_output=True, text=True, timeout=120)

    def reset(self) -> None:
        """Every node back in service, no job, no reservation, no config: the next test
        starts from an idle cluster."""
        c = self.cluster
        self.config.unlink(missing_ok=True)
        for f in self.bmc_dir.glob("reboot-n*"):
            f.unlink()
        c.run("scancel", "--full", "--quiet", "--user=root", check=False)
        out = c.run("scontrol", "show", "reservation", "-o", check=False).stdout
        for word in out.split():
            if word.startswith("ReservationName="):
                c.run("scontrol", "delete", word, check=False)
        for n in c.nodes:
            if c.slurmd_pid(n) is None:  # a reboot the test ended in the middle of
                c.start_slurmd(n, fresh_boot=True)
        for info in c.cli().nodes():
            if any(f.startswith("REBOOT") for f in info.flags):
                c.run("scontrol", "cancel_reboot", info.name, check=False)
            if info.drained or info.down or info.flags:
                c.run("scontrol", "update", f"nodename={info.name}", "state=resume",
                      check=False)
        c.wait_nodes_idle(90)


# -- one test's setup on the rig: its store, serve and config ---------------------------------

XID79 = "slurmguard: gpu-xid: Xid 79 on GPU 0 (fallen off the bus)"


def module_rig(tmp_path_factory: Any, nodes: int) -> Iterator[Rig]:
    """The body of a test module's cluster fixture (scope="module")."""
    from support import slurmcluster

    missing = slurmcluster.missing_components()
    require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
    require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
    rig = Rig.start(tmp_path_factory.mktemp("repair"), nodes)
    try:
        yield rig
    finally:
        rig.cluster.stop()


def record(node: str, hook: str, healthy: bool, applied: str = "", check: str = "gpu-xid",
         reason: str = XID79) -> dict:
    res = CheckResult(check, Health.HEALTHY if healthy else Health.UNHEALTHY,
                      "" if healthy else reason.split(": ", 2)[-1])
    r = make_record(node, hook, [CheckResult("gpu-count", Health.HEALTHY), res],
                    "pass" if healthy else "drain", "" if healthy else reason)
    if applied:
        r["applied"] = applied
    return r


def burnin_conf(cluster) -> str:  # type: ignore[no-untyped-def]
    return f"""
[burnin]
site_modules = ["support.burninsite"]
measurements = ["site-fault"]
checks = ["gpu-count"]
quick_seconds = 0.5
output = "{cluster.logdir}/burnin-%N-%j.out"
"""


class Setup(NamedTuple):
    cluster: object
    hw: NodeHardware
    cfg: object
    cfg_path: Path
    serve: Serve
    store: Store
    env: dict


def prepare(rig: Rig, tmp_path: Path, *, burnin: bool = False) -> Setup:
    """This test's store, serve and config on the module's cluster; the nodes' health checks
    read that config."""
    s = configure(rig.cluster, tmp_path, burnin=burnin)
    rig.use(s.cfg_path)
    return s


def configure(cluster, tmp_path: Path, *, burnin: bool = False) -> Setup:  # type: ignore[no-untyped-def]
    """This test's store, serve and config. ``repair.settle`` 60 s: a reboot here is Slurm's
    RebootProgram, the BMC thread and a new slurmd registering, and on a shared 2-core machine
    (CI runs the dockerized suite beside this) that has taken longer than 20 s: the rung was
    then judged transient, the ladder went on to a ticket, and a test waiting for the return
    timed out (seen in the limits test, and in the k-repairs test in a whole-suite run). No
    test here waits for settle to run out."""
    hw = NodeHardware(tmp_path / "hw", cluster.nodes)
    url, port = new_store(tmp_path), new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port, serve_extra="policy_interval = 1.0",
                            extra=f"""
log_file = "{tmp_path}/hooks.log"
healthcheck = ["gpu-xid"]

[repair]
mode = "act"
settle = 60.0
evidence_dir = "{tmp_path}/evidence"
pause_file = "{tmp_path}/repair.paused"
verify_burnin = {str(burnin).lower()}
burnin_timeout = 120.0

[triage]
connect_timeout = 2.0
""" + (burnin_conf(cluster) if burnin else "") + hw.config())
    cfg = config.load(str(cfg_path), env={})
    (tmp_path / "faults").mkdir()
    # The burn-in jobs inherit the submitter's environment (sbatch --export=ALL): this
    # checkout, the test's site measurement and where it finds its faults.
    env = {"SLURM_CONF": cluster.env["SLURM_CONF"], "PYTHONPATH": f"{TESTS}{os.pathsep}{REPO}",
           "FAKE_BENCH_FAULT_DIR": str(tmp_path / "faults")}
    serve = Serve(cfg_path, port, env=env)
    return Setup(cluster, hw, cfg, cfg_path, serve, Store.open(url=url), env)


def fake_drain(cluster, cfg, node: str, check: str = "gpu-xid", reason: str = XID79) -> float:  # type: ignore[no-untyped-def]
    """A stand-in for a hook that finds a fault: it drains the node and reports (the tests
    about limits and ledgers; the verification tests drain through the real health check)."""
    assert cluster.cli().drain(node, reason)
    at = time.time()
    rec = record(node, "prolog", healthy=False, applied="drained", check=check, reason=reason)
    assert delivery.deliver(rec, cfg) == "sent"
    return at


def xid_drain(rig: Rig, s: Setup, node: str) -> float:
    """GPU 0 of ``node`` falls off the bus; the node's HealthCheckProgram (run as slurmd runs
    it) finds the driver's Xid 79, drains the node and reports to serve."""
    s.hw.xid79(node)
    at = time.time()
    p = rig.run_healthcheck(node)
    info = s.cluster.node(node)
    assert info.drained and info.reason.startswith("slurmguard: gpu-xid: GPU 0 "), (
        info, p.stdout, p.stderr)
    assert "Xid 79" in info.reason
    return at


def peers_burnin(s: Setup, peers: list[str]) -> None:
    """The peers' nightly burn-in, by its own command (`burnin submit --wait`): the group a
    quick burn-in is judged in."""
    p = run_sg("-c", str(s.cfg_path), "burnin", "submit", ",".join(peers), "--wait",
               env=sg_env(**s.env))
    assert p.returncode == 0, p.stdout + p.stderr
    runs = s.store.burnin.latest_runs(0.0, peers)
    assert sorted(r.status for r in runs) == ["complete"] * len(peers), runs


def boot_runs(s: Setup, node: str, after: float) -> list:
    """The node's health check runs stored since ``after`` (its HealthCheckProgram's)."""
    return sorted((i for i in s.store.nodes.history(node, since=after)
                   if i.kind == "result" and i.source == "healthcheck"), key=lambda i: i.at)


def repair_state(cluster, store, bmc: BMC, rig: Rig, nodes) -> str:  # type: ignore[no-untyped-def]
    """Where a repair that did not end stood: the BMC's reboots and waiting requests, each
    node's state in Slurm, and the ledger's repair steps."""
    slurm = {}
    for n in nodes:
        try:
            r = cluster.node(n)
            slurm[n] = f"{r.state} {sorted(r.flags)} {r.reason!r} boot {r.raw.get('BootTime')}"
        except Exception as exc:  # a diagnostic: whatever Slurm says, or why it said nothing
            slurm[n] = f"unread: {exc}"
    steps = [(round(e.at, 1), e.node, e.kind, e.reason[:80])
             for e in store.nodes.events(limit=200) if e.kind.startswith("repair")]
    # What slurmctld and the nodes' slurmd said of the reboots (the request queued, sent,
    # refused, timed out; RebootProgram run or not).
    words = ("reboot", "Reboot", "REBOOT", "responding", "agent", "update_node")
    logs = []
    for name in ["slurmctld", *(f"slurmd-{n}" for n in nodes)]:
        path = cluster.logdir / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        logs += [f"{name}: {ln}" for ln in lines[-400:] if any(w in ln for w in words)][-15:]
    return (f"reboots {bmc.reboots}; waiting requests {sorted(f.name for f in rig.bmc_dir.glob('reboot-*'))}; "
            f"BMC thread alive {bmc.alive}; slurm {slurm}; ledger {steps}; logs:\n" + "\n".join(logs))


def boot_time(info) -> float:  # type: ignore[no-untyped-def]
    return time.mktime(time.strptime(info.raw["BootTime"], "%Y-%m-%dT%H:%M:%S"))


def sg(cfg_path: Path, cluster, *args: str):  # type: ignore[no-untyped-def]
    return run_sg("-c", str(cfg_path), *args, env=sg_env(SLURM_CONF=cluster.env["SLURM_CONF"]))
