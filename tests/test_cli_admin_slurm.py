"""drain / resume / nodes against a REAL Slurm test cluster (tests/support/slurmcluster.py) and a
SQLite store: ownership of drains, lemon refusal and --force, the admin named in events."""

from __future__ import annotations

import json
import os
import time

import pytest
from support.helpers import require, run_sg, sg_env

from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from support import slurmcluster

    missing = slurmcluster.missing_components()
    require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
    require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
    c = slurmcluster.Cluster.start(tmp_path_factory.mktemp("slurm"), nodes=4)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def env(cluster, tmp_path_factory):
    """Config + store for the CLI, the Slurm env, and a Store handle for the test's own view."""
    from slurmguard.store import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    d = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{d}/sg.db"
    upgrade(make_engine({"url": url}))
    cfg = d / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[slurm]\ntimeout = 20.0\n')
    store = Store.open(url=url)
    yield {"cfg": cfg, "store": store}
    store.close()


def sg(cluster, env, *args: str, user: str = "alice"):
    e = sg_env(SLURM_CONF=cluster.env["SLURM_CONF"], SUDO_USER=user)
    return run_sg("-c", str(env["cfg"]), *args, env=e, timeout=120)


def scontrol(cluster, *args: str) -> None:
    cluster.run("scontrol", *args)


def events(env, node: str) -> list:
    return list(reversed(env["store"].nodes.events(node=node)))  # oldest first


def test_drain_then_resume_roundtrip(cluster, env) -> None:
    r = sg(cluster, env, "drain", "n1", "--reason", "fan swap  on tray 3")
    assert r.returncode == 0, r.stderr
    info = cluster.node("n1")
    assert info.drained and info.reason == "slurmguard: admin: fan swap on tray 3"
    r = sg(cluster, env, "resume", "n1")
    assert r.returncode == 0, r.stderr
    assert not cluster.node("n1").drained
    ev = [(e.kind, e.who, e.reason) for e in events(env, "n1")]
    assert ev == [("drain", "admin:alice", "fan swap on tray 3"), ("clear", "admin:alice", "resumed")]


def test_resume_refuses_a_lemon_until_forced(cluster, env) -> None:
    store = env["store"]
    store.nodes.set_flags("n2", lemon=True, lemon_reason="3 failures in 1h", lemon_since=time.time())
    assert cluster.cli().drain("n2", "slurmguard: lemon: 3 failures in 1h")
    r = sg(cluster, env, "resume", "n2")
    assert r.returncode == 7
    assert "refused: n2: lemon (3 failures in 1h)" in r.stderr and "--force" in r.stderr
    assert cluster.node("n2").drained, "a refused resume leaves the drain"
    r = sg(cluster, env, "resume", "n2", "--force", "--json", user="bob")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["result"] == "resumed"
    assert not cluster.node("n2").drained
    ev = [(e.kind, e.who) for e in events(env, "n2")]
    assert ("clear", "admin:bob") in ev and ("lemon_cleared", "admin:bob") in ev
    clear = next(e for e in events(env, "n2") if e.kind == "clear")
    assert clear.reason.startswith("forced: lemon") and clear.details["force"] is True
    summary = store.nodes.summary(["n2"])[0]
    assert not summary.lemon and summary.probation


