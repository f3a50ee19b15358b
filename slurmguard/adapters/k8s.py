"""Kubernetes Nodes through the official ``kubernetes`` client (imported lazily).

Reads Node objects as raw JSON (``_preload_content=False``): the client's generated models
reject objects that omit fields they call required, and a reconciler must not crash on a
real cluster's slightly unusual Node. Writes only slurmguard's own marks (the taint
``slurmguard.io/unhealthy``, a cordon recorded by ``slurmguard.io/cordoned-by``, our
annotations, the condition ``SlurmguardHealthy``) with strategic merge patches that carry the
resourceVersion they were computed from, so a concurrent change gives 409 instead of being
overwritten.

Every failure (an HTTP error status, a timeout, a refused connection, a cut stream, an
unparseable answer) becomes :class:`KubeError`; callers treat it as "no view this round"
(fail closed), never as a state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from slurmguard.contract import (
    CONDITION,
    CORDONED_BY,
    CORDONED_BY_US,
    MARKED_AT,
    REASON_ANNOTATION,
    TAINT_KEY,
    rfc3339,
)
from slurmguard.errors import EXIT_EXTERNAL, ConfigError, SlurmguardError


class KubeError(SlurmguardError):
    """The Kubernetes API could not be read or written (5xx, timeout, unreachable, ...)."""

    exit_code = EXIT_EXTERNAL

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeConflict(KubeError):
    """409: the Node changed since we read it; re-read and re-plan."""


class KubeGone(KubeError):
    """410: the watch's resourceVersion is too old; list again."""


def _short(body: Any) -> str:
    try:
        obj = json.loads(body)
        return f"{obj.get('reason', '')}: {obj.get('message', '')}".strip(": ")
    except (TypeError, ValueError, AttributeError):
        return str(body or "")[:200].replace("\n", " ")


