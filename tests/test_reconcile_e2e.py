"""End to end: the real Slurm test cluster, the test Node-API server, `slurmguard reconcile`.

The Slurm side is real (slurmctld + 4 slurmd, scontrol through the Slurm adapter); the
Kubernetes side is the test Node-API server through the official client. The CLI runs as a
real subprocess, the way cron or a systemd unit would run it.
"""
# ruff: noqa: F811  (pytest fixtures imported by name and used as arguments)

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from k8sapi.fixture import k8sapi  # noqa: F401 - fixture
from k8sapi.server import NodeAPIServer, now_rfc3339
from support.helpers import run_sg, sg_env
from support.wait import wait_for

pytestmark = pytest.mark.slurm

ADMIN_REASON = "bad DIMM, ticket 4711"
LONG_AGO = "2020-01-01T00:00:00Z"


def write_config(path: Path, cluster: Any, api_url: str, **extra: Any) -> str:
    rec = {"api_url": api_url, "timeout": 3.0, "not_ready_grace": 30.0, "min_hold": 0.0,
           "interval": 2.0, **extra}
    lines = ["[slurm]"] + [f"{k} = {json.dumps(v)}" for k, v in cluster.slurm_section.items()]
    lines += ["", "[reconcile]"] + [f"{k} = {json.dumps(v)}" for k, v in rec.items()]
    lines += ["", "[policy]", "blast_max_percent = 100.0"]  # the guard: 4 of the 4 test nodes
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def reconcile(cluster: Any, conf: str, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_sg("-c", conf, "reconcile", *args, "--json", env=sg_env(SLURM_CONF=cluster.env["SLURM_CONF"]))
    try:  # --watch prints one JSON line per round: keep the last
        return r.returncode, json.loads(r.stdout.strip().splitlines()[-1] if "--watch" in args else r.stdout)
    except ValueError:
        raise AssertionError(f"rc={r.returncode} stdout={r.stdout!r} stderr={r.stderr!r}") from None


def snapshot(cluster: Any, api: NodeAPIServer) -> dict[str, Any]:
    slurm = {n.name: (n.state, sorted(n.flags - {"NOT_RESPONDING"}), n.reason)
             for n in cluster.cli().nodes()}
    kube = {n: (api.node(n)["spec"], api.node(n)["metadata"].get("annotations"),
                [c for c in api.node(n)["status"]["conditions"] if c["type"] == "SlurmguardHealthy"])
            for n in ("n1", "n2", "n3", "n4")}
    return {"slurm": slurm, "kube": kube}


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_admin_marks_untouched(cluster: Any, api: NodeAPIServer) -> None:
    n1 = cluster.node("n1")
    assert n1.drained and n1.reason == ADMIN_REASON  # the admin's Slurm drain
    n4 = api.node("n4")
    assert n4["spec"].get("unschedulable") is True  # the admin's cordon ...
    assert "slurmguard.io/cordoned-by" not in n4["metadata"]["annotations"]  # ... not claimed


def test_reconcile_rounds_against_real_slurm(slurm_cluster: Any, k8sapi: NodeAPIServer,
                                             tmp_path: Path) -> None:
    c = slurm_cluster
    c.wait_nodes_idle()
    for n in c.nodes:
        k8sapi.add_node(n)
    conf = write_config(tmp_path / "sg.toml", c, k8sapi.url)

    # The world before round 1: an admin drained n1 in Slurm and cordoned n4 in Kubernetes;
    # slurmguard's health check drained n2; n3's kubelet went NotReady long ago.
    c.run("scontrol", "update", "nodename=n1", "state=drain", f"reason={ADMIN_REASON}")
    k8sapi.edit("n4", lambda o: o["spec"].update(unschedulable=True))
    assert c.cli().drain("n2", "slurmguard: gpu-xid: Xid 79 on GPU 3")
    k8sapi.set_condition("n3", "Ready", "False", "KubeletNotReady", "PLEG is not healthy", since=LONG_AGO)

    rc, out = reconcile(c, conf, "--dry-run")
    assert rc == 0 and out["outcomes"] == []
    assert not k8sapi.node("n2")["spec"].get("unschedulable")  # a dry run changes nothing
    planned = {(a["node"], a["action"]) for a in out["actions"]}
    assert {("n1", "k8s-mark"), ("n2", "k8s-mark"), ("n3", "slurm-drain"), ("n4", "slurm-drain")} <= planned

    table = run_sg("-c", conf, "reconcile", env=sg_env(SLURM_CONF=c.env["SLURM_CONF"]))
    assert table.returncode == 0, table.stderr
    head = table.stdout.splitlines()[0].split()
    assert head[:2] == ["node", "Slurm"] and "action" in head and "why" in head
    assert "slurm-drain  k8s: NotReady" in table.stdout
    print(table.stdout)

    rc, out = reconcile(c, conf, "--once")
    assert rc == 0, out
    n2 = k8sapi.node("n2")  # n2: cordoned and tainted within one round
    assert n2["spec"]["unschedulable"] is True
    assert {"key": "slurmguard.io/unhealthy", "value": "gpu-xid", "effect": "NoSchedule"}.items() \
        <= n2["spec"]["taints"][0].items()
    assert n2["metadata"]["annotations"]["slurmguard.io/slurm-reason"].startswith("slurmguard: gpu-xid:")
    n3 = c.node("n3")  # n3: drained in Slurm because Kubernetes says NotReady
    assert n3.drained and n3.reason == "slurmguard: k8s: NotReady"
    assert c.node("n4").reason == "slurmguard: k8s: cordoned"
    assert_admin_marks_untouched(c, k8sapi)
    assert k8sapi.node("n1")["spec"]["taints"][0]["value"] == "slurm-drain"

    # Round 2 is quiet: nothing is echoed back (n3's k8s drain does not cordon n3).
    rc, out = reconcile(c, conf, "--once")
    assert rc == 0 and out["outcomes"] == [], out["outcomes"]
    assert not k8sapi.node("n3")["spec"].get("unschedulable")
    assert_admin_marks_untouched(c, k8sapi)

    # Heal both sides; but first a round in which the API server fails: nothing changes.
    assert c.cli().undrain("n2")
    k8sapi.set_condition("n3", "Ready", "True", "KubeletReady", "kubelet is posting ready status")
    before = snapshot(c, k8sapi)
    for code in (500, 503):
        k8sapi.faults.fail_all, k8sapi.faults.fail_code = True, code
        rc, out = reconcile(c, conf, "--once")
        assert rc == 4 and out["failed"] == ["kubernetes"] and f"HTTP {code}" in out["errors"][0]
        assert snapshot(c, k8sapi) == before
    k8sapi.faults.fail_all = False
    dead = write_config(tmp_path / "dead.toml", c, f"http://127.0.0.1:{dead_port()}")
    rc, out = reconcile(c, dead, "--once")
    assert rc == 4 and out["failed"] == ["kubernetes"] and out["outcomes"] == []
    assert snapshot(c, k8sapi) == before
    # only writes failing: the round reads, tries, reports the failures, and Slurm is not
    # touched on account of Kubernetes writes
    k8sapi.faults.only_writes, k8sapi.faults.fail_all = True, True
    rc, out = reconcile(c, conf, "--once")
    assert rc == 4 and {o["action"] for o in out["outcomes"] if not o["ok"]} == {"k8s-unmark"}
    k8sapi.faults.only_writes = k8sapi.faults.fail_all = False
    assert k8sapi.node("n2")["spec"]["unschedulable"] is True

    rc, out = reconcile(c, conf, "--once")
    assert rc == 0, out
    n2 = k8sapi.node("n2")
    assert not n2["spec"].get("unschedulable") and not n2["spec"].get("taints")
    assert not any(k.startswith("slurmguard.io/") for k in n2["metadata"]["annotations"])
    cond = [x for x in n2["status"]["conditions"] if x["type"] == "SlurmguardHealthy"]
    assert cond and cond[0]["status"] == "True"
    assert not c.node("n3").drained  # our k8s drain undone
    assert_admin_marks_untouched(c, k8sapi)
    assert c.node("n4").reason == "slurmguard: k8s: cordoned"  # the cordon is still there

    # The admin uncordons n4: our Slurm drain of n4 goes; their cordon was never touched.
    k8sapi.edit("n4", lambda o: o["spec"].pop("unschedulable"))
    rc, out = reconcile(c, conf, "--once")
    assert rc == 0 and not c.node("n4").drained
    rc, out = reconcile(c, conf, "--watch", "--rounds", "2")  # the service loop, quiet now
    assert rc == 0 and out["outcomes"] == [] and out["mode"] == "watch"
    assert c.node("n1").reason == ADMIN_REASON


def test_conflict_rereads_and_keeps_the_other_writer(slurm_cluster: Any, k8sapi: NodeAPIServer) -> None:
    from slurmguard import config
    from slurmguard.adapters.k8s import KubeNodes
    from slurmguard.reconcile.apply import Reconciler

    c = slurm_cluster
    c.wait_nodes_idle()
    for n in c.nodes:
        k8sapi.add_node(n)
    section = {**config.defaults()["reconcile"], "api_url": k8sapi.url, "min_hold": 0.0}
    rec = Reconciler(section, c.cli(), KubeNodes(section), policy=config.defaults()["policy"])
    stale = k8sapi.list()["items"]  # what a watch cache held ...
    assert c.cli().drain("n2", "slurmguard: ib-link: mlx5_0 port 1 down")
    k8sapi.edit("n2", lambda o: o["metadata"]["labels"].update(team="infra"))  # ... then a write
    r = rec.round(apply=True, kube_objs=stale)
    assert r.ok, r.to_dict()
    n2 = k8sapi.node("n2")
    assert n2["spec"]["unschedulable"] is True and n2["metadata"]["labels"]["team"] == "infra"
    assert ("PATCH", "/api/v1/nodes/n2") in [(m, p) for m, p, _ in k8sapi.faults.requests]
    assert rec.metrics.get("slurmguard_reconcile_actions_total", action="k8s-mark", result="ok") == 1


def test_watch_loop_follows_events(slurm_cluster: Any, k8sapi: NodeAPIServer, tmp_path: Path) -> None:
    from slurmguard import config
    from slurmguard.adapters.k8s import KubeNodes
    from slurmguard.reconcile.apply import Reconciler
    from slurmguard.reconcile.watch import watch_loop

    c = slurm_cluster
    c.wait_nodes_idle()
    for n in c.nodes:
        k8sapi.add_node(n)
    metrics = tmp_path / "reconcile.prom"
    section = {**config.defaults()["reconcile"], "api_url": k8sapi.url, "min_hold": 0.0,
               "not_ready_grace": 0.0, "metrics_file": str(metrics)}
    from slurmguard.reconcile.metrics import Metrics

    rec = Reconciler(section, c.cli(), KubeNodes(section), metrics=Metrics(str(metrics)),
                     policy={"blast_max_percent": 100.0})
    stop = threading.Event()
    rounds: list[Any] = []
    t = threading.Thread(target=watch_loop, args=(rec,), daemon=True,
                         kwargs={"interval": 20.0, "resync": 300.0, "on_round": rounds.append,
                                 "should_stop": stop.is_set})
    t.start()
    try:
        # the first round has listed the nodes: what follows can only come by the watch
        wait_for(lambda: rounds, 30, what="the first reconcile round")
        # a watch event (not the 20 s poll) must bring the drain
        k8sapi.set_condition("n3", "Ready", "False", "KubeletNotReady", "down", since=now_rfc3339())
        c.wait_node("n3", lambda i: i.drained, timeout=10, what="drained for NotReady")
        # history compacted and the watch cut: the loop relists and keeps going
        k8sapi.compact()
        seen = len(rounds)
        k8sapi.drop_watches()
        wait_for(lambda: len(rounds) > seen, 30, what="a round after the watch was cut")
        k8sapi.set_condition("n3", "Ready", "True", "KubeletReady", "up")
        c.wait_node("n3", lambda i: not i.drained, timeout=10, what="undrained")
    finally:
        stop.set()
        k8sapi.set_condition("n1", "MemoryPressure", "False", "wake", "the watch up")
        t.join(timeout=30)
    assert not t.is_alive()
    text = metrics.read_text()
    assert 'slurmguard_reconcile_actions_total{action="slurm-drain",result="ok"} 1' in text
    assert 'slurmguard_reconcile_actions_total{action="slurm-undrain",result="ok"} 1' in text
