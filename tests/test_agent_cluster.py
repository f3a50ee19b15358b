"""The agent on a real Slurm cluster (one cluster for the module): 4 slurmd, 8 stand-in GPUs
each, one `slurmguard agent` per node, Prolog/Epilog = the compiled client asking it.

- 50 healthy jobs with the agent on: zero drains, and the agents answered the hooks.
- Xid 79 on GPU 2 of n3: the prolog (answered by n3's agent) drains n3 with the same reason
  as the in-process path gives for the same kernel log, and the job completes elsewhere.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fakehw.kmsg import inject_xid
from support.helpers import require, sg_argv, sg_env
from support.wait import wait_for
from test_agent import build_clients
from test_hooks_slurm import GPU2_PCI, NODES, Fleet, drained_nodes

pytestmark = pytest.mark.slurm


class Setup:
    def __init__(self, root: Path) -> None:
        from support import slurmcluster

        missing = slurmcluster.missing_components()
        require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
        require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
        self.root = root
        self.fleet = Fleet(root / "fleet")
        self.client = build_clients(root / "clients")
        self.run = root / "run"
        self.run.mkdir(mode=0o700)
        # One agent per node name (several slurmd on this host): the socket names the node.
        cfg = self.fleet.config.read_text().replace(
            "[hooks]\n", f'[agent]\nsocket = "{self.run}/%n.sock"\n\n[hooks]\n', 1)
        self.fleet.config.write_text(cfg)
        env = self.fleet.env(SLURMGUARD_AGENT_SOCKET=f"{self.run}/%n.sock",
                             SLURMGUARD_AGENT_TIMEOUT="8",
                             SLURMGUARD_BOOT_ID_PATH=f"{self.fleet.root}/%n.boot_id")
        hooks = {}
        for hook in ("prolog", "epilog"):
            path = root / f"hook-{hook}"
            exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
            argv = " ".join(shlex.quote(a) for a in [str(self.client), hook, "--", *sg_argv(hook)])
            path.write_text(f"#!/bin/sh\n{exports}\nexec {argv}\n")
            path.chmod(0o755)
            hooks[hook] = str(path)
        self.cluster = slurmcluster.Cluster.start(root / "slurm", nodes=4, prolog=hooks["prolog"],
                                                  epilog=hooks["epilog"])
        self.agents: dict[str, subprocess.Popen[str]] = {}
        try:
            for n in NODES:
                self.start_agent(n)
        except BaseException:
            self.stop()
            raise

    def agent_env(self, node: str) -> dict[str, str]:
        return sg_env(**self.fleet.env(SLURMD_NODENAME=node,
                                       SLURM_CONF=str(self.cluster.conf_path)))

    def start_agent(self, node: str) -> None:
        log = open(self.root / f"agent-{node}.log", "ab")
        p = subprocess.Popen(sg_argv("agent"), env=self.agent_env(node), stdout=subprocess.PIPE,
                             stderr=log, text=True, start_new_session=True)
        log.close()
        line = p.stdout.readline() if p.stdout else ""
        if not line.startswith("ready"):
            p.kill()
            raise RuntimeError(f"agent {node}: {(self.root / f'agent-{node}.log').read_text()[-2000:]}")
        self.agents[node] = p

    def answered(self) -> int:
        return sum((self.root / f"agent-{n}.log").read_text().count("answered ") for n in NODES)

    def stop(self) -> None:
        for p in self.agents.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if hasattr(self, "cluster"):
            self.cluster.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("agentcluster"))
    yield s
    s.stop()


def test_50_healthy_jobs_with_the_agent_drain_nothing(setup):
    c = setup.cluster
    before = setup.answered()
    ids = [c.sbatch("#!/bin/sh\ntrue\n", "-N1", "--requeue", "--output=/dev/null")
           for _ in range(50)]
    t0 = time.monotonic()
    for jid in ids:
        job = c.wait_job(jid, timeout=300)
        assert job["JobState"] == "COMPLETED", job
        assert job.get("Restarts") == "0", job
    assert drained_nodes(c) == {}
    assert setup.answered() - before >= 100  # every prolog and epilog answered by an agent
    log = (setup.fleet.root / "hooks.log").read_text()
    assert log.count("prolog node=") >= 50 and "drain:" not in log
    print(f"50 jobs with the agent in {time.monotonic() - t0:.1f}s")


def test_xid79_drains_n3_with_the_in_process_reason(setup, tmp_path):
    c, fleet = setup.cluster, setup.fleet
    for n in NODES:
        c.run("scontrol", "update", f"nodename={n}", f"weight={1 if n == 'n3' else 10}")
    inject_xid(fleet.root / "n3.kmsg", GPU2_PCI, 79, "GPU has fallen off the bus.")
    # The in-process verdict for the same kernel log, from a copy of n3's state (not drained).
    state = fleet.root / "state" / "n3"
    saved = tmp_path / "n3-state"
    if state.exists():
        shutil.copytree(state, saved)
    p = subprocess.run(sg_argv("check", "--json"), env=sg_env(**fleet.env(SLURMD_NODENAME="n3")),
                       capture_output=True, text=True, timeout=60)
    expected = json.loads(p.stdout)["decision"]["reason"]
    assert expected.startswith("slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79"), expected
    shutil.rmtree(state, ignore_errors=True)
    if saved.exists():
        shutil.copytree(saved, state)

    before = setup.answered()
    jid = c.sbatch("#!/bin/sh\necho ran on $SLURMD_NODENAME\n", "-N1", "--requeue",
                   f"--output={tmp_path}/job-%j.out")
    info = c.wait_node("n3", lambda i: i.drained, timeout=120, what="drained by its prolog")
    assert info.reason == expected, info
    assert drained_nodes(c) == {"n3": expected}
    # Requeued by Slurm (the rerun on another node, ~121 s later without the requeue watcher,
    # is test_hooks_slurm's; not waited for here).
    wait_for(lambda: c.job(jid).get("Restarts") == "1", 60, interval=0.5,
             what=f"Slurm to requeue job {jid}")
    assert c.job(jid).get("Restarts") == "1", c.job(jid)
    c.run("scancel", jid)
    assert "answered prolog for n3" in (setup.root / "agent-n3.log").read_text()
    assert setup.answered() > before


def test_agent_path_asks_the_same_blast_radius_permit(setup, tmp_path):
    """Two nodes fail the same check with serve's cap at one drain: the agent-answered prologs
    drain the first and spare the second (exit 0, 'not drained: ...'), as in-process hooks do."""
    from support.sgserve import TOKEN, Serve, new_port, new_store

    c, fleet = setup.cluster, setup.fleet
    port = new_port()
    url = new_store(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    text = fleet.config.read_text().replace("[hooks]\n", f"""[hooks]