class KubeNodes:
    """Nodes of one Kubernetes cluster. ``section`` is the ``[reconcile]`` config section.

    Example::

        kube = KubeNodes(cfg.section("reconcile"))
        nodes, rv = kube.list()
    """

    def __init__(self, section: Mapping[str, Any], *,
                 observe: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
        self.section = section
        self.timeout = float(section.get("timeout", 10.0))
        self._api: Any = None
        # Observe mode's choke point for Kubernetes (slurmguard/observe.py): Node object ->
        # does its Slurm node observe? Its writes are then withheld and listed here.
        self.observe = observe
        self.withheld: list[tuple[str, str]] = []  # (what, Node name)
        # (verb, Node object, reason) of each withheld write: the reconciler's ledger
        self.on_withheld: Callable[[str, Mapping[str, Any], str], None] | None = None

    # -- the client ---------------------------------------------------------------------------

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = self._make_api()
        return self._api

    def _make_api(self) -> Any:
        try:
            from kubernetes import client
            from kubernetes import config as kconfig
        except ImportError:
            raise ConfigError("reconcile: the kubernetes package is not installed "
                              "(pip install 'slurmguard[k8s]')") from None
        conf = client.Configuration()
        url = self.section.get("api_url") or ""
        try:
            if url:
                conf.host = url
                token_file = self.section.get("token_file") or ""
                if token_file:
                    with open(token_file, encoding="utf-8") as fh:
                        conf.api_key = {"authorization": "Bearer " + fh.read().strip()}
                if self.section.get("ca_file"):
                    conf.ssl_ca_cert = self.section["ca_file"]
                conf.verify_ssl = bool(self.section.get("verify_tls", True))
            elif not self.section.get("kubeconfig") and os.environ.get("KUBERNETES_SERVICE_HOST"):
                kconfig.load_incluster_config(client_configuration=conf)
            else:
                kconfig.load_kube_config(config_file=self.section.get("kubeconfig") or None,
                                         context=self.section.get("context") or None,
                                         client_configuration=conf)
        except (OSError, kconfig.ConfigException) as exc:
            raise ConfigError(f"reconcile: cannot configure the Kubernetes client: {exc}") from None
        conf.retries = False  # one try per round: a failure fails the round closed
        return client.CoreV1Api(client.ApiClient(conf))

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        """Call a client method for raw JSON; every failure becomes a KubeError."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kw)
            return json.loads(resp.data)
        except ApiException as exc:
            cls = {409: KubeConflict, 410: KubeGone}.get(exc.status or 0, KubeError)
            raise cls(f"kubernetes: {what}: HTTP {exc.status} {_short(exc.body)}",
                      exc.status) from None
        except HTTPError as exc:
            raise KubeError(f"kubernetes: {what}: {type(exc).__name__}: {_first_line(exc)}") from None
        except (OSError, ValueError) as exc:
            raise KubeError(f"kubernetes: {what}: {type(exc).__name__}: {_first_line(exc)}") from None

    # -- reading --------------------------------------------------------------------------------

    def list(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """All Nodes (raw JSON) and the list's resourceVersion (to start a watch from)."""
        kw = {"label_selector": label_selector} if label_selector else {}
        body = self._call("list nodes", self.api.list_node, **kw)
        items = body.get("items")
        if not isinstance(items, list):
            raise KubeError("kubernetes: list nodes: the answer has no items list")
        return items, str((body.get("metadata") or {}).get("resourceVersion", ""))

    def get(self, name: str) -> dict[str, Any]:
        return self._call(f"get node {name}", self.api.read_node, name)

    def watch(self, resource_version: str, timeout_s: int,
              label_selector: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (type, raw Node) from a watch; KubeGone on 410, KubeError when cut."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        w = watch.Watch()
        kw: dict[str, Any] = {"resource_version": resource_version, "timeout_seconds": timeout_s,
                              "_request_timeout": (self.timeout, timeout_s + self.timeout)}
        if label_selector:
            kw["label_selector"] = label_selector
        try:
            for ev in w.stream(self.api.list_node, **kw):
                yield ev["type"], ev["raw_object"]
        except ApiException as exc:
            cls = KubeGone if exc.status == 410 else KubeError
            raise cls(f"kubernetes: watch nodes: HTTP {exc.status} {exc.reason}", exc.status) from None
        except (HTTPError, OSError, ValueError) as exc:
            raise KubeError(f"kubernetes: watch nodes: {type(exc).__name__}: {_first_line(exc)}") from None
        finally:
            w.stop()

    # -- writing our marks ------------------------------------------------------------------

    def mark(self, node: Mapping[str, Any], *, taint: str, reason: str, cordon: bool,
             condition: bool, now: float) -> dict[str, Any]:
        """Taint, annotate and (when ``cordon``) cordon ``node``; set our condition False."""
        md, spec = node.get("metadata") or {}, node.get("spec") or {}
        name = md.get("name", "")
        taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": taint, "effect": "NoSchedule",
                       "timeAdded": rfc3339(now)})
        annotations: dict[str, Any] = {REASON_ANNOTATION: reason[:1024]}
        if MARKED_AT not in (md.get("annotations") or {}):
            annotations[MARKED_AT] = rfc3339(now)
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": md.get("resourceVersion"), "annotations": annotations},
            "spec": {"taints": taints},
        }
        if cordon:
            body["spec"]["unschedulable"] = True
            annotations[CORDONED_BY] = CORDONED_BY_US
        verb = "k8s-cordon" if cordon else "k8s-taint"
        if self._withhold(f"mark node {name}", node, verb, reason):
            return dict(node)
        new = self._call(f"mark node {name}", self.api.patch_node, name, body)
        if condition:
            self._condition(name, "False", "SlurmDrained", reason, now)
        return new

    def unmark(self, node: Mapping[str, Any], *, condition: bool, now: float) -> dict[str, Any]:
        """Remove only our marks: our taint, our cordon, our annotations; condition True."""
        md, spec = node.get("metadata") or {}, node.get("spec") or {}
        name = md.get("name", "")
        ours = (md.get("annotations") or {}).get(CORDONED_BY) == CORDONED_BY_US
        taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": md.get("resourceVersion"),
                         "annotations": {REASON_ANNOTATION: None, MARKED_AT: None,
                                         CORDONED_BY: None}},
            "spec": {"taints": taints or None},
        }
        if ours and spec.get("unschedulable"):
            body["spec"]["unschedulable"] = None
        if self._withhold(f"unmark node {name}", node, "k8s-unmark",
                          "Slurm reports the node healthy: our marks would come off"):
            return dict(node)
        new = self._call(f"unmark node {name}", self.api.patch_node, name, body)
        if condition:
            self._condition(name, "True", "SlurmHealthy", "Slurm reports the node healthy", now)
        return new

    def _withhold(self, what: str, node: Mapping[str, Any], verb: str, reason: str) -> bool:
        """The choke point: True (listed, and handed to ``on_withheld``) when the Node's
        Slurm node observes. The condition is written only after a patch, so it is withheld
        with it."""
        if self.observe is None or not self.observe(node):
            return False
        self.withheld.append((what, str((node.get("metadata") or {}).get("name", ""))))
        if self.on_withheld is not None:
            self.on_withheld(verb, node, reason)
        return True

    def _condition(self, name: str, status: str, reason: str, message: str, now: float) -> None:
        t = rfc3339(now)
        body = {"status": {"conditions": [{
            "type": CONDITION, "status": status, "reason": reason, "message": message[:1024],
            "lastHeartbeatTime": t, "lastTransitionTime": t}]}}
        self._call(f"set condition on node {name}", self.api.patch_node_status, name, body)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
