"""The test Node-API server against two real clients: the official Python client and kubectl."""
# ruff: noqa: F811  (pytest fixtures imported by name and used as arguments)

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time

import pytest
from k8sapi.fixture import core_api, k8sapi  # noqa: F401 - fixture
from k8sapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from k8sapi.server import NodeAPIServer
from kubernetes import client, watch
from support.helpers import require


def test_list_get_models_deserialize(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    k8sapi.add_node("n2", ready=False, labels={"slurm": "n2"})
    api = core_api(k8sapi.url)
    lst = api.list_node()
    assert [n.metadata.name for n in lst.items] == ["n1", "n2"]
    assert int(lst.metadata.resource_version) >= 102
    ready = {c.type: c.status for c in lst.items[1].status.conditions}["Ready"]
    assert ready == "False"
    assert [n.metadata.name for n in api.list_node(label_selector="slurm=n2").items] == ["n2"]
    assert [n.metadata.name for n in api.list_node(field_selector="metadata.name=n1").items] == ["n1"]
    assert api.read_node("n2").metadata.labels["slurm"] == "n2"


def test_errors_are_status_objects(k8sapi: NodeAPIServer) -> None:
    api = core_api(k8sapi.url)
    with pytest.raises(client.ApiException) as exc:
        api.read_node("nope")
    assert exc.value.status == 404
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404


def test_strategic_patch_replaces_taints_and_merges_conditions(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    api.patch_node("n1", {"spec": {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}]}})
    n = api.patch_node("n1", {"spec": {"taints": [{"key": "b", "value": "2", "effect": "NoSchedule"}]}})
    assert [t.key for t in n.spec.taints] == ["b"]  # taints have no merge strategy: replaced
    assert k8sapi.faults.requests[-1][2].startswith("application/strategic-merge-patch+json")
    n = api.patch_node_status("n1", {"status": {"conditions": [
        {"type": "SlurmguardHealthy", "status": "False", "reason": "SlurmDrained", "message": "x"}]}})
    types = [c.type for c in n.status.conditions]
    assert types == ["MemoryPressure", "Ready", "SlurmguardHealthy"]  # merged on "type"
    n = api.patch_node_status("n1", {"status": {"conditions": [
        {"type": "SlurmguardHealthy", "$patch": "delete"}]}})
    assert [c.type for c in n.status.conditions] == ["MemoryPressure", "Ready"]


