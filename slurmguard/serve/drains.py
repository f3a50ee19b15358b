"""serve's answers to running jobs: which of my nodes are drained (GET /drains), and the
slow nodes a job saw (POST /suspect); and to a node's health check, its own state in Slurm
(POST /nodestate).

``GET /drains?nodes=n[1-3]&since=T`` is what every job's `slurmguard run` polls every few
seconds (slurmguard.job.notice). One cached view of Slurm (``scontrol show node``, at most one
call per ``cache_s``) answers every job, so slurmctld sees one poller however many jobs run;
the store's drain events since ``T`` add who drained and exactly when. Slurm's DRAIN flag is
the truth for "drained now" (an admin's or the reconciler's drain reaches the store only
through Slurm); when serve's Slurm view fails the answer says ``complete: false`` with the
store's drains, and the wrapper asks Slurm itself. The answer is what ``sinfo -R`` shows, but
with who drained and why from the ledger, so it is shown only to a caller with a credential
(serve/auth.py ``read``): the wrapper names its job (``job=``) and signs the request target
with its user's MUNGE credential from a node of the job (or sends the job token), a node its
own nodes, an admin (the serve token) any.

``POST /suspect`` takes the wrapper's slow-node evidence (the job, per node its median step
time, the ratio to the job's median, its ranks) with the *job token* (``notice.job_token_file``,
readable by jobs, valid for this path only) and records one ``suspect`` event per node and job.
A suspect never drains anything: burn-in decides (slurmguard.store.suspects orders it first).
"""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Any

from slurmguard.errors import InputError, SlurmguardError
from slurmguard.nodeset import expand, validate_node_name

MAX_NODES = 4096  # nodes one job may ask about
_JOB = re.compile(r"[0-9]{1,20}(_[0-9]{1,10})?(\+[0-9]{1,10})?")
_STORE_KINDS = ("drain", "clear")


