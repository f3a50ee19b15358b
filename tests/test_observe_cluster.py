"""Observe mode holds on every acting path of a real Slurm cluster (docs/policy.md, "Observe
mode"): one 4-node cluster for the module, every node observing, every slurmguard process
(the hooks, the allocation gate, serve's policy, lemon and repair passes, the requeue
watcher, a job's wrapper, burn-in, the reconciler) pointed at a Slurm shim
(tests/support/slurmshim.py) that forwards reads and refuses and logs every call that would
change Slurm, and the reconciler at the Kubernetes Node-API test server (tests/k8sapi/), whose
request log says whether anything was written. The scenarios are the acting ones of the
real-cluster suite (test_guard_cluster, test_drain_notice, test_requeue_watch,
test_policy_slurm's lemons, test_burnin_cluster, test_gate_risk, test_repair_cluster,
test_reconcile_e2e), each run here in observe mode, in order, on the one cluster:

1. health checks, prologs and the gate with a mount missing everywhere; a probation mark;
2. a drain by someone else (NHC) under a wrapped job and under a requeued one: the drain
   notice and the requeue watcher;
3. a lemon: serve's lemon drain, the gate on a lemon, burn-in submitting for it;
4. the risk gate refusing an at-risk node to a large job;
5. repair of a node slurmguard drained before (repair.mode = "act": policy.mode wins);
6. the reconciler: a cordon and taint, a Slurm drain, an unmark and an undrain.

Each path writes its would-event once per episode (a second pass writes nothing) and changes
nothing: after each scenario the shim's change log is empty, and the Node-API server saw no
write. Every job completes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from k8sapi.server import NodeAPIServer
from support.gatehook import gate_cluster
from support.helpers import REPO, require, run_sg, sg_argv, sg_env
from support.sgserve import Serve, job_token_line, new_port, new_store, write_config
from support.slurmcluster import write_hook_script
from support.slurmshim import SlurmShim
from support.wait import counter_advanced, wait_for

from slurmguard.store import Store

pytestmark = pytest.mark.slurm

TRAIN = REPO / "tests" / "train_job.py"
LONG_AGO = "2020-01-01T00:00:00Z"
NHC = "NHC: check_fs_mount: /scratch not mounted"
FS_DRAIN = "slurmguard: fs-mount: /shared not mounted"  # a drain of ours from acting days


@dataclass
class Rig:
    c: Any  # the cluster
    shim: SlurmShim
    kube: NodeAPIServer
    cfg: Path  # what every slurmguard process reads (the shim's tools)
    store: Store
    serve: Serve
    tmp: Path
    mountinfo: Path
    table: str  # the mount table without the shared mount

    def env(self, **extra: str) -> dict[str, str]:
        return sg_env(SLURMGUARD_CONFIG=str(self.cfg), SLURM_CONF=self.c.env["SLURM_CONF"],
                      **extra)

    def sg(self, *args: str, **extra: str) -> Any:
        return run_sg(*args, env=self.env(**extra))

    def healthcheck(self, node: str) -> int:
        p = self.sg("healthcheck", SLURMD_NODENAME=node)
        assert "would drain (observe)" in p.stderr or "ok" in p.stderr, p.stderr
        return p.returncode

    def would(self, node: str | None = None, since: float = 0.0) -> list[Any]:
        """The would-events (oldest first), of ``node`` or all, since ``since``."""
        evs = self.store.nodes.events(node=node, since=since, kinds=[
            "would_drain", "would_drain_refused", "would_act", "would_end"])
        return sorted(evs, key=lambda e: (e.at, e.id))

    def site(self, *args: str) -> None:
        """A change made by someone else (NHC, an admin): the real scontrol, not the shim."""
        self.c.run("scontrol", *args)

    def undrain(self, *nodes: str) -> None:
        """Back in service for the next scenario (the site's UNDRAIN), and answering: right
        after it Slurm marks a node NOT_RESPONDING until its next ping."""
        for n in nodes:
            self.site("update", f"nodename={n}", "state=undrain")
        for n in nodes:
            self.c.wait_node(n, lambda i: not i.drained and not i.not_responding, timeout=30)

    def passes(self, n: int) -> None:
        """Wait for ``n`` more of serve's policy passes (each a repair pass too)."""
        counter_advanced(self.serve.policy_passes, by=n, what="serve's policy passes")

    def nothing_changed(self) -> None:
        assert self.shim.changes() == []
        writes = [r for r in self.kube.faults.requests if r[0] not in ("GET", "HEAD")]
        assert writes == [], writes


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    from support import slurmcluster

    missing = slurmcluster.missing_components()
    require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
    require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
    tmp = tmp_path_factory.mktemp("observe")
    shim = SlurmShim(tmp / "shim")
    kube = NodeAPIServer().start()
    url, port = new_store(tmp), new_port()
    shared = tmp / "shared"
    shared.mkdir()
    mountinfo = tmp / "mountinfo"  # the mount table the check reads: shared not in it
    table = Path("/proc/self/mountinfo").read_text()
    mountinfo.write_text(table)
    # serve's [risk] is left out: its pass would re-score the nodes the risk gate reads.
    risk = "\n[risk]\ngate_max_nodes = 2\n"
    cfg = write_config(tmp, store_url=url, port=port, report_timeout=60.0, extra=f"""
log_file = "{tmp}/hooks.log"
prolog = ["fs-mount"]
healthcheck = ["fs-mount"]
[checks.fs]
mounts = ["/", "{shared}"]
mountinfo = "{mountinfo}"
[policy]
mode = "observe"
blast_max_percent = 50.0
second_look_delay = 1.0
[gate]
log_file = "{tmp}/gate.log"
[requeue]
state_file = "{tmp}/watch.json"
[notice]
serve_url = "http://127.0.0.1:{port}"
interval = 0.5
slurm_interval = 3.0
{job_token_line(tmp)}
[repair]
mode = "act"
[reconcile]
api_url = "{kube.url}"
timeout = 3.0
not_ready_grace = 30.0
min_hold = 0.0
{shim.config()}{risk}""", serve_extra="policy_interval = 1.0")
    serve_cfg = tmp / "serve.toml"
    serve_cfg.write_text(cfg.read_text().replace(risk, "\n"))
    base = {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SLURMGUARD_CONFIG": str(cfg),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    prolog = write_hook_script(tmp / "prolog", sg_argv("prolog"), base)
    clusters: list[Any] = []

    def factory(**kw: Any) -> Any:
        clusters.append(slurmcluster.Cluster.start(tmp_path_factory.mktemp("slurm"), **kw))
        return clusters[-1]

    try:
        c = gate_cluster(factory, tmp, cfg, 4, prolog=prolog, timeout=120)
        # Jobs' wrappers: this checkout and the observing config
        c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfg),
                     SLURMGUARD_PROGRESS_INTERVAL="0")
        for n in c.nodes:
            kube.add_node(n)
        serve = Serve(serve_cfg, port, env={"SLURM_CONF": c.env["SLURM_CONF"]}).start()
        store = Store.open(url=url)
        try:
            yield Rig(c, shim, kube, cfg, store, serve, tmp, mountinfo, table)
        finally:
            store.close()
            serve.stop()
    finally:
        for c in clusters:
            c.stop()
        kube.stop()


