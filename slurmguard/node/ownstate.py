"""A health check's view of its own node in Slurm (docs/hooks.md, "The node's own state").

A health check needs its node's state for two things: whether a drain of ours can go (the
reason names one of its checks that passes again) and whether Slurm has the node DOWN (left
alone). It used to read it from Slurm every run (``sinfo -n NODE``: a NODE_INFO_SINGLE and a
PARTITION_INFO), so slurmctld answered two RPCs per node per HealthCheckInterval: at 10,000
nodes and 300 s, 4,000 a minute, most of what slurmguard cost it (docs/slurm.md). serve
already reads the whole node table on its own schedule for every replica; so, in order:

1. **serve** (``POST /nodestate``, signed as the node like its records): the node as serve's
   view holds it, and when that view was read. Within ``hooks.report_timeout``, as a
   record or a permit. serve keeps that view on its own schedule (at most two of its periods
   old: it reads Slurm itself before answering from an older one), so the node does not
   judge its age against its own clock.
2. **What this node saw last** (``slurm.<node>.json`` in ``hooks.state_dir``): every answer
   of serve or Slurm, and every drain this node made, is kept there. When serve does not
   answer (an outage), a record at most ``hooks.state_max_age`` old stands in. A record
   newer than serve's view wins over it: this node's own drain a moment ago, which serve's
   view (read every ``serve.slurm_view_ttl``) may not show yet.
3. **Slurm** (``sinfo -n NODE``), when neither answers: serve is not configured, or down
   and the record is too old or missing. Its answer is kept (2).

Why a view that is not Slurm's this instant is enough: nothing here changes Slurm on it. A
drain reads the node again on the one drain path (drainguard.guarded_drain: DOWN and
someone else's drain are left alone), and an undrain reads it again before it clears
(SlurmCLI.undrain_change clears only a drain of ours). A view late by a period can only
make an undrain wait for the next health check. A Slurm read made in this run is handed to
the drain path, which then does not read the node a second time.

Standard library only (it runs in every health check): no import of serve's side.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmguard.errors import SlurmguardError

if TYPE_CHECKING:
    from slurmguard.config import Config

FIELDS = ("name", "state", "flags", "reason", "reason_user", "reason_time", "partitions",
          "features", "gres")


class OwnState:
    """The node's state (a NodeInfo, or None when nothing answered), where it came from
    (``serve``, ``saved``, ``slurm``, or ``""``) and, from Slurm, in this run."""

    __slots__ = ("info", "source", "problem")

    def __init__(self, info: Any, source: str, problem: str = "") -> None:
        self.info, self.source, self.problem = info, source, problem

    @property
    def read_now(self) -> bool:
        """Slurm was read for it in this run (the drain path may take it as its look)."""
        return self.source == "slurm"


def state_file(cfg: Config, node: str) -> Path:
    """``slurm.<node>.json`` in hooks.state_dir (``node`` is a validated node name)."""
    return Path(str(cfg["hooks.state_dir"])) / f"slurm.{node}.json"


def own_state(cfg: Config, node: str, cli: Any, *, now: float | None = None) -> OwnState:
    """The node's state by the order above; never raises (None when nothing answered)."""
    now = time.time() if now is None else now
    saved = load(cfg, node)
    from slurmguard.adapters.serve_client import ingest_urls

    asked = bool(ingest_urls(cfg.section("hooks")))
    problem = ""
    if asked:
        got, problem, outage = from_serve(cfg, node)
        if got is not None:
            info, read_at = got
            if saved is not None and saved[1] > read_at:  # our own change, newer than the view
                return OwnState(saved[0], "saved")
            keep(cfg, node, info, read_at, "serve")
            return OwnState(info, "serve")
        # Only when no replica answers at all: a serve that answered and could not say (an
        # earlier release without /nodestate, a refusal, a node it does not know) is no
        # outage, and Slurm is read as before.
        if outage and saved is not None and now - saved[1] <= float(cfg["hooks.state_max_age"]):
            return OwnState(saved[0], "saved", problem)
    try:
        info = cli.node(node)
    except SlurmguardError as exc:
        return OwnState(None, "", exc.message)
    keep(cfg, node, info, now, "slurm")
    return OwnState(info, "slurm", problem)


