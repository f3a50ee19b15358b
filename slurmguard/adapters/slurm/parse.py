"""Pure parsers for Slurm's text and JSON output, and the NodeInfo / JobInfo they produce.

Formats (captured from Slurm 22.05.8, 24.11.5 and 26.05.5 in tests/data/slurm/):

* ``scontrol show node -o``: one record per node, ``Key=Value`` separated by spaces. Values
  may hold spaces (``OS=Linux 6.1 #1 SMP``) and ``=`` (``CfgTRES=cpu=2``), so a new field
  starts only at whitespace followed by ``Key=``. ``Reason=`` is printed last, as free text
  (spaces, ``=`` signs, quotes) followed by `` [user@YYYY-MM-DDTHH:MM:SS]``; a reason set with
  a newline in it breaks the record over two lines, with the suffix inserted after the
  first line: we join such continuation lines back.
* ``scontrol show job -o``: the same shape; ``JobName`` (free text) runs up to ``UserId=``.
* ``sinfo --json`` / ``squeue --json`` / ``scontrol --json show nodes``, Slurm 22.05 to 26.05,
  data parsers v0.0.38 to v0.0.45 (captured from 22.05.8, 24.11.5 and 26.05.5; the table in
  docs/slurm.md), every field read where it is present:

  - node objects (``{"nodes": [...]}``: 22.05/23.02 ``sinfo --json``, and
    ``scontrol --json show nodes`` from 23.02 on): ``state`` a string plus ``state_flags``
    (22.05) or a list (``["IDLE", "DRAIN"]``, 23.02+); numbers plain (22.05) or
    ``{"set": true, "infinite": false, "number": N}`` (23.02+); features a comma string or
    a list;
  - node groups (``{"sinfo": [...]}``: ``sinfo --json`` from 23.11 on): one entry per group
    of nodes that share a partition and a state, ``node.state`` a list, ``nodes.nodes`` the
    names, ``partition.name``, ``features.active``, ``gres.total``,
    ``reason.{description,user,time}`` (v0.0.45: ``reason.{description,time}`` and the
    user in the group's ``reason_set_by_user``).
    Slurm groups by state, not by reason (seen on 24.11.5: an admin's drain and two of ours
    in one entry carrying only the first node's reason), so a group of several nodes gives
    them **no** reason: a drain there is never taken for ours. Per-node reasons come from
    ``scontrol --json show nodes`` (what :meth:`SlurmCLI.nodes_json` runs on 23.02+).

Anything else raises :class:`ParseError` with a one-line message naming the field and value.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from slurmguard.contract import REASON_PREFIX
from slurmguard.errors import ParseError
from slurmguard.frozen import Frozen
from slurmguard.lazyre import LazyPattern

# Base states as Slurm names them (NODE_STATE_*); anything else is a flag.
BASE_STATES = frozenset({"idle", "allocated", "mixed", "down", "unknown", "future", "error"})
# Suffix characters of a node state in Slurm's short notation (`IDLE*`, `IDLE~`).
_STATE_MARKS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                "%": "POWERING_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED",
                "!": "POWER_DOWN", "^": "REBOOT_ISSUED", "-": "PLANNED"}
_NULLS = frozenset({"", "(null)", "none", "n/a", "unknown"})
# Job states after which a job is out of the queue (squeue's default view hides them; 22.05's
# `squeue --json` still lists them until MinJobAge, 24.11's does not).
FINISHED_JOB_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                                 "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})

_KEY_RE = LazyPattern(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/.]*)=")
_REASON_KEY_RE = LazyPattern(r"(?:(?<=\s)|^)Reason=")
_REASON_SUFFIX_RE = LazyPattern(r"\s*\[([^\[\]@\s]*)@([0-9T:\-]+|Unknown|None)\]")
_STATE_TOKEN_RE = LazyPattern(r"[A-Za-z_]+")
# A node name inside JSON (the same rule as the adapter's validate_node_name).
_NODE_NAME_RE = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


class NodeInfo(Frozen):
    """A node as Slurm reports it. ``state`` is the lower-case base state; ``flags`` upper.
    Frozen; ``raw`` (Slurm's own keys) is left out of ``==``, ``hash`` and the repr."""

    __slots__ = ("name", "state", "flags", "reason", "reason_user", "reason_time",
                 "partitions", "features", "gres", "raw")
    _NOT_COMPARED = _NOT_SHOWN = frozenset({"raw"})
    name: str
    state: str
    flags: frozenset[str]
    reason: str
    reason_user: str
    reason_time: str
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    gres: str  # as Slurm prints it: "gpu:h100:8(S:0-1)" (adapters/slurm/gres.py counts it)
    raw: Mapping[str, Any]

    def __init__(self, name: str, state: str, flags: frozenset[str] = frozenset(),
                 reason: str = "", reason_user: str = "", reason_time: str = "",
                 partitions: tuple[str, ...] = (), features: tuple[str, ...] = (),
                 gres: str = "", raw: Mapping[str, Any] | None = None) -> None:
        for k, v in (("name", name), ("state", state), ("flags", flags), ("reason", reason),
                     ("reason_user", reason_user), ("reason_time", reason_time),
                     ("partitions", partitions), ("features", features), ("gres", gres),
                     ("raw", {} if raw is None else raw)):
            object.__setattr__(self, k, v)

    @property
    def drained(self) -> bool:
        """Drained or draining (the DRAIN flag is set)."""
        return "DRAIN" in self.flags

    @property
    def draining(self) -> bool:
        """DRAIN set while jobs still run (Slurm's DRAINING)."""
        return self.drained and (self.state in ("allocated", "mixed") or "COMPLETING" in self.flags)

    @property
    def down(self) -> bool:
        """Slurm has the node DOWN (base state): slurmguard leaves it alone."""
        return self.state == "down"

    @property
    def not_responding(self) -> bool:
        """slurmctld has not heard from the node lately (``*`` in sinfo); may turn DOWN.

        Not a reason to skip a drain by itself: right after a slurmctld restart every node
        carries this flag until its first ping, while its Prolog may be finding a fault.
        """
        return "NOT_RESPONDING" in self.flags

    @property
    def ours(self) -> bool:
        """A drain (or FAIL) of slurmguard's is in effect: DRAIN/FAIL set, our reason.

        The flag matters: Slurm 24.11.5 keeps the reason of a node after UNDRAIN or RESUME
        (22.05 clears it); the parsers drop such a leftover of ours (:func:`_live_reason`),
        and a reason without a drain is never taken for one of ours anyway.
        """
        return self.reason.startswith(REASON_PREFIX) and bool(self.flags & _HOLDS_REASON)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "flags": sorted(self.flags),
                "reason": self.reason, "reason_user": self.reason_user,
                "reason_time": self.reason_time, "partitions": list(self.partitions),
                "features": list(self.features)}


