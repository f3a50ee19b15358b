"""A small Kubernetes Node-API server for tests (no kube-apiserver can be had here).

It speaks the real wire protocol of the core/v1 Node resource closely enough for the official
``kubernetes`` Python client and for ``kubectl --server URL get nodes -o json``:

- discovery: ``GET /version``, ``/api``, ``/apis``, ``/api/v1``;
- ``GET /api/v1/nodes`` (list, ``labelSelector``, ``fieldSelector=metadata.name=X``) and
  ``GET /api/v1/nodes/NAME`` (+ ``/status``), ``POST`` (create), ``PUT`` (replace; the main
  resource ignores ``status``, ``/status`` ignores everything else), ``PATCH`` with merge,
  strategic-merge and JSON patch, ``DELETE``;
- a global ``resourceVersion``: every write bumps it; a PUT or PATCH that carries a stale
  ``metadata.resourceVersion`` gets ``409 Conflict``;
- watches: ``?watch=true&resourceVersion=RV`` streams newline-delimited ``WatchEvent`` JSON
  in a chunked response; RV older than the retained history gets an ``ERROR`` event with a
  ``410 Gone`` Status (as kube-apiserver does); ``timeoutSeconds`` ends the stream;
- errors are ``Status`` objects with ``code``/``reason``/``message``;
- injected faults (:class:`Faults`): N or all requests answered with a 5xx, a delay before
  every answer, all open watches dropped.

Start it in-process with :class:`NodeAPIServer` (tests) or by hand with
``python tests/k8sapi/server.py --nodes n1,n2`` (prints the URL). See docs/testing.md.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

try:
    from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
except ImportError:  # run as a script
    from patch import PatchError, json_patch, merge_patch, strategic_merge_patch  # type: ignore

_REASONS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
            410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 500: "InternalError",
            502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}

_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_node(name: str, *, ready: bool = True, labels: dict[str, str] | None = None,
              unschedulable: bool = False) -> dict[str, Any]:
    """A minimal but realistic Node object, as a kubelet would register it."""
    t = now_rfc3339()
    spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24"}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                **(labels or {})},
                     "annotations": {}},
        "spec": spec,
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available",
                 "lastHeartbeatTime": t, "lastTransitionTime": t},
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else "KubeletNotReady",
                 "message": "kubelet is posting ready status" if ready else "container runtime down",
                 "lastHeartbeatTime": t, "lastTransitionTime": t},
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.30.0", "kubeProxyVersion": "v1.30.0",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "6.1.0-18-amd64",
                         "containerRuntimeVersion": "containerd://1.7.13",
                         "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
                         "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                         "bootID": str(uuid.uuid5(uuid.NAMESPACE_OID, name))},
        },
    }


@dataclass
class Faults:
    """Injected faults; change the fields from a test while the server runs."""

    fail_next: int = 0  # answer this many next requests with ``fail_code``
    fail_all: bool = False  # answer every request with ``fail_code`` until cleared
    fail_code: int = 500
    delay: float = 0.0  # seconds to sleep before answering each request
    only_writes: bool = False  # faults hit only PUT/PATCH/POST/DELETE
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, type)

    def take(self, method: str) -> int | None:
        if self.only_writes and method == "GET":
            return None
        if self.fail_all:
            return self.fail_code
        if self.fail_next > 0:
            self.fail_next -= 1
            return self.fail_code
        return None


class _Store:
    """Nodes, a global resourceVersion and a bounded event history for watches."""

    def __init__(self, history: int) -> None:
        self.lock = threading.Condition()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.history = history
        self.oldest_rv = self.rv  # watches from before this get 410 Gone
        self.watch_epoch = 0  # bumped to drop every open watch

    def _commit(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, copy.deepcopy(obj)))
        if len(self.events) > self.history:
            drop = len(self.events) - self.history
            self.oldest_rv = self.events[drop - 1][0]
            del self.events[:drop]
        self.lock.notify_all()
        return copy.deepcopy(obj)

    def compact(self) -> None:
        """Forget all history: every watch from an older resourceVersion gets 410."""
        with self.lock:
            self.events.clear()
            self.oldest_rv = self.rv


class ApiError(Exception):
    def __init__(self, code: int, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.name = code, message, name


def status_obj(code: int, message: str, name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": message,
                           "reason": _REASONS.get(code, "Unknown"), "code": code}
    if name is not None:
        out["details"] = {"name": name, "kind": "nodes"}
    return out


def _selector_matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class NodeAPIServer:
    """The test server. ``with NodeAPIServer() as api: api.url ...`` or start()/stop()."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, history: int = 1000) -> None:
        self.store = _Store(history)
        self.faults = Faults()
        self._stopping = threading.Event()
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> NodeAPIServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="k8sapi",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self.store.lock:
            self.store.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> NodeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- direct access for tests (as kubelet / an admin would change things) ----------------

    def add_node(self, node: dict[str, Any] | str, **kw: Any) -> dict[str, Any]:
        obj = make_node(node, **kw) if isinstance(node, str) else copy.deepcopy(node)
        return self.create(obj)

    def node(self, name: str) -> dict[str, Any]:
        with self.store.lock:
            if name not in self.store.nodes:
                raise KeyError(name)
            return copy.deepcopy(self.store.nodes[name])

    def edit(self, name: str, fn: Any) -> dict[str, Any]:
        """Change a node in place with ``fn(obj)`` as one write (a new resourceVersion)."""
        with self.store.lock:
            obj = self.store.nodes[name]
            fn(obj)
            return self.store._commit("MODIFIED", obj)

    def set_condition(self, name: str, ctype: str, status: str, reason: str = "",
                      message: str = "", since: str | None = None) -> dict[str, Any]:
        def fn(obj: dict[str, Any]) -> None:
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            t = since or now_rfc3339()
            for c in conds:
                if c["type"] == ctype:
                    if c.get("status") != status:
                        c["lastTransitionTime"] = t
                    c.update(status=status, reason=reason, message=message, lastHeartbeatTime=t)
                    return
            conds.append({"type": ctype, "status": status, "reason": reason, "message": message,
                          "lastHeartbeatTime": t, "lastTransitionTime": t})
        return self.edit(name, fn)

    def drop_watches(self) -> None:
        """Close every open watch stream (as a load balancer or apiserver restart would)."""
        with self.store.lock:
            self.store.watch_epoch += 1
            self.store.lock.notify_all()

    def compact(self) -> None:
        self.store.compact()

    # -- the operations behind the HTTP verbs --------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):
            raise ApiError(422, f"Node \"{name}\" is invalid: metadata.name: Invalid value")
        with self.store.lock:
            if name in self.store.nodes:
                raise ApiError(409, f"nodes \"{name}\" already exists", name)
            obj = copy.deepcopy(obj)
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", "Node")
            md = obj["metadata"]
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            md.pop("resourceVersion", None)
            self.store.nodes[name] = obj
            return self.store._commit("ADDED", obj)

    def get(self, name: str) -> dict[str, Any]:
        with self.store.lock:
            if name not in self.store.nodes:
                raise ApiError(404, f"nodes \"{name}\" not found", name)
            return copy.deepcopy(self.store.nodes[name])

    def list(self, labels: str = "", fields: str = "") -> dict[str, Any]:
        with self.store.lock:
            items = [copy.deepcopy(n) for _, n in sorted(self.store.nodes.items())
                     if self._matches(n, labels, fields)]
            rv = str(self.store.rv)
        return {"kind": "NodeList", "apiVersion": "v1",
                "metadata": {"resourceVersion": rv}, "items": items}

    @staticmethod
    def _matches(obj: dict[str, Any], labels: str, fields: str) -> bool:
        if labels and not _selector_matches(obj["metadata"].get("labels") or {}, labels):
            return False
        for term in filter(None, fields.split(",")):
            k, _, v = term.partition("=")
            if k in ("metadata.name", "metadata.name=") and obj["metadata"]["name"] != v.lstrip("="):
                return False
        return True

    def write(self, name: str, new: dict[str, Any], sub: str | None,
              precondition: str | None) -> dict[str, Any]:
        with self.store.lock:
            cur = self.store.nodes.get(name)
            if cur is None:
                raise ApiError(404, f"nodes \"{name}\" not found", name)
            if precondition and precondition != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, f"Operation cannot be fulfilled on nodes \"{name}\": the object "
                               "has been modified; please apply your changes to the latest version "
                               "and try again", name)
            if (new.get("metadata") or {}).get("name", name) != name:
                raise ApiError(400, "the name of the object does not match the name on the URL", name)
            obj = copy.deepcopy(cur)
            if sub == "status":
                obj["status"] = new.get("status") or {}
            else:
                for key in ("spec",):
                    obj[key] = new.get(key) or {}
                md = dict(new.get("metadata") or {})
                for keep in ("uid", "creationTimestamp", "resourceVersion", "name"):
                    md[keep] = cur["metadata"].get(keep)
                obj["metadata"] = md
            if obj == cur:  # a no-op write does not bump the resourceVersion
                return copy.deepcopy(cur)
            self.store.nodes[name] = obj
            return self.store._commit("MODIFIED", obj)

    def delete(self, name: str) -> dict[str, Any]:
        with self.store.lock:
            cur = self.store.nodes.pop(name, None)
            if cur is None:
                raise ApiError(404, f"nodes \"{name}\" not found", name)
            return self.store._commit("DELETED", cur)