report_url = "http://127.0.0.1:{port}/ingest"
token_file = "{token}"
spool_dir = "{tmp_path}/spool"
report_timeout = 10.0
""", 1) + f"""
[store]
url = "{url}"
[serve]
host = "127.0.0.1"
port = {port}
auth = "token"
token_file = "{token}"
[policy]
blast_max_nodes = 1
blast_max_percent = 100.0
"""
    (fleet.root / "new.toml").write_text(text)
    os.replace(fleet.root / "new.toml", fleet.config)  # the agents reload it
    srv = Serve(fleet.config, port, env={"SLURM_CONF": str(c.conf_path)}).start()
    try:
        for n in ("n1", "n2"):
            inject_xid(fleet.root / f"{n}.kmsg", GPU2_PCI, 79, "GPU has fallen off the bus.")
        first = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n1", "--requeue", "--output=/dev/null")
        info = c.wait_node("n1", lambda i: i.drained, timeout=120, what="drained by its prolog")
        assert info.reason.startswith("slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79")
        second = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n2", "--output=/dev/null")
        job = c.wait_job(second, timeout=120)
        assert job["JobState"] == "COMPLETED", job  # spared: exit 0, the job ran
        assert not c.node("n2").drained
        log = (fleet.root / "hooks.log").read_text()
        assert "node=n2 drain: slurmguard: gpu-xid" in log and "not drained: " in log
        assert "answered prolog for n2" in (setup.root / "agent-n2.log").read_text()
        c.run("scancel", first)
    finally:
        srv.stop()