def test_resume_refused_while_still_failing(cluster, env) -> None:
    store = env["store"]
    store.nodes.record_results(make_record("n3", "healthcheck",
                                           [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")],
                                           "drain", "slurmguard: gpu-xid: Xid 79"))
    assert cluster.cli().drain("n3", "slurmguard: gpu-xid: Xid 79")
    try:
        r = sg(cluster, env, "resume", "n3")
        assert r.returncode == 7 and "still failing: gpu-xid" in r.stderr
        assert cluster.node("n3").reason == "slurmguard: gpu-xid: Xid 79"
    finally:
        cluster.cli().undrain("n3")


def test_admin_drain_by_others_is_never_touched(cluster, env) -> None:
    scontrol(cluster, "update", "nodename=n4", "state=drain", "reason=maintenance by ops")
    try:
        for args in (["resume", "n4"], ["resume", "n4", "--force"],
                     ["drain", "n4", "--reason", "mine now"]):
            r = sg(cluster, env, *args)
            assert r.returncode == 7, (args, r.stderr)
            assert "maintenance by ops" in r.stderr
            info = cluster.node("n4")
            assert info.drained and info.reason == "maintenance by ops"
        assert events(env, "n4") == [], "nothing changed, nothing recorded"
    finally:
        scontrol(cluster, "update", "nodename=n4", "state=resume")


def test_down_node_is_left_alone(cluster, env) -> None:
    # Stop its slurmd first: with ReturnToService=2 a DOWN node whose slurmd still answers
    # registers again and comes back by itself.
    cluster.kill_slurmd("n4")
    scontrol(cluster, "update", "nodename=n4", "state=down", "reason=slurmguard: test: down")
    try:
        for args in (["resume", "n4", "--force"], ["drain", "n4", "--reason", "x"]):
            r = sg(cluster, env, *args)
            assert r.returncode == 7 and "DOWN" in r.stderr, (args, r.stderr)
            info = cluster.node("n4")
            assert info.down and info.reason == "slurmguard: test: down"
    finally:
        cluster.start_slurmd("n4")
        cluster.run("scontrol", "update", "nodename=n4", "state=resume", check=False)
        cluster.wait_node("n4", lambda i: not i.down and not i.drained, 60, "up")


def test_nodes_listing_joins_slurm_and_store(cluster, env) -> None:
    assert cluster.cli().drain("n3", "slurmguard: gpu-xid: Xid 79")
    try:
        r = sg(cluster, env, "nodes", "n[1-4]", "--json")
        assert r.returncode == 0, r.stderr
        by = {n["name"]: n for n in json.loads(r.stdout)["nodes"]}
        assert set(by) == {"n1", "n2", "n3", "n4"}
        assert "drain" in by["n3"]["state"] and by["n3"]["failing_checks"] == ["gpu-xid"]
        assert by["n1"]["state"].startswith("idle") and by["n1"]["in_slurm"]
        r = sg(cluster, env, "nodes", "--state", "drained", "--json")
        assert [n["name"] for n in json.loads(r.stdout)["nodes"]] == ["n3"]
        text = sg(cluster, env, "nodes").stdout
        assert "n3" in text and "gpu-xid" in text
    finally:
        cluster.cli().undrain("n3")


def test_hostile_names_refused_before_slurm(cluster, env) -> None:
    r = sg(cluster, env, "drain", "n1;reboot", "--reason", "x")
    assert r.returncode == 6 and r.stderr.count("\n") == 1
    r = sg(cluster, env, "drain", "n1", "--reason", "two\nlines")
    assert r.returncode == 0, "newlines collapse into one line"  # check_reason joins them
    assert cluster.node("n1").reason == "slurmguard: admin: two lines"
    assert sg(cluster, env, "resume", "n1").returncode == 0


def test_unknown_node_is_an_input_error_not_a_node_fault(cluster, env) -> None:
    # Exit 1 means "node fault found"; a name neither Slurm nor the store knows is input (6).
    r = sg(cluster, env, "node", "show", "n99")
    assert r.returncode == 6 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
    assert "node: 'n99' is known neither to Slurm (node: not known to Slurm: 'n99') nor to " \
           "the store" in r.stderr
    assert sg(cluster, env, "node", "show", "n1").returncode == 0
    r = sg(cluster, env, "nodes", "--state", "drainedd")
    assert r.returncode == 6 and "--state: not a node state: 'drainedd'" in r.stderr


def test_fleet_report_by_partition_asks_slurm(cluster, env):
    """`fleet report --by partition` (docs/fleet.md): the nodes' partitions come from the real
    Slurm; the node-days and failures per partition from the store."""
    st = env["store"]
    at = time.time() - 3 * 86400
    st.nodes.record_event("n3", "drain", "slurmguard", "slurmguard: gpu-ecc: row remap failed",
                    source="gpu-ecc", at=at)
    st.nodes.record_event("n3", "clear", "admin:ops", "repaired", at=at + 7200)
    p = sg(cluster, env, "fleet", "report", "--since", "7d", "--by", "partition", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    parts = rep["groups"]
    assert sum(g["failures"] for g in parts.values()) == rep["failures"] >= 1
    assert parts[",".join(sorted(cluster.node("n3").partitions))]["failures"] >= 1
    assert rep["mttr_by_cause"]["gpu-ecc"]["median_h"] == 2.0