class _Handler(BaseHTTPRequestHandler):
    api: NodeAPIServer
    protocol_version = "HTTP/1.1"
    server_version = "slurmguard-k8sapi/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"null")
        except ValueError:
            raise ApiError(400, "request body is not valid JSON") from None

    def _dispatch(self, method: str) -> None:
        api = self.api
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        api.faults.requests.append((method, parts.path, self.headers.get("Content-Type") or ""))
        if api.faults.delay:
            time.sleep(api.faults.delay)
        code = api.faults.take(method)
        try:
            if code is not None:
                if method in ("PUT", "PATCH", "POST"):
                    self._body()  # drain the request so the connection stays usable
                raise ApiError(code, f"injected fault: HTTP {code}")
            self._route(method, parts.path.rstrip("/") or "/", query)
        except ApiError as exc:
            self._send(exc.code, status_obj(exc.code, exc.message, exc.name))
        except PatchError as exc:
            self._send(exc.code, status_obj(exc.code, exc.message))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- routes -------------------------------------------------------------------------------

    def _route(self, method: str, path: str, q: dict[str, str]) -> None:
        api = self.api
        if method == "GET" and path in _DISCOVERY:
            body = _DISCOVERY[path]
            if path == "/api":
                body = dict(body, serverAddressByClientCIDRs=[
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.headers.get("Host", "")}])
            return self._send(200, body)
        m = re.fullmatch(r"/api/v1/nodes(?:/([^/]+))?(?:/(status))?", path)
        if not m:
            raise ApiError(404, f"the server could not find the requested resource ({path})")
        name, sub = m.group(1), m.group(2)
        if name is None:
            if method == "GET" and q.get("watch") in ("true", "1"):
                return self._watch(q)
            if method == "GET":
                return self._send(200, api.list(q.get("labelSelector", ""), q.get("fieldSelector", "")))
            if method == "POST":
                body = self._body()
                if not isinstance(body, dict):
                    raise ApiError(400, "body must be a Node object")
                return self._send(201, api.create(body))
            raise ApiError(405, f"method {method} not allowed on the node collection")
        if method == "GET":
            return self._send(200, api.get(name))
        if method == "DELETE":
            return self._send(200, api.delete(name))
        if method == "PUT":
            body = self._body()
            if not isinstance(body, dict):
                raise ApiError(400, "body must be a Node object")
            pre = (body.get("metadata") or {}).get("resourceVersion")
            return self._send(200, api.write(name, body, sub, pre))
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            kind = _PATCH_TYPES.get(ctype)
            if kind is None:
                self._body()
                raise ApiError(415, f"the body of the request was in an unknown format - accepted media types include: {', '.join(_PATCH_TYPES)}")
            patch = self._body()
            with api.store.lock:  # read-modify-write as one step, like the apiserver's retry
                cur = api.get(name)
                if kind == "json":
                    new = json_patch(cur, patch)
                    pre = None
                else:
                    if not isinstance(patch, dict):
                        raise ApiError(400, "patch body must be a JSON object")
                    # a resourceVersion inside the patch is a precondition (409 when stale)
                    pre = (patch.get("metadata") or {}).get("resourceVersion")
                    new = (merge_patch if kind == "merge" else strategic_merge_patch)(cur, patch)
                    if pre:
                        new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                result = api.write(name, new, sub, pre)
            return self._send(200, result)
        raise ApiError(405, f"method {method} not allowed")

    def _watch(self, q: dict[str, str]) -> None:
        api, store = self.api, self.api.store
        labels, fields = q.get("labelSelector", ""), q.get("fieldSelector", "")
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        rv_param = q.get("resourceVersion", "")
        with store.lock:
            epoch = store.watch_epoch
            if rv_param in ("", "0"):
                initial = [("ADDED", copy.deepcopy(n)) for _, n in sorted(store.nodes.items())]
                last = store.rv
                gone = False
            else:
                try:
                    last = int(rv_param)
                except ValueError:
                    raise ApiError(400, f"invalid resourceVersion {rv_param!r}") from None
                gone = last < store.oldest_rv
                initial = [(k, copy.deepcopy(o)) for rv, k, o in store.events if rv > last]
                if initial:
                    last = int(initial[-1][1]["metadata"]["resourceVersion"])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(kind: str, obj: dict[str, Any]) -> None:
            data = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            if gone:
                emit("ERROR", status_obj(410, f"too old resource version: {rv_param} ({store.oldest_rv})"))
            else:
                for kind, obj in initial:
                    if api._matches(obj, labels, fields):
                        emit(kind, obj)
                while not api._stopping.is_set():
                    with store.lock:
                        new = [(rv, k, copy.deepcopy(o)) for rv, k, o in store.events if rv > last]
                        if not new and store.watch_epoch == epoch:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            store.lock.wait(timeout=min(left, 0.5))
                            continue
                        if store.watch_epoch != epoch:
                            # dropped: cut the connection without the closing chunk
                            self.close_connection = True
                            return
                    for rv, kind, obj in new:
                        last = rv
                        if api._matches(obj, labels, fields):
                            emit(kind, obj)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


_DISCOVERY: dict[str, dict[str, Any]] = {
    "/version": {"major": "1", "minor": "30", "gitVersion": "v1.30.0-slurmguard-test",
                 "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                 "goVersion": "go1.22", "compiler": "gc", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
         "shortNames": ["no"]},
        {"name": "nodes/status", "singularName": "", "namespaced": False, "kind": "Node",
         "verbs": ["get", "patch", "update"]},
    ]},
}


def main() -> None:
    """Run by hand: ``python tests/k8sapi/server.py --nodes n1,n2 [--port 8001]``."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--nodes", default="")
    args = ap.parse_args()
    srv = NodeAPIServer(port=args.port).start()
    for n in filter(None, args.nodes.split(",")):
        srv.add_node(n)
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