class JobInfo(Frozen):
    """A job as Slurm reports it. ``state`` upper-case (RUNNING, PENDING, ...). Frozen;
    ``raw`` (Slurm's own keys) is left out of ``==``, ``hash`` and the repr."""

    __slots__ = ("job_id", "state", "reason", "nodes", "restart_count", "eligible_time",
                 "requeue", "batch_host", "exc_nodes", "priority", "raw")
    _NOT_COMPARED = _NOT_SHOWN = frozenset({"raw"})
    job_id: str
    state: str
    reason: str
    nodes: str
    restart_count: int
    eligible_time: float | None  # seconds since the epoch
    requeue: bool
    batch_host: str
    exc_nodes: str
    priority: int | None
    raw: Mapping[str, Any]

    def __init__(self, job_id: str, state: str, reason: str = "", nodes: str = "",
                 restart_count: int = 0, eligible_time: float | None = None,
                 requeue: bool = False, batch_host: str = "", exc_nodes: str = "",
                 priority: int | None = None, raw: Mapping[str, Any] | None = None) -> None:
        for k, v in (("job_id", job_id), ("state", state), ("reason", reason),
                     ("nodes", nodes), ("restart_count", restart_count),
                     ("eligible_time", eligible_time), ("requeue", requeue),
                     ("batch_host", batch_host), ("exc_nodes", exc_nodes),
                     ("priority", priority), ("raw", {} if raw is None else raw)):
            object.__setattr__(self, k, v)

    @property
    def finished(self) -> bool:
        """The job has ended (COMPLETED, FAILED, CANCELLED, ...): no longer in the queue."""
        return self.state in FINISHED_JOB_STATES

    @property
    def held(self) -> bool:
        """Held (by the user, an admin, or Slurm after launch failures): priority 0."""
        return self.priority == 0 or "held" in self.reason.lower()