def test_health_checks_prologs_and_the_gate_drain_nothing(rig: Rig) -> None:
    """A mount missing on all 4 nodes, cap 2: the health checks would drain 2, hold 2 for
    a second look as when acting, and at their second look would be refused 2 (the guard
    counts would-drains), and drain none; 4 jobs flow through the gate
    (PrologSlurmctld) and the prolog, both of which see the fault, and complete (the prolog
    exits 0, the gate lets them through) with one would-event per node still (once per
    episode, not per pass or path); the mount comes back, each node's episode ends, and a node
    returned on probation gets its probation mark withheld, as a would_act."""
    c, store = rig.c, rig.store

    def would() -> list[tuple[str, str]]:
        return sorted((e.node, e.kind) for e in store.nodes.events(
            kinds=["would_drain", "would_drain_refused"]))

    for n in c.nodes:  # one after another: serve ingests each record before the next
        assert rig.healthcheck(n) == 0
        wait_for(lambda n=n: store.nodes.events(node=n, kinds=["would_drain", "drain_held"]), 30,
                 interval=0.2, what=f"{n}'s would-drain or hold")
    assert [k for _, k in would()] == ["would_drain"] * 2
    held = sorted(e.node for e in store.nodes.events(kinds=["drain_held"]))
    assert held == c.nodes[2:], held  # as when acting: the 3rd and 4th wait for a second look
    time.sleep(1.2)  # policy.second_look_delay: their next checks are the second look
    for n in held:
        assert rig.healthcheck(n) == 0
    wait_for(lambda: len(would()) == 4, 30, interval=0.5, what="4 would-events")
    assert sorted(k for _, k in would()) == ["would_drain"] * 2 + ["would_drain_refused"] * 2
    jobs = [c.sbatch("#!/bin/sh\ntrue\n", "--output=/dev/null") for _ in range(4)]
    for j in jobs:
        c.wait_job(j, timeout=120)
    gate_log = (rig.tmp / "gate.log").read_text()
    assert "observe mode, would refuse" in gate_log, gate_log
    rig.passes(2)  # policy passes over the jobs' prolog records
    assert len(would()) == 4, would()  # once per episode, whatever the passes and paths
    vias = {e.details.get("via") for e in store.nodes.events(kinds=["would_drain",
                                                                    "would_drain_refused"])}
    assert vias == {"healthcheck"}, vias
    # the mount is back: the episodes end; a node returned on probation
    root = next(x for x in rig.table.splitlines() if x.split()[4] == "/").split(" ")
    rig.mountinfo.write_text(rig.table + " ".join([*root[:4], str(rig.tmp / "shared"),
                                                   *root[5:]]) + "\n")
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(rig.healthcheck, c.nodes)) == [0] * 4
    wait_for(lambda: len(store.nodes.events(kinds=["would_end"])) == 4, 30, interval=0.5,
             what="4 would_end events")
    store.nodes.return_node("n4", "admin:test", "tested")
    assert rig.healthcheck("n4") == 0  # a fresh record: serve's pass looks at n4 now
    marks = wait_for(lambda: store.nodes.events(node="n4", kinds=["would_act"]), 30,
                     interval=0.5, what="the probation mark withheld")
    assert [(e.source, e.details["verb"]) for e in marks] == [("features", "features")]
    rig.passes(2)  # more passes: still one
    assert len(store.nodes.events(node="n4", kinds=["would_act"])) == 1
    rig.nothing_changed()
    calls = rig.shim.calls()
    # the shim was in the path: serve's reads (the health checks ask serve for their state)
    assert any(x.startswith("scontrol show") for x in calls), calls[:20]
    for n in c.nodes:
        info = c.node(n)
        assert not info.drained and "sg_probation" not in info.features, info
    for j in jobs:
        assert c.job(j)["JobState"] == "COMPLETED" and c.job(j).get("Restarts") == "0"