class DrainView:
    """The /drains and /suspect handlers over the store and a cached Slurm view."""

    def __init__(self, store: Any, slurm: Any, *, cache_s: float = 1.0) -> None:
        self.store, self.slurm, self.cache_s = store, slurm, cache_s
        self._lock = threading.Lock()
        self._view: tuple[float, dict[str, Any] | None, str] = (float("-inf"), None, "")

    def _slurm_view(self) -> tuple[dict[str, Any] | None, str]:
        """name -> NodeInfo, at most ``cache_s`` old; (None, why) when Slurm did not answer."""
        with self._lock:
            at, view, err = self._view
            if time.monotonic() - at >= self.cache_s:
                try:
                    view, err = {n.name: n for n in self.slurm.nodes()}, ""
                except SlurmguardError as exc:
                    view, err = None, exc.message
                self._view = (time.monotonic(), view, err)
            return view, err

    def drains(self, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """Answer ``GET /drains``: (HTTP status, JSON object)."""
        try:
            nodes, since = parse_query(query)
        except InputError as exc:
            return 400, {"error": exc.message}
        # Slurm's flag first (one cached view for every job): most polls ask about nodes
        # none of which is drained, and those cost the store nothing.
        view, err = self._slurm_view()
        if view is None:
            return 200, {"drains": list(self._store_drains(set(nodes), since).values()),
                         "complete": False, "error": f"serve's Slurm view failed: {err}"[:300]}
        drained = [info for info in (view.get(n) for n in nodes)
                   if info is not None and info.drained]
        if not drained:
            return 200, {"drains": [], "complete": True}
        store_drains = self._store_drains({i.name for i in drained}, since)
        out = [store_drains.get(i.name) or {"node": i.name, "at": _slurm_time(i.reason_time),
                                            "actor": i.reason_user[:80],
                                            "reason": _one_line(i.reason)}
               for i in drained]
        self._would_notices(query, out)
        return 200, {"drains": out, "complete": True}

    def _store_drains(self, wanted: set[str], since: float | None) -> dict[str, dict[str, Any]]:
        """node -> who drained it and when, from the store's drain events since ``since`` (a
        later clear ends an earlier drain); {} when the store does not answer."""
        try:
            events = self.store.nodes.events(since=since, kinds=_STORE_KINDS, limit=10000)
        except SlurmguardError:
            return {}  # the store adds detail; Slurm's flag is the answer
        out: dict[str, dict[str, Any]] = {}
        for e in reversed(events):  # oldest first
            if e.node not in wanted:
                continue
            if e.kind == "drain":
                actor = e.actor_kind if e.actor_kind != "admin" else f"admin:{e.actor}"
                out[e.node] = {"node": e.node, "at": e.at, "actor": actor,
                               "reason": _one_line(e.reason)}
            else:
                out.pop(e.node, None)
        return out

    def _would_notices(self, query: dict[str, list[str]], drains: list[dict[str, Any]]) -> None:
        """Observe mode (policy.mode): a drain told to a job's wrapper on an observing node
        acts on nothing there (slurmguard.job.respond); what it would have done (a checkpoint
        now, the run ended for a requeue) is a ``would_act`` of the node, source ``notice``,
        once per episode."""
        observes = getattr(self.slurm, "observes", None)
        if observes is None:
            return
        try:
            job = query_job(query)
        except InputError:
            job = ""
        from slurmguard.wouldledger import WOULD_ACT, record_would

        for d in drains:
            if not observes(d["node"]):
                continue
            why = (f"drain notice to job {job or '?'}: would ask for a checkpoint now and end "
                   f"the run for a requeue ({d['actor'] or 'someone'} drained it: {d['reason']})")
            try:
                record_would(self.store, d["node"], WOULD_ACT, "notice", why[:500],
                             at=time.time(), details={"verb": "notice", "via": "notice",
                                                      "job": job, "drained_by": d["actor"]})
            except SlurmguardError:
                pass  # the answer matters more than its would-event

    def node_state(self, body: Any) -> dict[str, Any]:
        """``POST /nodestate`` ``{"node": NAME}``, signed as that node (serve/auth.py): the
        node as serve's view of Slurm holds it, and when that view was read. A health check
        asks it for its own state instead of reading Slurm (slurmguard.node.ownstate), so
        slurmctld sees serve's reader, not one read per node per HealthCheckInterval.
        ``{"node": null}`` when the view has no such node; SlurmguardError (503) when serve
        cannot read Slurm: the node then reads Slurm itself."""
        if not isinstance(body, dict):
            raise InputError("nodestate: expected an object {\"node\": NAME}")
        try:
            name = validate_node_name(body.get("node"))
        except InputError as exc:
            raise InputError(f"nodestate.node: {exc.message}") from None
        lookup = getattr(self.slurm, "lookup", None)
        if lookup is not None:  # serve's one cached read (serve/slurmview.py)
            info, read_at = lookup(name)
        else:
            view, err = self._slurm_view()
            if view is None:
                raise SlurmguardError(f"serve's Slurm view failed: {err}")
            info, read_at = view.get(name), time.time()
        if info is None:
            return {"node": None, "read_at": read_at}
        return {"node": {**info.to_dict(), "gres": info.gres}, "read_at": read_at}

    def suspect(self, body: Any) -> dict[str, Any]:
        """Record the wrapper's slow nodes as ``suspect`` events (one per node and job)."""
        job, median, entries = parse_suspect(body)
        recorded, duplicate = [], []
        for ent in entries:
            node = ent["node"]
            old = self.store.nodes.events(node=node, kinds=("suspect",), limit=1000)
            if any(e.details.get("job") == job for e in old):
                duplicate.append(node)
                continue
            self.store.nodes.record_event(
                node, "suspect", "slurmguard",
                f"slow in job {job}: median step {ent['median_step_s']:.3f}s, "
                f"{ent['ratio']:.2f}x the job's {median:.3f}s",
                source="wrapper", details={"job": job, "job_median_step_s": median, **ent})
            recorded.append(node)
        return {"recorded": recorded, "duplicate": duplicate}


def parse_query(query: dict[str, list[str]]) -> tuple[list[str], float]:
    """(the nodes asked about, since) of a /drains query; InputError naming the field."""
    raw = query.get("nodes", [""])
    if len(raw) != 1:
        raise InputError("nodes: give one node set")
    try:
        nodes = expand(raw[0], source="nodes")
    except InputError as exc:
        msg = exc.message
        raise InputError(msg if msg.startswith("nodes") else f"nodes: {msg}") from None
    if len(nodes) > MAX_NODES:
        raise InputError(f"nodes: {len(nodes)} nodes, more than {MAX_NODES}")
    since_raw = query.get("since", ["0"])[-1]
    try:
        since = float(since_raw)
        if not math.isfinite(since):
            raise ValueError
    except ValueError:
        raise InputError(f"since: expected a Unix time, got {since_raw[:40]!r}") from None
    return nodes, since


def _number(value: Any, field: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise InputError(f"{field}: expected a number in [{lo:g}, {hi:g}], got {str(value)[:40]!r}")
    return float(value)


def query_job(query: dict[str, list[str]]) -> str:
    """The ``job=`` of a /drains query ("" when none); InputError when it is no job id."""
    raw = query.get("job", [""])
    job = raw[-1] if len(raw) == 1 else "?"
    if job and not _JOB.fullmatch(job):
        raise InputError(f"job: expected a Slurm job id, got {job[:40]!r}")
    return job


def parse_suspect(body: Any) -> tuple[str, float, list[dict[str, Any]]]:
    if not isinstance(body, dict):
        raise InputError("body: expected {\"job\": ..., \"job_median_step_s\": ..., \"nodes\": [...]}")
    job = body.get("job")
    if not isinstance(job, str) or not _JOB.fullmatch(job):
        raise InputError(f"job: expected a Slurm job id, got {str(job)[:40]!r}")
    median = _number(body.get("job_median_step_s"), "job_median_step_s", 0.0, 86400.0)
    nodes = body.get("nodes")
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= 64:
        raise InputError("nodes: expected a list of 1 to 64 slow nodes")
    out = []
    for i, ent in enumerate(nodes):
        f = f"nodes[{i}]"
        if not isinstance(ent, dict):
            raise InputError(f"{f}: expected an object")
        try:
            node = validate_node_name(ent.get("node"))
        except InputError as exc:
            raise InputError(f"{f}.node: {exc.message}") from None
        ranks = ent.get("ranks", [])
        if not isinstance(ranks, list) or len(ranks) > 4096 or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 24 for r in ranks):
            raise InputError(f"{f}.ranks: expected up to 4096 rank numbers")
        out.append({"node": node, "ranks": ranks,
                    "median_step_s": _number(ent.get("median_step_s"), f"{f}.median_step_s",
                                             0.0, 86400.0),
                    "ratio": _number(ent.get("ratio"), f"{f}.ratio", 1.0, 1e6)})
    return job, median, out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]


def _slurm_time(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None