# ---------------------------------------------------------------------------------------------
# scontrol show -o


def _records(text: object, first_key: str, what: str) -> list[str]:
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    records: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith(first_key + "="):
            records.append(line)
        elif records:
            # A newline inside a reason (Slurm stores what it was given) splits a record.
            records[-1] += " " + line.strip()
        else:
            raise ParseError(f"{what}: expected a record starting with {first_key}=, "
                             f"got {_clip(line)}")
    return records


def _fields(text: str, what: str, out: dict[str, str]) -> None:
    keys = list(_KEY_RE.finditer(text))
    lead = text[: keys[0].start()] if keys else text
    if lead.strip():
        raise ParseError(f"{what}: expected Key=Value, got {_clip(lead)}")
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out.setdefault(m.group(1), text[m.end():end].strip())


def show_node_records(text: str) -> list[str]:
    """``scontrol show node -o`` output cut into its records, one per node (a reason's
    newline joined back): what :func:`parse_show_node_oneliner` parses one by one."""
    return _records(text, "NodeName", "scontrol show node")


def parse_show_node_oneliner(text: str) -> list[dict[str, str]]:
    """``scontrol show node -o`` -> one dict per node; the reason's ``[user@time]`` suffix
    becomes ``ReasonUser`` / ``ReasonTime``."""
    what = "scontrol show node"
    out = []
    for rec in _records(text, "NodeName", what):
        fields: dict[str, str] = {}
        m = _REASON_KEY_RE.search(rec)
        head, tail = (rec[: m.start()], rec[m.end():]) if m else (rec, "")
        _fields(head, what, fields)
        if m:
            # The last `[user@time]` is Slurm's: a reason may itself quote such a suffix.
            suffix = None
            for found in _REASON_SUFFIX_RE.finditer(tail):
                suffix = found
            if suffix:
                reason, rest = tail[: suffix.start()], tail[suffix.end():]
                fields["ReasonUser"], fields["ReasonTime"] = suffix.group(1), suffix.group(2)
                keys = _KEY_RE.search(rest)
                extra = rest[: keys.start()] if keys else rest
                reason = (reason + " " + extra).strip()
                if keys:
                    _fields(rest[keys.start():], what, fields)
            else:
                reason = tail
            fields["Reason"] = " ".join(reason.split())
        if not fields.get("NodeName"):
            raise ParseError(f"{what}: record without a NodeName: {_clip(rec)}")
        out.append(fields)
    return out


def parse_show_partition_oneliner(text: str) -> dict[str, str]:
    """``scontrol show partition -o`` -> partition name -> its ``Nodes=`` set (``""`` for a
    partition without nodes), in Slurm's order."""
    what = "scontrol show partition"
    out: dict[str, str] = {}
    if text.strip() == "No partitions in the system":
        return out
    for rec in _records(text, "PartitionName", what):
        fields: dict[str, str] = {}
        _fields(rec, what, fields)
        name = fields.get("PartitionName", "")
        if not name:
            raise ParseError(f"{what}: record without a PartitionName: {_clip(rec)}")
        out[name] = _null(fields.get("Nodes", ""))
    return out


