"""Parsers for Slurm's format-string output: one node from ``sinfo -O``, the queue from
``squeue -O``. Both ask slurmctld for less than ``scontrol show node`` / ``squeue --json``
(docs/slurm.md, "What each read costs slurmctld").

Each field is printed with no width (``Field:|``: Slurm then neither pads nor cuts it) and a
``|`` after it; the one free-text field (the node's or the job's reason) comes last, without
the ``|``, so a ``|`` inside it stays in it. Seen on 22.05.8; the field names used here are in
the ``-O`` tables of 24.11 and 26.05 too (their sinfo/squeue man pages), and the state may be
lower-case (22.05: ``idle+drain``) or upper-case: both parse.

Anything else raises :class:`ParseError` with a one-line message naming the field and value.
"""

from __future__ import annotations

from slurmguard.adapters.slurm.parse import (
    BASE_STATES,
    JobInfo,
    NodeInfo,
    _clip,
    _csv,
    _live_reason,
    _null,
    _show_time,
    parse_node_state,
)
from slurmguard.errors import ParseError
from slurmguard.lazyre import LazyPattern

# sinfo -N -n NAME -O: one line per partition the node is in. StateComplete is the base state
# and every flag (`idle+drain+reboot_requested`, `down+not_responding`), 20.11 on; User and
# TimeStamp say who set the reason and when (`Unknown` without one); Features/features_act
# the available and active features.
SINFO_NODE_FIELDS = ("NodeList", "StateComplete", "User", "TimeStamp", "Gres", "PartitionName",
                     "Features", "features_act", "Reason")
SINFO_NODE_FORMAT = ",".join(f"{f}:|" for f in SINFO_NODE_FIELDS[:-1]) + f",{SINFO_NODE_FIELDS[-1]}:"
_NODE_NAME_RE = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


def parse_sinfo_node(text: str, name: str) -> NodeInfo | None:
    """``sinfo -h -N -n NAME -O`` :data:`SINFO_NODE_FORMAT` -> the node, or None if Slurm
    printed nothing (no such node). Raw keys are scontrol's (``Reason``, ``ReasonUser``, ...)
    so callers read one shape whichever command answered."""
    what = f"sinfo node {name}"
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    lead = name + "|"
    records: list[str] = []
    for line in text.splitlines():
        if line.startswith(lead):
            records.append(line)
        elif records:
            records[-1] += "\n" + line  # a newline inside the reason (Slurm keeps it)
        elif line.strip():
            raise ParseError(f"{what}: expected a line starting with {lead!r}, got {_clip(line)}")
    if not records:
        return None
    nodes = [_sinfo_record(r, what) for r in records]
    first = nodes[0]
    partitions = []
    for n in nodes:
        if (n.state, n.flags, n.raw["Reason"]) != (first.state, first.flags, first.raw["Reason"]):
            # One node per line and partition: the lines differ only in the partition. Else a
            # reason's newline has faked a line: refuse rather than guess.
            raise ParseError(f"{what}: partition lines disagree: {_clip(records[0])} vs "
                             f"{_clip(records[nodes.index(n)])}")
        partitions += [p for p in n.partitions if p not in partitions]
    raw = dict(first.raw, Partitions=",".join(partitions))
    return NodeInfo(first.name, first.state, first.flags, first.reason, first.reason_user,
                    first.reason_time, tuple(partitions), first.features, first.gres, raw)


# A line that starts a node's record in multi-node output: its name, then its state.
_RECORD_HEAD_RE = LazyPattern(r"([A-Za-z0-9_][A-Za-z0-9_.\-]{0,127})\|[A-Za-z_+*~#%$@!^\-]+\|")


def parse_sinfo_nodes(text: str) -> list[NodeInfo]:
    """``sinfo -h -N -O`` :data:`SINFO_NODE_FORMAT` over many nodes (``-t drain``: the
    drained ones) -> one NodeInfo per node, its lines (one per partition) merged as
    :func:`parse_sinfo_node` merges them; a line that does not start a record continues the
    reason of the one before (a newline inside it)."""
    if not isinstance(text, str):
        raise ParseError(f"sinfo nodes: expected text, got {type(text).__name__}")
    lines: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in text.splitlines():
        m = _RECORD_HEAD_RE.match(line)
        if m and line.count("|") >= len(SINFO_NODE_FIELDS) - 1:
            last = lines.setdefault(m.group(1), [])
            last.append(line)
        elif last is not None:
            last[-1] += "\n" + line
        elif line.strip():
            raise ParseError(f"sinfo nodes: expected a line starting with a node name and "
                             f"'|', got {_clip(line)}")
    out = []
    for name, recs in lines.items():
        info = parse_sinfo_node("\n".join(recs), name)
        if info is not None:
            out.append(info)
    return out