def _watch(rig: Rig) -> list[dict[str, Any]]:
    r = rig.sg("requeue", "watch", "--once", "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_drain_notices_and_the_requeue_watcher_act_on_no_drain(rig: Rig) -> None:
    """NHC drains n2 under a wrapped training job that has a checkpoint to resume from (acting,
    its wrapper would checkpoint now and end the run for a requeue), and n3 under a job that
    the site then requeues (acting, the watcher would exclude n3 and make the job eligible
    now). Observing: the wrapped run goes on to success, the requeued job keeps its
    ExcNodeList and EligibleTime; the ledger holds one would_act ``notice`` of n2 and one
    ``update_job`` of n3, whatever the polls."""
    c, t0 = rig.c, time.time()
    d = rig.tmp / "wrapped"
    ck = d / "ckpt"
    ck.mkdir(parents=True)
    train = (f"{sys.executable} {TRAIN} --steps 48 --every 8 --sleep 0.25 --ckpt-dir {ck} "
             f"--log {d}/steps.log --final {d}/final --told {d}/told --notice-poll")
    wrapped = c.sbatch(f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir "
                       f"{ck} -- {train}\n", "-w", "n2", f"--output={d}/job.out")
    plain = c.sbatch("#!/bin/sh\nsleep 120\n", "-w", "n3", "--requeue", "--output=/dev/null")
    c.wait_job(wrapped, ["RUNNING"], timeout=60)
    c.wait_job(plain, ["RUNNING"], timeout=60)
    wait_for(lambda: (d / "steps.log").exists() and len(
        (d / "steps.log").read_text().splitlines()) >= 10, 60, what="a checkpoint of the job")
    assert _watch(rig) == []  # the watcher sees both run (and remembers their nodes)
    rig.site("update", "nodename=n2", "state=drain", f"reason={NHC}")
    rig.site("update", "nodename=n3", "state=drain", f"reason={NHC}")
    notice = wait_for(lambda: rig.store.nodes.events(node="n2", kinds=["would_act"], since=t0),
                      30, interval=0.5, what="the drain notice's would-event")
    rig.site("requeue", plain)
    events: list[dict[str, Any]] = []

    def would_expedite() -> bool:
        events.extend(_watch(rig))
        return any(e["event"] == "requeue-would-expedite" for e in events)

    wait_for(would_expedite, 60, interval=0.5, what="the watcher's would-expedite")
    for _ in range(2):  # more polls: nothing more
        assert _watch(rig) == []
    done = c.wait_job(wrapped, ["COMPLETED"], timeout=90)
    requeued = c.job(plain)
    c.run("scancel", plain)
    rig.undrain("n2", "n3")
    rig.nothing_changed()
    # The wrapped run: told, recorded, not ended; the requeued job untouched.
    (run,) = [json.loads(x) for x in (ck / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    assert run["verdict"] == "success" and run["ended_by_notice"] is None, run
    assert run["observed_notices"] == ["n2"] and run["notices"][0]["via"] == "serve"
    out = (d / "job.out").read_text()
    assert "n2 observes (policy.mode): would ask the job for a checkpoint" in out, out
    assert "asked the job for a checkpoint now" not in out and not (d / "told").exists()
    assert done["Restarts"] == "0"
    assert requeued["Restarts"] == "1" and requeued.get("ExcNodeList") in (None, "(null)", "")
    (exp,) = [e for e in events if e["event"] == "requeue-would-expedite"]
    assert exp["failed_nodes"] == ["n3"] and exp["exclude"] == "n3"
    (n,) = notice
    assert (n.source, n.details["job"], n.details["via"]) == ("notice", wrapped, "notice")
    acts = [(e.node, e.source, e.details.get("via")) for e in rig.would(since=t0)]
    assert acts == [("n2", "notice", "notice"), ("n3", "update_job", "requeue")], acts
    # no recovery recorded that did not happen
    assert not [e for e in rig.store.nodes.events(kinds=["state_change"], since=t0)
                if e.source == "requeue"]


def test_a_lemon_is_neither_drained_nor_burned_in(rig: Rig) -> None:
    """n1 drained three times by admins within the window: a lemon. Serve's lemon drain is a
    would_drain (via policy), once: its passing health checks and a job's prolog do not end
    the episode (acting, a lemon's drain stands whatever its checks say), and the gate on the
    lemon lets the job run. `burnin submit` for the node awaiting burn-in writes a would_act
    (sbatch) instead of a job, once for two runs."""
    c, store, t0 = rig.c, rig.store, time.time()
    for i in range(3):
        store.nodes.record_event("n1", "drain", "admin:ops", f"bad DIMM, try {i}", at=t0 - 600 + i)
    assert rig.healthcheck("n1") == 0  # a fresh record: serve's pass finds the lemon
    (w,) = wait_for(lambda: rig.would("n1", since=t0), 30, interval=0.5, what="the lemon's drain")
    # (allowed or refused: the guard's cap for its cause, the first scenario's fs-mount, may
    # be full; either way counted and written once)
    assert w.kind in ("would_drain", "would_drain_refused") and w.details["via"] == "policy", w
    assert w.reason.startswith("slurmguard: lemon: "), w
    job = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n1", "--output=/dev/null")
    assert c.wait_job(job, timeout=60)["JobState"] == "COMPLETED"
    assert rig.healthcheck("n1") == 0
    for _ in range(2):
        r = rig.sg("burnin", "submit", "n1", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        (sub,) = json.loads(r.stdout)["submitted"]
        assert sub["observed"] and sub["job_id"] is None and sub["awaiting_burnin"], sub
    rig.passes(2)  # policy passes over the new records
    got = [(e.kind, e.source, e.details.get("via")) for e in rig.would("n1", since=t0)]
    assert got == [(w.kind, w.source, "policy"), ("would_act", "sbatch", "burnin")], got
    assert f"job {job}: observe mode, would refuse 1 of 1 nodes: n1: slurmguard: lemon" in \
        (rig.tmp / "gate.log").read_text()
    rig.nothing_changed()
    assert not c.node("n1").drained
    assert "sg-burnin" not in c.run("squeue", "-h", "-o", "%j").stdout


def test_the_risk_gate_refuses_no_job(rig: Rig) -> None:
    """n2 at risk, risk.gate_max_nodes = 2: acting, the gate would refuse n2 to each 3-node
    job (room is left elsewhere). Observing, both jobs run on n2, one would_act
    (risk_refused) per job is written (a refusal's episode is its job: passing checks do not
    end a node's risk), and no risk_refused event the requeue watcher would follow."""
    c, store, t0 = rig.c, rig.store, time.time()
    store.nodes.set_risk({"n1": 0.0, "n2": 60.0, "n3": 0.0, "n4": 0.0}, t0)
    jobs = [c.sbatch("#!/bin/sh\ntrue\n", "-N3", "-x", "n1", "--output=/dev/null")
            for _ in range(2)]
    for j in jobs:
        done = c.wait_job(j, timeout=60)
        assert done["NodeList"] == "n[2-4]" and done["Restarts"] == "0", done
    rig.passes(2)  # over the prologs' passing records: n4's probation mark still stands
    got = sorted((e.node, e.kind, e.source, e.details.get("job")) for e in rig.would(since=t0))
    # (n2's prolog ends the drain notice's episode of the last scenario; a risk refusal's
    # episode is its job, and a pass ends no probation mark's)
    assert got == sorted([("n2", "would_end", "", None)] + [
        ("n2", "would_act", "risk_refused", j) for j in jobs]), got
    assert not store.nodes.events(kinds=["risk_refused"])
    assert f"job {jobs[1]}: observe mode, would refuse 1 of 3 nodes for node risk: n2" in \
        (rig.tmp / "gate.log").read_text()
    store.nodes.set_risk({"n2": 0.0}, time.time())
    rig.nothing_changed()


def test_repair_observes_whatever_repair_mode_says(rig: Rig) -> None:
    """n3 drained by slurmguard before its group observed (the drain is real, the ledger's),
    repair.mode = "act": serve's repair pass writes repair_observe once and takes no rung; the
    node's health check, whose check passes, does not undrain it."""
    from support.repairrig import XID79, record

    from slurmguard import config
    from slurmguard.node import delivery

    c, store, t0 = rig.c, rig.store, time.time()
    assert c.cli().drain("n3", XID79)  # as acting did, earlier
    assert delivery.deliver(record("n3", "prolog", healthy=False, applied="drained"),
                            config.load(str(rig.cfg), env={})) == "sent"
    obs = wait_for(lambda: store.nodes.events(node="n3", kinds=["repair_observe"], since=t0), 30,
                   interval=0.5, what="repair_observe of n3")
    rig.passes(2)  # more passes (each with repair's): still one record, nothing done
    assert len(store.nodes.events(node="n3", kinds=["repair_observe"], since=t0)) == len(obs) == 1
    assert not store.nodes.events(node="n3", kinds=["repair_start", "repair_rung"])
    rig.nothing_changed()
    info = c.node("n3")
    assert info.drained and info.ours  # still drained, ours, untouched
    assert "sg_repair_n3" not in c.run("scontrol", "show", "reservation").stdout
    # The node's own health check clears a drain of ours whose check passes again (acting):
    # withheld, and serve writes the would_act from its record, once.
    rig.site("update", "nodename=n3", "state=drain", f"reason={FS_DRAIN}")
    # The health check takes n3's state from serve's view: once that view shows the drain.
    wait_for(lambda: rig.serve.node_state("n3")["reason"] == FS_DRAIN, 30, interval=0.2,
             what="serve's view of n3's drain")
    for _ in range(2):
        p = rig.sg("healthcheck", SLURMD_NODENAME="n3")
        assert p.returncode == 0 and "would undrain (observe)" in p.stderr, p.stderr
    undrains = wait_for(lambda: store.nodes.events(node="n3", kinds=["would_act"], since=t0), 30,
                        interval=0.5, what="the health check's would-undrain")
    rig.passes(1)
    assert [(e.source, e.details["via"]) for e in store.nodes.events(
        node="n3", kinds=["would_act"], since=t0)] == [("undrain", "healthcheck")], undrains
    assert c.node("n3").drained
    rig.nothing_changed()
    rig.undrain("n3")


def test_the_reconciler_writes_nothing_to_kubernetes_or_slurm(rig: Rig) -> None:
    """Acting, one round would cordon and taint n3 (NHC drained it in Slurm), drain n2 in
    Slurm (its Node NotReady past the grace), take slurmguard's old marks off n4's Node and
    undrain n1's old "slurmguard: k8s:" drain. Observing, two rounds write nothing to either
    side and one would-event each to the ledger."""
    from slurmguard.contract import CORDONED_BY, CORDONED_BY_US, MARKED_AT, TAINT_KEY

    c, kube, t0 = rig.c, rig.kube, time.time()
    rig.site("update", "nodename=n3", "state=drain", f"reason={NHC}")
    rig.site("update", "nodename=n1", "state=drain", "reason=slurmguard: k8s: Node NotReady")
    kube.set_condition("n2", "Ready", "False", "KubeletNotReady", "PLEG", since=LONG_AGO)

    def ours(obj: dict[str, Any]) -> None:
        obj["spec"].update(unschedulable=True, taints=[
            {"key": TAINT_KEY, "value": "gpu-xid", "effect": "NoSchedule"}])
        obj["metadata"].setdefault("annotations", {}).update(
            {CORDONED_BY: CORDONED_BY_US, MARKED_AT: LONG_AGO})

    kube.edit("n4", ours)
    before = {n: kube.node(n) for n in c.nodes}
    kube.faults.requests.clear()
    for _ in range(2):
        r = rig.sg("reconcile", "--once", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        out = {o["node"]: (o["action"], o.get("withheld"), o["changed"])
               for o in json.loads(r.stdout)["outcomes"]}
        assert out == {"n1": ("slurm-undrain", True, False), "n2": ("slurm-drain", True, False),
                       "n3": ("k8s-mark", True, False), "n4": ("k8s-unmark", True, False)}, out
    got = sorted((e.node, e.kind, e.source) for e in rig.would(since=t0)
                 if e.details.get("via") == "reconcile")
    assert got == [("n1", "would_act", "undrain"), ("n2", "would_drain", "k8s-NotReady"),
                   ("n3", "would_act", "k8s-cordon"), ("n4", "would_act", "k8s-unmark")], got
    assert {n: kube.node(n) for n in c.nodes} == before
    rig.nothing_changed()
    assert c.node("n1").drained and c.node("n3").drained and not c.node("n2").drained
    rig.undrain("n1", "n3")