def parse_show_job_oneliner(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` -> one dict per job (``JobName`` may hold spaces and ``=``)."""
    what = "scontrol show job"
    out: list[dict[str, str]] = []
    if text.strip() == "No jobs in the system":  # scontrol's answer when the queue is empty
        return out
    for rec in _records(text, "JobId", what):
        fields: dict[str, str] = {}
        name = re.search(r"\sJobName=(.*?)\s+UserId=", rec)
        if name:
            fields["JobName"] = name.group(1)
            rec = rec[: name.start()] + " UserId=" + rec[name.end():]
        _fields(rec, what, fields)
        if not re.fullmatch(r"[0-9]+", fields.get("JobId", "")):
            raise ParseError(f"{what}: JobId: not a job id: {_clip(fields.get('JobId', ''))}")
        out.append(fields)
    return out


def parse_node_state(value: object, flags: object = ()) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` / ``DOWN*`` / ``["IDLE", "DRAIN"]`` -> ("idle", {"DRAIN"})."""
    if isinstance(value, str):
        tokens = value.split("+")
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        tokens = list(value)
    else:
        raise ParseError(f"node state: not a Slurm node state: {_clip(repr(value))}")
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise ParseError(f"node state_flags: expected a list of strings, got {_clip(repr(flags))}")
    names: list[str] = []
    marks: set[str] = set()
    for tok in tokens:
        core = tok.strip()
        while core and core[-1] in _STATE_MARKS:
            marks.add(_STATE_MARKS[core[-1]])
            core = core[:-1]
        if not _STATE_TOKEN_RE.fullmatch(core):
            raise ParseError(f"node state: not a Slurm node state: {_clip(repr(value))}")
        names.append(core)
    for f in flags:
        if not _STATE_TOKEN_RE.fullmatch(f):
            raise ParseError(f"node state_flags: not a Slurm state flag: {_clip(f)}")
    # 24.11 lists may put a flag first; the base is the first known base state.
    base = next((n for n in names if n.lower() in BASE_STATES), names[0])
    rest = {n.upper() for n in names if n is not base} | {f.upper() for f in flags} | marks
    return base.lower(), frozenset(rest)


_HOLDS_REASON = frozenset({"DRAIN", "FAIL", "FAILING"})


def _live_reason(reason: str, state: str, flags: frozenset[str]) -> str:
    """The reason minus what Slurm 24.11 keeps of one of our drains that has ended.

    24.11.5 leaves the reason on a node after UNDRAIN/RESUME (22.05 clears it) and, when
    such a node then stops answering, sets ``<old reason> : Not responding``. slurmguard
    only ever drains, so our prefix on a node without DRAIN/FAIL is such a leftover: it is
    dropped (the node reads as on 22.05), or cut down to Slurm's part on a DOWN node. A
    DOWN node's own reason (``state=down reason=...``, no `` : `` suffix) is the reason it is
    down and stays. The raw text stays in ``raw``.
    """
    if not reason.startswith(REASON_PREFIX) or flags & _HOLDS_REASON:
        return reason
    if state == "down":
        return reason.rsplit(" : ", 1)[1].strip() if " : " in reason else reason
    return ""


def node_info_from_show(f: Mapping[str, str]) -> NodeInfo:
    """NodeInfo from one :func:`parse_show_node_oneliner` record."""
    name = f.get("NodeName", "")
    if not name:
        raise ParseError("scontrol show node: record without a NodeName")
    if "State" not in f:
        raise ParseError(f"scontrol show node: node {name}: no State field")
    state, flags = parse_node_state(f["State"])
    reason = f.get("Reason", "")
    reason = _live_reason("" if reason.lower() in _NULLS else reason, state, flags)
    return NodeInfo(
        name=name, state=state, flags=flags, reason=reason,
        reason_user=f.get("ReasonUser", "") if reason else "",
        reason_time=f.get("ReasonTime", "") if reason else "",
        partitions=_csv(f.get("Partitions", "")),
        features=_csv(f.get("ActiveFeatures", f.get("Features", ""))),
        gres=_null(f.get("Gres", "")),
        raw=dict(f),
    )


def job_info_from_show(f: Mapping[str, str]) -> JobInfo:
    """JobInfo from one :func:`parse_show_job_oneliner` record."""
    jid = f.get("JobId", "")
    if "JobState" not in f:
        raise ParseError(f"scontrol show job: job {jid}: no JobState field")
    state = f["JobState"]
    if not _STATE_TOKEN_RE.fullmatch(state):
        raise ParseError(f"scontrol show job: JobState: not a job state: {_clip(state)}")
    return JobInfo(
        job_id=jid, state=state.upper(), reason=_null(f.get("Reason", "")),
        nodes=_null(f.get("NodeList", "")),
        restart_count=_int(f.get("Restarts", "0"), "Restarts"),
        eligible_time=_show_time(f.get("EligibleTime", ""), "EligibleTime"),
        requeue=f.get("Requeue", "0") == "1", batch_host=_null(f.get("BatchHost", "")),
        exc_nodes=_null(f.get("ExcNodeList", "")),
        priority=_int(f["Priority"], "Priority") if "Priority" in f else None,
        raw=dict(f),
    )


# ---------------------------------------------------------------------------------------------
# --json


def _load_doc(text: object, what: str) -> dict[str, Any]:
    if not isinstance(text, (str, bytes)):
        raise ParseError(f"{what}: expected JSON text, got {type(text).__name__}")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"{what}: not valid JSON: {_clip(str(exc))}") from None
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _load_json(text: object, what: str, key: str) -> list[Any]:
    items = _load_doc(text, what).get(key)
    if not isinstance(items, list):
        raise ParseError(f"{what}: {key}: expected a list, got {_clip(repr(items))}")
    return items


def parse_sinfo_json(text: str | bytes) -> list[NodeInfo]:
    """``sinfo --json`` of any release -> NodeInfo per node.

    22.05/23.02 list node objects under ``nodes``; 23.11+ list node groups under ``sinfo``
    (see the module docstring: a group of several nodes gives them no reason).
    """
    what = "sinfo --json"
    doc = _load_doc(text, what)
    if "sinfo" in doc and "nodes" not in doc:
        groups = doc["sinfo"]
        if not isinstance(groups, list):
            raise ParseError(f"{what}: sinfo: expected a list, got {_clip(repr(groups))}")
        return _nodes_from_groups(groups)
    if "nodes" not in doc:
        raise ParseError(f"{what}: expected a 'nodes' or a 'sinfo' list, got keys "
                         f"{_clip(repr(sorted(map(str, doc))))}")
    return _nodes_from_objects(_load_json(text, what, "nodes"))


def parse_scontrol_nodes_json(text: str | bytes) -> list[NodeInfo]:
    """``scontrol --json show nodes`` (23.02+) -> NodeInfo per node, reasons per node."""
    return _nodes_from_objects(_load_json(text, "scontrol --json show nodes", "nodes"),
                               "scontrol --json")


def _nodes_from_objects(objs: list[Any], what: str = "sinfo --json") -> list[NodeInfo]:
    seen: dict[str, NodeInfo] = {}
    for obj in objs:
        info = node_info_from_json(obj, what)
        seen.setdefault(info.name, info)
    return list(seen.values())


def _nodes_from_groups(groups: list[Any]) -> list[NodeInfo]:
    """23.11+ ``sinfo --json``: one NodeInfo per name; partitions merged over its groups."""
    seen: dict[str, NodeInfo] = {}
    for i, group in enumerate(groups):
        what = f"sinfo --json: sinfo[{i}]"
        if not isinstance(group, dict):
            raise ParseError(f"{what}: expected an object, got {_clip(repr(group))}")
        names = _jlist(_jobj(group, "nodes", what).get("nodes"), f"{what}: nodes.nodes")
        for name in names:
            if not _NODE_NAME_RE.fullmatch(name):
                raise ParseError(f"{what}: nodes.nodes: not a node name: {_clip(name)}")
        node = _jobj(group, "node", what)
        state, flags = parse_node_state(node.get("state"), node.get("state_flags", []))
        part = group.get("partition", {})
        if isinstance(part, dict):
            partition = _jstr(part, "name", f"{what}: partition")
        elif isinstance(part, str):
            partition = part
        else:
            raise ParseError(f"{what}: partition: expected an object, got {_clip(repr(part))}")
        feats = group.get("features", {})
        if isinstance(feats, dict):
            features = _jlist(feats.get("active", feats.get("total", "")),
                              f"{what}: features.active")
        else:
            features = _jlist(feats, f"{what}: features")
        reason, user, at = _group_reason(group.get("reason", ""), what)
        # 26.05 (v0.0.45) moved the reason's user out of `reason` to the group
        user = user or _jstr(group, "reason_set_by_user", what)
        reason = _live_reason(reason, state, flags)
        gres = group.get("gres", "")
        gres = _jstr(gres, "total", f"{what}: gres") if isinstance(gres, dict) else _jstr(
            group, "gres", what)
        for name in names:
            prev = seen.get(name)
            if prev is not None:
                if partition and partition not in prev.partitions:
                    seen[name] = prev.replace(partitions=(*prev.partitions, partition))
                continue
            alone = len(names) == 1  # a shared group's reason is only its first node's
            seen[name] = NodeInfo(
                name=name, state=state, flags=flags, reason=reason if alone else "",
                reason_user=user if alone else "",
                reason_time=_iso(at) if alone and at else "",
                partitions=(partition,) if partition else (), features=features,
                gres=_null(gres), raw=group)
    return list(seen.values())


def _group_reason(value: object, what: str) -> tuple[str, str, float]:
    if isinstance(value, str):
        return value, "", 0
    if not isinstance(value, dict):
        raise ParseError(f"{what}: reason: expected an object, got {_clip(repr(value))}")
    return (_jstr(value, "description", f"{what}: reason"), _jstr(value, "user", f"{what}: reason"),
            _jnum(value.get("time", 0), f"{what}: reason.time"))


def parse_squeue_json(text: str | bytes) -> list[JobInfo]:
    """``squeue --json`` (22.05 or 24.11 shape) -> JobInfo per job."""
    return [job_info_from_json(o) for o in _load_json(text, "squeue --json", "jobs")]


def node_info_from_json(obj: object, source: str = "sinfo --json") -> NodeInfo:
    """NodeInfo from one node object (``sinfo --json`` 22.05/23.02, ``scontrol --json``)."""
    if not isinstance(obj, dict):
        raise ParseError(f"{source}: node: expected an object, got {_clip(repr(obj))}")
    name = _jstr(obj, "name", f"{source}: node")
    what = f"{source}: node {name}"
    if not name:
        raise ParseError(f"{source}: node: empty name")
    state, flags = parse_node_state(obj.get("state"), obj.get("state_flags", []))
    reason_at = _jnum(obj.get("reason_changed_at", 0), f"{what}: reason_changed_at")
    reason = _live_reason(_jstr(obj, "reason", what), state, flags)
    user = _jstr(obj, "reason_set_by_user", what)
    return NodeInfo(
        name=name, state=state, flags=flags, reason=reason,
        # 24.11 names a user even with no reason set; the text output does not.
        reason_user=user if reason else "",
        reason_time=_iso(reason_at) if reason and reason_at else "",
        partitions=_jlist(obj.get("partitions", []), f"{what}: partitions"),
        features=_jlist(obj.get("active_features", obj.get("features", "")),
                        f"{what}: active_features"),
        gres=_null(_jstr(obj, "gres", what)),
        raw=obj,
    )


def job_info_from_json(obj: object) -> JobInfo:
    """JobInfo from one job object of ``squeue --json``."""
    if not isinstance(obj, dict):
        raise ParseError(f"squeue --json: job: expected an object, got {_clip(repr(obj))}")
    jid = _jnum(obj.get("job_id"), "squeue --json: job_id")
    what = f"squeue --json: job {jid}"
    raw_state = obj.get("job_state")
    states = raw_state if isinstance(raw_state, list) else [raw_state]
    if not states or not all(isinstance(s, str) and _STATE_TOKEN_RE.fullmatch(s) for s in states):
        raise ParseError(f"{what}: job_state: not a job state: {_clip(repr(raw_state))}")
    eligible = _jnum(obj.get("eligible_time", 0), f"{what}: eligible_time")
    prio = obj.get("priority")
    if isinstance(prio, dict) and not prio.get("set", True):
        prio = None  # 23.02+: {"set": false} is "no priority", not priority 0 (held)
    return JobInfo(
        job_id=str(int(jid)), state=states[0].upper(), reason=_null(_jstr(obj, "state_reason", what)),
        nodes=_jstr(obj, "nodes", what), restart_count=int(_jnum(obj.get("restart_cnt", 0),
                                                                  f"{what}: restart_cnt")),
        eligible_time=float(eligible) if eligible else None,
        requeue=_jbool(obj.get("requeue", False), f"{what}: requeue"),
        batch_host=_jstr(obj, "batch_host", what), exc_nodes=_jstr(obj, "excluded_nodes", what),
        priority=None if prio is None else int(_jnum(prio, f"{what}: priority")),
        raw=obj,
    )


def parse_version(text: str) -> tuple[int, int, int]:
    """``scontrol -V`` (``slurm 24.11.5``, ``slurm-wlm 22.05.8``) -> (24, 11, 5)."""
    m = re.fullmatch(r"\s*slurm(?:-wlm)?\s+(\d+)\.(\d+)(?:\.(\d+))?\S*\s*", str(text))
    if not m:
        raise ParseError(f"scontrol -V: not a Slurm version: {_clip(str(text))}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


# ---------------------------------------------------------------------------------------------
# small converters, each raising ParseError naming the field


def _clip(text: str, limit: int = 80) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _null(value: str) -> str:
    return "" if value.strip().lower() in _NULLS else value


def _csv(value: str) -> tuple[str, ...]:
    return () if _null(value) == "" else tuple(v for v in value.split(",") if v)


def _int(value: str, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParseError(f"{key}: expected an integer, got {_clip(value)}") from None


def _show_time(value: str, key: str) -> float | None:
    if _null(value) == "":
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        raise ParseError(f"{key}: expected YYYY-MM-DDTHH:MM:SS, got {_clip(value)}") from None


def _iso(epoch: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))
    except (ValueError, OverflowError, OSError):
        raise ParseError(f"timestamp out of range: {epoch!r}") from None


def _jstr(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ParseError(f"{what}: {key}: expected a string, got {_clip(repr(value))}")
    return value


def _jnum(value: object, what: str) -> float:
    # 24.11 wraps numbers: {"set": true, "infinite": false, "number": 17}
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return 0
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ParseError(f"{what}: expected a number, got {_clip(repr(value))}")
    if abs(value) > 2**63:
        raise ParseError(f"{what}: number out of range: {_clip(repr(value))}")
    return value


def _jobj(obj: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise ParseError(f"{what}: {key}: expected an object, got {_clip(repr(value))}")
    return value


def _jbool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ParseError(f"{what}: expected true/false, got {_clip(repr(value))}")
    return value


def _jlist(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return _csv(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ParseError(f"{what}: expected a list of strings, got {_clip(repr(value))}")


# ---------------------------------------------------------------------------------------------
# sacct (Slurm accounting, slurmdbd)


class AcctRecord(Frozen):
    """One allocation of a job in Slurm accounting (``sacct -D -X``: a requeued job has one
    record per run). Times are epoch seconds (whole seconds: slurmdbd's resolution). Frozen."""

    __slots__ = ("job_id", "state", "start", "end", "nodes", "partition", "user", "gpus",
                 "node_count", "submit", "cluster", "workdir")
    job_id: str
    state: str  # COMPLETED, REQUEUED, NODE_FAIL, FAILED, CANCELLED, ...
    start: float | None
    end: float | None
    nodes: str  # NodeSet as Slurm writes it
    partition: str
    user: str
    gpus: int  # gres/gpu in the allocated TRES
    node_count: int
    submit: float | None
    cluster: str
    workdir: str

    def __init__(self, job_id: str, state: str, start: float | None, end: float | None,
                 nodes: str = "", partition: str = "", user: str = "", gpus: int = 0,
                 node_count: int = 0, submit: float | None = None, cluster: str = "",
                 workdir: str = "") -> None:
        for k, v in (("job_id", job_id), ("state", state), ("start", start), ("end", end),
                     ("nodes", nodes), ("partition", partition), ("user", user),
                     ("gpus", gpus), ("node_count", node_count), ("submit", submit),
                     ("cluster", cluster), ("workdir", workdir)):
            object.__setattr__(self, k, v)


def parse_sacct_json(text: str | bytes) -> list[AcctRecord]:
    """``sacct -D -X --json`` (22.05 OpenAPI v0.0.38, or 24.11's wrapped numbers) -> records.

    Job steps are ignored (``-X``); a record that never started has ``start`` None.
    """
    out = []
    for obj in _load_json(text, "sacct --json", "jobs"):
        if not isinstance(obj, dict):
            raise ParseError(f"sacct --json: job: expected an object, got {_clip(repr(obj))}")
        jid = int(_jnum(obj.get("job_id"), "sacct --json: job_id"))
        what = f"sacct --json: job {jid}"
        arr = obj.get("array") if isinstance(obj.get("array"), dict) else {}
        task = arr.get("task_id") if arr else None
        if isinstance(task, dict):
            task = task.get("number") if task.get("set", True) else None
        job_id = f"{int(_jnum(arr['job_id'], what + ': array.job_id'))}_{int(task)}" if (
            isinstance(task, (int, float)) and not isinstance(task, bool) and arr.get("job_id")) \
            else str(jid)
        state = obj.get("state")
        cur = state.get("current") if isinstance(state, dict) else state
        if isinstance(cur, list):
            cur = cur[0] if cur else ""
        if not isinstance(cur, str) or not _STATE_TOKEN_RE.fullmatch(cur):
            raise ParseError(f"{what}: state.current: not a job state: {_clip(repr(cur))}")
        t = obj.get("time")
        if not isinstance(t, dict):
            raise ParseError(f"{what}: time: expected an object, got {_clip(repr(t))}")
        start = _jnum(t.get("start", 0) or 0, f"{what}: time.start")
        end = _jnum(t.get("end", 0) or 0, f"{what}: time.end")
        submit = _jnum(t.get("submission", 0) or 0, f"{what}: time.submission")
        plain, typed, nnodes = None, 0, 0
        tres = obj.get("tres") if isinstance(obj.get("tres"), dict) else {}
        for item in (tres or {}).get("allocated") or []:
            if not isinstance(item, dict):
                continue
            count = item.get("count")
            if not isinstance(count, (int, float)) or isinstance(count, bool):
                continue
            name = str(item.get("name") or "")
            if item.get("type") == "gres" and name == "gpu":
                plain = int(count)  # gres/gpu: all GPUs; gres/gpu:a100 counts a type
            elif item.get("type") == "gres" and name.startswith("gpu:"):
                typed += int(count)
            elif item.get("type") == "node":
                nnodes = int(count)
        gpus = plain if plain is not None else typed
        out.append(AcctRecord(
            job_id=job_id, state=cur.upper(), start=float(start) or None,
            end=float(end) or None, nodes=_null(_jstr(obj, "nodes", what)),
            partition=_jstr(obj, "partition", what), user=_jstr(obj, "user", what),
            gpus=gpus, node_count=nnodes, submit=float(submit) or None,
            cluster=_jstr(obj, "cluster", what), workdir=_jstr(obj, "working_directory", what)))
    return out


SACCT_FIELDS = "JobID,State,Start,End,NodeList,Partition,User,AllocTRES,Submit,Cluster,WorkDir"


def parse_sacct_parsable(text: str) -> list[AcctRecord]:
    """``sacct -D -X -P -n --format=`` :data:`SACCT_FIELDS` (``|``-separated) -> records."""
    if not isinstance(text, str):
        raise ParseError(f"sacct -P: expected text, got {type(text).__name__}")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) < 11:  # WorkDir is last: a '|' in it stays in it
            raise ParseError(f"sacct -P: line {n}: expected 11 fields ({SACCT_FIELDS}), "
                             f"got {len(cols)}: {_clip(line)}")
        jid, state, start, end, nodes, part, user, tres, submit, cluster = cols[:10]
        workdir = "|".join(cols[10:])
        if not re.fullmatch(r"[0-9]+(_[0-9]+)?", jid):
            raise ParseError(f"sacct -P: line {n}: JobID: not a job id: {_clip(jid)}")
        state = state.split()[0] if state.strip() else ""  # "CANCELLED by 0"
        if not _STATE_TOKEN_RE.fullmatch(state):
            raise ParseError(f"sacct -P: line {n}: State: not a job state: {_clip(state)}")
        gpus = nnodes = 0
        for item in tres.split(","):
            key, _, val = item.partition("=")
            if key in ("gres/gpu", "node") and val.isdigit():
                if key == "node":
                    nnodes = int(val)
                else:
                    gpus = int(val)
        out.append(AcctRecord(
            job_id=jid, state=state.upper(), start=_acct_time(start, n, "Start"),
            end=_acct_time(end, n, "End"), nodes=_null(nodes) if nodes != "None assigned" else "",
            partition=part, user=user, gpus=gpus, node_count=nnodes,
            submit=_acct_time(submit, n, "Submit"), cluster=cluster, workdir=workdir))
    return out


def _acct_time(value: str, line: int, key: str) -> float | None:
    if value.strip() in ("", "Unknown", "None", "N/A"):
        return None
    try:
        return time.mktime(time.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        raise ParseError(f"sacct -P: line {line}: {key}: expected YYYY-MM-DDTHH:MM:SS, "
                         f"got {_clip(value)}") from None