def _sinfo_record(rec: str, what: str) -> NodeInfo:
    cols = rec.split("|", len(SINFO_NODE_FIELDS) - 1)
    if len(cols) != len(SINFO_NODE_FIELDS):
        raise ParseError(f"{what}: expected {len(SINFO_NODE_FIELDS)} fields "
                         f"({','.join(SINFO_NODE_FIELDS)}), got {len(cols)}: {_clip(rec)}")
    node, state_text, user, at, gres, part, avail, active, reason_text = cols
    if not _NODE_NAME_RE.fullmatch(node):
        raise ParseError(f"{what}: NodeList: not a node name: {_clip(node)}")
    state, flags = parse_node_state(state_text)
    if state not in BASE_STATES:
        # A flag is new in some release now and then (BLOCKED, 23.02), a base state is not:
        # an unknown one means the columns are not what we asked for.
        raise ParseError(f"{what}: StateComplete: not a Slurm node state: {_clip(state_text)}")
    reason_full = "" if reason_text.strip().lower() in ("", "none", "(null)") else reason_text
    reason = _live_reason(" ".join(reason_full.split()), state, flags)
    user, at = _null(user), _null(at)
    if at and reason:
        _show_time(at, "TimeStamp")  # garbage here is a ParseError naming TimeStamp
    raw = {"NodeName": node, "State": state_text.upper(), "Reason": " ".join(reason_full.split()),
           "ReasonUser": user, "ReasonTime": at, "Gres": gres, "Partitions": _null(part),
           "AvailableFeatures": avail, "ActiveFeatures": active}
    return NodeInfo(
        name=node, state=state, flags=flags, reason=reason,
        reason_user=user if reason else "", reason_time=at if reason else "",
        partitions=_csv(part), features=_csv(active if _null(active) else avail),
        gres=_null(gres), raw=raw)


# squeue -O, one line per job in the queue (plain squeue lists no ended job, on every version:
# the same set as SlurmCLI.jobs(), which drops 22.05 --json's ended ones). JobID is the job's
# own id (an array task's too), as squeue --json's job_id; Reason is the pending reason, or
# the description Slurm set instead (`launch failed requeued held`, which squeue --json puts
# in state_description beside state_reason JobHeldUser). No -O field names the excluded
# nodes on 22.05 (`%x` of -o has no RestartCnt beside it): exc_nodes stays "" here, and
# SlurmCLI.job() reads it for the few jobs that need it.
SQUEUE_FIELDS = ("JobID", "State", "PriorityLong", "RestartCnt", "EligibleTime", "NodeList",
                 "BatchHost", "Requeue", "Reason")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS[:-1]) + f",{SQUEUE_FIELDS[-1]}:"
_JOB_STATE_RE = LazyPattern(r"[A-Z][A-Z_]{0,31}")


def parse_squeue_brief(text: str) -> list[JobInfo]:
    """``squeue -h -O`` :data:`SQUEUE_FORMAT` -> JobInfo per job (``exc_nodes`` not read)."""
    if not isinstance(text, str):
        raise ParseError(f"squeue: expected text, got {type(text).__name__}")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(cols) != len(SQUEUE_FIELDS):
            if out and not line.split("|", 1)[0].isdigit():
                # A newline inside the last job's reason (free text): join it back.
                out[-1] = _with_reason(out[-1], out[-1].reason + " " + line)
                continue
            raise ParseError(f"squeue: line {n}: expected {len(SQUEUE_FIELDS)} fields "
                             f"({','.join(SQUEUE_FIELDS)}), got {len(cols)}: {_clip(line)}")
        out.append(_squeue_job(cols, n))
    return out


def _squeue_job(cols: list[str], n: int) -> JobInfo:
    jid, state, prio, restarts, eligible, nodes, batch, requeue, reason = cols
    where = f"squeue: line {n}"
    if not jid.isdigit():
        raise ParseError(f"{where}: JobID: not a job id: {_clip(jid)}")
    if not _JOB_STATE_RE.fullmatch(state):
        raise ParseError(f"{where}: State: not a job state: {_clip(state)}")
    for key, value in (("PriorityLong", prio), ("RestartCnt", restarts)):
        if not value.isdigit():
            raise ParseError(f"{where}: {key}: expected an integer, got {_clip(value)}")
    if requeue not in ("0", "1"):
        raise ParseError(f"{where}: Requeue: expected 0 or 1, got {_clip(requeue)}")
    raw = dict(zip(SQUEUE_FIELDS, cols, strict=True))
    return JobInfo(
        job_id=str(int(jid)), state=state, reason=_null(" ".join(reason.split())),
        nodes=_null(nodes), restart_count=int(restarts),
        eligible_time=_show_time(eligible, f"{where}: EligibleTime"),
        requeue=requeue == "1", batch_host=_null(batch), priority=int(prio), raw=raw)


def _with_reason(job: JobInfo, reason: str) -> JobInfo:
    return JobInfo(job.job_id, job.state, " ".join(reason.split()), job.nodes, job.restart_count,
                   job.eligible_time, job.requeue, job.batch_host, job.exc_nodes, job.priority,
                   job.raw)
