"""slurmguard.adapters.k8s against the test Node-API server, through the official client."""
# ruff: noqa: F811  (pytest fixtures imported by name and used as arguments)

from __future__ import annotations

import socket
import threading
import time

import pytest
from k8sapi.fixture import k8sapi  # noqa: F401 - fixture
from k8sapi.server import NodeAPIServer

from slurmguard.adapters.k8s import KubeConflict, KubeError, KubeGone, KubeNodes
from slurmguard.contract import CORDONED_BY, TAINT_KEY
from slurmguard.reconcile.views import kube_view

NOW = time.time()


def kube(url: str, timeout: float = 3.0) -> KubeNodes:
    return KubeNodes({"api_url": url, "timeout": timeout})


def test_list_and_views(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k8sapi.add_node("n2", ready=False, unschedulable=True)
    items, rv = kube(k8sapi.url).list()
    views = {v.name: v for v in map(kube_view, items)}
    assert rv == k8sapi.list()["metadata"]["resourceVersion"]
    assert views["n1"].ready == "True" and not views["n1"].unschedulable
    assert views["n2"].ready == "False" and views["n2"].cordoned_by_others


def test_mark_keeps_others_taints_and_unmark_removes_only_ours(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k8sapi.edit("n1", lambda o: o["spec"].setdefault("taints", []).append(
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}))
    k = kube(k8sapi.url)
    k.mark(k.get("n1"), taint="gpu-xid", reason="slurmguard: gpu-xid: Xid 79", cordon=True,
           condition=True, now=NOW)
    obj = k8sapi.node("n1")
    assert obj["spec"]["unschedulable"] is True
    assert [(t["key"], t["value"]) for t in obj["spec"]["taints"]] == [
        ("nvidia.com/gpu", "present"), (TAINT_KEY, "gpu-xid")]
    assert obj["metadata"]["annotations"][CORDONED_BY] == "slurmguard"
    v = kube_view(obj)
    assert v.cordoned_by_us and v.our_condition == "False" and v.marked_at is not None
    k.unmark(k.get("n1"), condition=True, now=NOW)
    obj = k8sapi.node("n1")
    assert "unschedulable" not in obj["spec"]
    assert [t["key"] for t in obj["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert not any(a.startswith("slurmguard.io/") for a in obj["metadata"]["annotations"])
    assert kube_view(obj).our_condition == "True"


def test_unmark_leaves_someone_elses_cordon(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n4", unschedulable=True)  # an admin's cordon
    k = kube(k8sapi.url)
    k.mark(k.get("n4"), taint="slurm-drain", reason="maintenance", cordon=False, condition=False, now=NOW)
    assert CORDONED_BY not in k8sapi.node("n4")["metadata"]["annotations"]
    k.unmark(k.get("n4"), condition=False, now=NOW)
    assert k8sapi.node("n4")["spec"]["unschedulable"] is True


def test_stale_write_is_a_conflict(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k = kube(k8sapi.url)
    old = k.get("n1")
    k8sapi.set_condition("n1", "Ready", "False")  # the kubelet writes meanwhile
    with pytest.raises(KubeConflict):
        k.mark(old, taint="x", reason="y", cordon=True, condition=False, now=NOW)
    assert "unschedulable" not in k8sapi.node("n1")["spec"]


@pytest.mark.parametrize("code", [500, 503])
def test_5xx_is_an_error(k8sapi: NodeAPIServer, code: int) -> None:
    k8sapi.add_node("n1")
    k8sapi.faults.fail_all, k8sapi.faults.fail_code = True, code
    with pytest.raises(KubeError, match=f"HTTP {code}"):
        kube(k8sapi.url).list()


def test_timeout_and_unreachable_are_errors(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k8sapi.faults.delay = 2.0
    start = time.monotonic()
    with pytest.raises(KubeError):
        kube(k8sapi.url, timeout=0.3).list()
    assert time.monotonic() - start < 1.9
    k8sapi.faults.delay = 0
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(KubeError, match="kubernetes: list nodes"):
        kube(f"http://127.0.0.1:{port}").list()


def test_watch_events_gone_and_drop(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k = kube(k8sapi.url)
    _, rv = k.list()
    threading.Timer(0.2, lambda: k8sapi.set_condition("n1", "Ready", "False")).start()
    kind, obj = next(iter(k.watch(rv, 5)))
    assert kind == "MODIFIED" and kube_view(obj).ready == "False"
    k8sapi.compact()
    with pytest.raises(KubeGone):
        list(k.watch(rv, 2))
    _, rv = k.list()
    threading.Timer(0.3, k8sapi.drop_watches).start()
    with pytest.raises(KubeError):
        list(k.watch(rv, 10))


def test_cli_slurm_unreadable_fails_closed(k8sapi: NodeAPIServer, tmp_path) -> None:
    import json

    from support.helpers import run_sg

    k8sapi.add_node("n1", ready=False, unschedulable=True)  # would drain Slurm if Slurm were read
    before = k8sapi.node("n1")
    conf = tmp_path / "sg.toml"
    conf.write_text(f'[slurm]\nscontrol = "/bin/false"\n\n[reconcile]\napi_url = "{k8sapi.url}"\n')
    r = run_sg("-c", str(conf), "reconcile", "--once", "--json")
    assert r.returncode == 4, r.stderr
    out = json.loads(r.stdout)
    assert out["failed"] == ["slurm"] and out["actions"] == [] and out["outcomes"] == []
    assert "round failed closed" in r.stderr
    assert k8sapi.node("n1") == before
    assert all(m == "GET" for m, _, _ in k8sapi.faults.requests)
    r = run_sg("-c", str(conf), "reconcile")
    assert r.returncode == 4 and "FAILED CLOSED (nothing changed): slurm:" in r.stdout


def test_cli_bad_config_names_the_key(tmp_path) -> None:
    from support.helpers import run_sg

    conf = tmp_path / "sg.toml"
    conf.write_text('[reconcile]\nname_mapping = "pattern"\nname_pattern = "(["\n')
    r = run_sg("-c", str(conf), "reconcile")
    assert r.returncode == 3
    assert r.stderr.startswith("slurmguard: error: reconcile.name_pattern: not a regular expression")
    conf.write_text('[reconcile]\nmin_hold = "ten"\n')
    r = run_sg("-c", str(conf), "reconcile")
    assert r.returncode == 3 and 'reconcile.min_hold: expected a number, got "ten"' in r.stderr


def test_observe_mode_withholds_every_write_of_an_observing_node(tmp_path, k8sapi: NodeAPIServer) -> None:
    """The Kubernetes choke point (docs/policy.md "Observe mode"): policy.mode observes for
    the Node's Slurm node (a [[group]]), so mark and unmark write nothing; n2 acts."""
    from slurmguard import config
    from slurmguard.reconcile.apply import kube_observer

    p = tmp_path / "sg.toml"
    p.write_text(f'[reconcile]\napi_url = "{k8sapi.url}"\n'
                 '[[group]]\nnodes = "n1"\npolicy.mode = "observe"\n')
    cfg = config.load(str(p), env={})
    k8sapi.add_node("n1")
    k8sapi.add_node("n2")
    k = KubeNodes(cfg.section("reconcile"), observe=kube_observer(cfg))
    before = k8sapi.node("n1")
    for n in ("n1", "n2"):
        k.mark(k.get(n), taint="gpu-xid", reason="slurmguard: gpu-xid: Xid 79", cordon=True,
               condition=True, now=NOW)
    assert k8sapi.node("n1") == before  # not one byte written
    assert k8sapi.node("n2")["spec"]["unschedulable"] is True
    k.unmark(k.get("n1"), condition=True, now=NOW)
    assert k8sapi.node("n1") == before
    assert k.withheld == [("mark node n1", "n1"), ("unmark node n1", "n1")]