def from_serve(cfg: Config, node: str) -> tuple[tuple[Any, float] | None, str, bool]:
    """((NodeInfo, the view's read time), "", False) from serve's ``POST /nodestate``, or
    (None, why not, whether no replica answered at all: unreachable, timed out, 5xx).
    Answered but no state: refused, no such node in its view, an answer that is not one."""
    from slurmguard.adapters.serve_client import DeliveryError, ingest_urls, node_auth, post_first

    hooks = cfg.section("hooks")
    try:
        _, answer = post_first(ingest_urls(hooks), node_auth(cfg, node), {"node": node},
                               float(hooks["report_timeout"]),
                               path="/nodestate",
                               ca=str(cfg.section("serve").get("tls_ca") or ""))
    except DeliveryError as exc:
        return None, f"serve: {exc}", not exc.refused
    read_at = answer.get("read_at")
    if isinstance(read_at, bool) or not isinstance(read_at, (int, float)):
        return None, "serve: /nodestate answer without read_at", False
    info = info_of(answer.get("node"))
    if info is None or info.name != node:
        return None, ("serve: no such node in its view" if answer.get("node") is None
                      else "serve: /nodestate answer is not a node"), False
    return (info, float(read_at)), "", False


def info_of(obj: Any) -> Any:
    """A NodeInfo from its dict (serve's answer, the saved record), or None when ``obj`` is
    not one."""
    from slurmguard.adapters.slurm.parse import NodeInfo

    if not isinstance(obj, dict):
        return None
    texts = ("name", "state", "reason", "reason_user", "reason_time", "gres")
    lists = ("flags", "partitions", "features")
    if not all(isinstance(obj.get(k), str) for k in texts) or not all(
            isinstance(obj.get(k), list) and all(isinstance(x, str) for x in obj[k])
            for k in lists):
        return None
    return NodeInfo(obj["name"], obj["state"], frozenset(obj["flags"]), obj["reason"],
                    obj["reason_user"], obj["reason_time"], tuple(obj["partitions"]),
                    tuple(obj["features"]), obj["gres"])


def as_dict(info: Any) -> dict[str, Any]:
    return {**info.to_dict(), "gres": info.gres}


def load(cfg: Config, node: str) -> tuple[Any, float] | None:
    """(NodeInfo, when it was true) of the saved record, or None (none, unreadable)."""
    try:
        doc = json.loads(state_file(cfg, node).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    at = doc.get("at")
    info = info_of(doc.get("info"))
    if info is None or info.name != node or isinstance(at, bool) or not isinstance(at, (int, float)):
        return None
    return info, float(at)


def keep(cfg: Config, node: str, info: Any, at: float, source: str) -> None:
    """Save ``info`` as true at ``at``; a failure is no fault (the next run asks again)."""
    from slurmguard.atomic import write_atomic

    path = state_file(cfg, node)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(
            {"at": at, "source": source, "info": as_dict(info)}, sort_keys=True),
            mode=0o644, durable=False)
    except OSError:
        pass


def drain_guarded(cfg: Config, cli: Any, node: str, cause: str, reason: str, *, via: str,
                  own: OwnState | None = None, fallback: Any = None) -> Any:
    """A node's own run drains itself for a failing check: the one drain path
    (drainguard.guarded_drain) with the hooks' permit (serve's /permit; ``fallback`` when no
    replica answers), this run's own Slurm read, when ``own`` made one, as the drain's look,
    and a drain made kept as the node's own state (:func:`drained`). The hooks, the scale
    harness's emulated nodes and the cost bench all drain by this one function, so the
    figures measured are the hook's. Returns guarded_drain's DrainResult."""
    from slurmguard.drainguard import ServePermit, guarded_drain

    info = own.info if own is not None else None
    done = guarded_drain(cli, ServePermit(cfg, fallback), node, cause, reason, via=via,
                         looked=info if own is not None and own.read_now else None)
    if done.result == "drained":  # known to this node's next runs
        drained(cfg, node, reason, info)
    return done


def drained(cfg: Config, node: str, reason: str, before: Any) -> None:
    """This node drained itself with ``reason`` just now: keep it, so that a later health
    check while serve is down (or before serve's view shows it) knows the drain is ours."""
    from slurmguard.adapters.slurm.parse import NodeInfo

    base = before if before is not None and before.name == node else NodeInfo(node, "idle")
    info = NodeInfo(node, base.state, frozenset(base.flags | {"DRAIN"}), reason, "", "",
                    base.partitions, base.features, base.gres)
    keep(cfg, node, info, time.time(), "drain")


def undrained(cfg: Config, node: str, before: Any) -> None:
    """This node cleared its drain just now: keep the node without it."""
    from slurmguard.adapters.slurm.parse import NodeInfo

    if before is None or before.name != node:
        forget(cfg, node)
        return
    info = NodeInfo(node, before.state, frozenset(before.flags - {"DRAIN"}), "", "", "",
                    before.partitions, before.features, before.gres)
    keep(cfg, node, info, time.time(), "undrain")


def forget(cfg: Config, node: str) -> None:
    """Drop the saved record (the node changed under us): the next run asks again."""
    try:
        state_file(cfg, node).unlink()
    except OSError:
        pass