def test_status_subresource_and_main_resource_are_separate(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    # a spec change through /status is ignored, and a status change through the main resource too
    api.patch_node_status("n1", {"spec": {"unschedulable": True}})
    api.patch_node("n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    obj = k8sapi.node("n1")
    assert "unschedulable" not in obj["spec"]
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"] == "True"


def test_merge_and_json_patch_over_the_wire(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    api.api_client.call_api  # noqa: B018 - the client exists
    k8sapi.edit("n1", lambda o: o["metadata"]["annotations"].update(a="1", b="2"))
    # merge patch: null deletes a key
    _raw_patch(k8sapi.url, "n1", {"metadata": {"annotations": {"a": None}}},
               "application/merge-patch+json")
    assert k8sapi.node("n1")["metadata"]["annotations"] == {"b": "2"}
    _raw_patch(k8sapi.url, "n1", [{"op": "test", "path": "/metadata/annotations/b", "value": "2"},
                                  {"op": "add", "path": "/spec/unschedulable", "value": True}],
               "application/json-patch+json")
    assert k8sapi.node("n1")["spec"]["unschedulable"] is True
    code = _raw_patch(k8sapi.url, "n1", [{"op": "test", "path": "/metadata/annotations/b", "value": "9"}],
                      "application/json-patch+json")
    assert code == 422
    assert _raw_patch(k8sapi.url, "n1", {}, "application/yaml") == 415


def _raw_patch(url: str, name: str, body: object, ctype: str) -> int:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{url}/api/v1/nodes/{name}", method="PATCH",
                                 data=json.dumps(body).encode(), headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        assert json.loads(exc.read())["kind"] == "Status"
        return exc.code


def test_stale_resource_version_conflicts(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    old = api.read_node("n1")
    api.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})  # someone else writes
    with pytest.raises(client.ApiException) as exc:  # PUT with the stale version
        api.replace_node("n1", old)
    assert exc.value.status == 409
    with pytest.raises(client.ApiException) as exc:  # PATCH with a stale precondition
        api.patch_node("n1", {"metadata": {"resourceVersion": old.metadata.resource_version},
                              "spec": {"unschedulable": True}})
    assert exc.value.status == 409
    fresh = api.read_node("n1")
    fresh.spec.unschedulable = True
    new = api.replace_node("n1", fresh)
    assert new.spec.unschedulable is True
    assert int(new.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_watch_streams_changes_from_resource_version(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    rv = api.list_node().metadata.resource_version
    threading.Timer(0.2, lambda: k8sapi.set_condition("n1", "Ready", "False")).start()
    w = watch.Watch()
    seen = []
    for ev in w.stream(api.list_node, resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    assert seen == [("MODIFIED", "n1")]


def test_watch_too_old_version_is_gone(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    rv = api.list_node().metadata.resource_version
    k8sapi.set_condition("n1", "Ready", "False")
    k8sapi.compact()
    with pytest.raises(client.ApiException) as exc:
        for _ in watch.Watch().stream(api.list_node, resource_version=rv, timeout_seconds=2):
            pass
    assert exc.value.status == 410


def test_dropped_watch_ends_stream(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    rv = api.list_node().metadata.resource_version
    threading.Timer(0.3, k8sapi.drop_watches).start()
    import urllib3

    start = time.monotonic()
    # the connection is cut mid-stream: the client sees a truncated chunked response
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(watch.Watch().stream(api.list_node, resource_version=rv, timeout_seconds=20))
    assert time.monotonic() - start < 10


def test_injected_5xx_and_delay(k8sapi: NodeAPIServer) -> None:
    k8sapi.add_node("n1")
    api = core_api(k8sapi.url)
    k8sapi.faults.fail_next, k8sapi.faults.fail_code = 1, 503
    with pytest.raises(client.ApiException) as exc:
        api.list_node()
    assert exc.value.status == 503
    assert len(api.list_node().items) == 1  # only the next one failed
    k8sapi.faults.delay = 1.5
    with pytest.raises(Exception) as slow:
        api.list_node(_request_timeout=0.3)
    assert "timed out" in str(slow.value).lower() or "timeout" in type(slow.value).__name__.lower()
    k8sapi.faults.delay = 0


def test_kubectl_get_and_cordon(k8sapi: NodeAPIServer, tmp_path) -> None:
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed")
    k8sapi.add_node("n1")
    k8sapi.add_node("n2", ready=False)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    out = subprocess.run([kubectl, "--server", k8sapi.url, "get", "nodes", "-o", "json"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert [i["metadata"]["name"] for i in items] == ["n1", "n2"]
    out = subprocess.run([kubectl, "--server", k8sapi.url, "cordon", "n2"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert k8sapi.node("n2")["spec"]["unschedulable"] is True


# -- the patch functions on their own --------------------------------------------------------

def test_patch_functions_table() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}
    assert merge_patch({"l": [1, 2]}, {"l": [3]}) == {"l": [3]}
    base = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    got = strategic_merge_patch(base, {"status": {"conditions": [{"type": "X", "status": "True"}]}})
    assert [c["type"] for c in got["status"]["conditions"]] == ["Ready", "X"]
    got = strategic_merge_patch(base, {"status": {"conditions": [{"$patch": "replace"}, {"type": "Y"}]}})
    assert got["status"]["conditions"] == [{"type": "Y"}]
    with pytest.raises(PatchError):
        json_patch({"a": 1}, [{"op": "move", "path": "/a", "from": "/b"}])
    assert json_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}]) == {"a": [1, 2]}
