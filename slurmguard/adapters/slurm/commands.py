"""The Slurm adapter: read node and job state, drain and undrain nodes, nudge jobs.

Backend: the Slurm command line (``scontrol show ... -o``, ``sinfo -O`` for one node,
``squeue --json``, ``sinfo --json``),
which exists on every Slurm release; tools are called by absolute path from the ``[slurm]``
config section, each through :func:`slurmguard.proc.run_command` with that section's timeout.

Ownership rules (docs/slurm.md): :meth:`SlurmCLI.drain` never touches a DOWN or
not-responding node and never overwrites a drain someone else set; :meth:`SlurmCLI.undrain`
clears only drains whose reason starts with ``slurmguard:``, with ``state=UNDRAIN`` (which,
unlike RESUME, leaves a DOWN base state alone).

Parsers are pure and turn garbage into :class:`ParseError` with a one-line message; hostile
names are refused with :class:`InputError` before any command runs. The text parsers live in
:mod:`slurmguard.adapters.slurm.parse`; this module re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from slurmguard.adapters.slurm.formatted import (
    SINFO_NODE_FORMAT,
    SQUEUE_FORMAT,
    parse_sinfo_node,
    parse_sinfo_nodes,
    parse_squeue_brief,
)
from slurmguard.adapters.slurm.parse import (
    SACCT_FIELDS,
    AcctRecord,
    JobInfo,
    NodeInfo,
    job_info_from_json,
    job_info_from_show,
    node_info_from_json,
    node_info_from_show,
    parse_sacct_json,
    parse_sacct_parsable,
    parse_scontrol_nodes_json,
    parse_show_job_oneliner,
    parse_show_node_oneliner,
    parse_show_partition_oneliner,
    parse_sinfo_json,
    parse_squeue_json,
    parse_version,
    show_node_records,
)
from slurmguard.contract import REASON_MAX, REASON_PREFIX, format_reason, one_line
from slurmguard.errors import CommandError, InputError, ParseError
from slurmguard.lazyre import LazyPattern
from slurmguard.nodeset import validate_node_name, validate_nodeset  # the one rule
from slurmguard.proc import CommandResult, run_command

if TYPE_CHECKING:
    from slurmguard.observe import Withheld

__all__ = [
    "AcctRecord", "parse_sacct_json", "parse_sacct_parsable",
    "REASON_PREFIX", "REASON_MAX", "Change", "JobInfo", "NodeInfo", "SlurmCLI", "format_reason",
    "job_info_from_json", "job_info_from_show", "node_info_from_json", "node_info_from_show",
    "nodes_from_text",
    "parse_scontrol_nodes_json", "parse_show_job_oneliner", "parse_show_node_oneliner",
    "parse_sinfo_json", "parse_squeue_json", "parse_version", "validate_job_id",
    "validate_node_name", "validate_nodeset",
]


# stderr of a call observe mode withheld (the result :meth:`SlurmCLI._run` hands back for a
# call it did not run). Callers do not read it: :meth:`SlurmCLI._call` says so in its flag.
WITHHELD = "withheld: observe mode"


class Change(Enum):
    """What a state-changing method of the adapter came to. A method that answers a bool
    answers True for MADE only, so no caller records a change that was not made."""

    MADE = "made"  # Slurm was asked, and took it
    WITHHELD = "withheld"  # observe mode: not asked (the choke point recorded the call)
    NONE = "none"  # nothing to ask: already so, or the node is someone else's
class NodeEvent(NamedTuple):
    node: str
    start: float
    end: float | None  # None: the node is still out
    state: str  # DRAIN, DOWN, ... as sacctmgr prints it
    reason: str
    user: str


def parse_node_events(text: str) -> list[NodeEvent]:
    """``sacctmgr -n -P show event ... format=NodeName,Start,End,State,Reason,User``."""
    import time as _time

    def when(v: str) -> float | None:
        try:
            return _time.mktime(_time.strptime(v.strip(), "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return None  # "Unknown": still open

    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) < 6:
            raise ParseError(f"sacctmgr show event: expected 6 fields, got {len(cols)}: {line[:120]!r}")
        node, start, end, state, user = cols[0], cols[1], cols[2], cols[3], cols[-1]
        begun = when(start)
        if not node or begun is None:
            continue  # a cluster event (no node) or no start time
        reason = "|".join(cols[4:-1])
        out.append(NodeEvent(node, begun, when(end), state, reason, user.split("(")[0]))
    return out


_JOB_RE = LazyPattern(r"[0-9]{1,12}(_[0-9]{1,9})?(\+[0-9]{1,6})?")
_FIELD_RE = LazyPattern(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def validate_job_id(job_id: object) -> str:
    """Return the job id as a string (``123``, ``123_4`` array task), else raise InputError."""
    text = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
    if not isinstance(text, str) or not _JOB_RE.fullmatch(text):
        raise InputError(f"job id: not a Slurm job id: {_show(job_id)}")
    return text


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def nodes_from_text(text: str, memo: dict[str, NodeInfo] | None = None) -> list[NodeInfo]:
    """NodeInfo per record of ``scontrol show node -o`` output (``No nodes in the system``:
    none). ``memo`` (record text -> NodeInfo, kept by the caller between reads of the same
    table) parses only the records that changed since the last read, and is left holding
    this read's: at 10,000 entries a whole parse is about a second of CPU, and between two
    reads a few seconds apart most nodes' records are the same text."""
    if text.strip().startswith("No nodes in the system"):
        if memo is not None:
            memo.clear()
        return []
    if memo is None:
        return [node_info_from_show(f) for f in parse_show_node_oneliner(text)]
    out, now = [], {}
    for rec in show_node_records(text):
        info = memo.get(rec) or now.get(rec)
        if info is None:
            (fields,) = parse_show_node_oneliner(rec)
            info = node_info_from_show(fields)
        now[rec] = info
        out.append(info)
    memo.clear()
    memo.update(now)
    return out


class SlurmCLI:
    """Slurm through its command line. ``section`` is the ``[slurm]`` config section.

    ``env`` (optional) is the environment for the tools, e.g. ``{"SLURM_CONF": ...}`` plus
    the rest of the caller's environment; None inherits ours.

    Example::

        cli = SlurmCLI.from_config(cfg)
        if not cli.node("gpu001").drained:
            cli.drain("gpu001", format_reason("gpu-xid", "Xid 79 on GPU 3"))
    """

    def __init__(self, section: Mapping[str, object],
                 env: Mapping[str, str] | None = None, *,
                 observe: Callable[[str | None], bool] | None = None) -> None:
        self.tools = {t: str(section.get(t, f"/usr/bin/{t}"))
                      for t in ("scontrol", "sinfo", "squeue", "sacct", "sbatch", "sacctmgr")}
        self.timeout = float(section.get("timeout", 10.0))  # type: ignore[arg-type]
        self.env = dict(env) if env is not None else None
        self._version: tuple[int, int, int] | None = None
        # Observe mode (slurmguard/observe.py): node -> observes? None: everything acts.
        self.observe = observe
        self.withheld: list[Withheld] = []  # what observe mode did not do, in order
        self.on_withheld: Callable[[Withheld], None] | None = None  # serve: the ledger
        self._job_nodes: dict[str, tuple[str, ...]] = {}  # job -> nodes named by our calls

    @classmethod
    def from_config(cls, cfg: Any, env: Mapping[str, str] | None = None, *,
                    person: bool = False) -> SlurmCLI:
        """The adapter for ``cfg``: ``[slurm]``'s tools and timeout, and ``policy.mode``
        (per group) at the choke point. ``person``: an admin's own command (``slurmguard
        drain``/``resume``), which observe mode does not withhold (docs/policy.md)."""
        from slurmguard.observe import observer, observing_groups

        # Nothing observes: no choke point at all (an upgrade's adapter is the old one, no
        # classification, no read of a job's nodes).
        watching = not person and bool(observing_groups(cfg))
        return cls(cfg.section("slurm"), env, observe=observer(cfg) if watching else None)

    def observes(self, node: str | None) -> bool:
        """Does ``node`` observe (its state-changing calls withheld)?"""
        return self.observe is not None and self.observe(node)

    def _run(self, tool: str, *args: str, check: bool = True,
             input: str | None = None) -> CommandResult:
        """Every call to a Slurm tool (:meth:`_call`); for reads and for callers that do not
        ask whether observe mode withheld the call."""
        return self._call(tool, *args, check=check, input=input)[0]

    def _call(self, tool: str, *args: str, check: bool = True,
              input: str | None = None) -> tuple[CommandResult, bool]:
        """The choke point: run ``tool args`` unless observe mode withholds it. Returns the
        result and whether the call was withheld (then nothing ran, and the result is rc 0
        with stderr :data:`WITHHELD`)."""
        argv = [self.tools[tool], *args]
        if self.observe is not None and self._withhold(tool, args):
            return CommandResult(tuple(argv), 0, "", WITHHELD, 0.0), True
        return run_command(argv, timeout=self.timeout, check=check, env=self.env,
                           input=input), False

    def _change(self, tool: str, *args: str) -> Change:
        """A state-changing call through the choke point: MADE or WITHHELD (CommandError when
        Slurm refuses it)."""
        return Change.WITHHELD if self._call(tool, *args)[1] else Change.MADE

    def _withhold(self, tool: str, args: tuple[str, ...]) -> bool:
        """The choke point: True (and the call recorded) when ``tool args`` changes Slurm's
        state and the nodes it touches observe. A job call that names no node goes by the
        nodes earlier calls named for that job (the requeue watcher's ExcNodeList), else
        by the job's own nodes, else by the base config."""
        from slurmguard.observe import Withheld, expand_nodes, state_change

        change = state_change(tool, args)
        if change is None:
            return False
        verb, patterns, job, reason = change
        nodes = tuple(expand_nodes(patterns))
        if job and nodes:
            self._job_nodes[job] = nodes
        elif job:
            nodes = self._job_nodes.get(job) or self._nodes_of_job(job)
        assert self.observe is not None
        observed = any(self.observe(n) for n in nodes) if nodes else self.observe(None)
        if not observed:
            return False
        w = Withheld(verb, nodes, job, (self.tools[tool], *args), reason)
        self.withheld.append(w)
        if self.on_withheld is not None:
            self.on_withheld(w)
        return True

    def _nodes_of_job(self, job: str) -> tuple[str, ...]:
        from slurmguard.observe import expand_nodes

        try:
            info = self.job(job)
        except (CommandError, InputError, ParseError):
            return ()
        raw = info.raw if hasattr(info, "raw") else {}
        pats = [str(raw.get(k) or "") for k in ("NodeList", "ExcNodeList", "ReqNodeList")]
        return tuple(expand_nodes(p for p in pats if p and p != "(null)"))

    # -- nodes ---------------------------------------------------------------------------------
    def node(self, name: str) -> NodeInfo:
        """One node's state: ``sinfo -h -N -n NAME -O`` :data:`SINFO_NODE_FORMAT`, which
        slurmctld answers with that node alone (REQUEST_NODE_INFO_SINGLE), where
        ``scontrol show node NAME`` packs the whole node table (REQUEST_NODE_INFO) and
        filters it here: a cost that grows with the cluster on every drain, healthcheck and
        notice (docs/slurm.md). Carries the state, flags, reason (and its user and time),
        Gres, partitions and features; :meth:`node_record` has every field.
        InputError if Slurm has no such node."""
        validate_node_name(name)
        res = self._run("sinfo", "-h", "-N", "-n", name, "-O", SINFO_NODE_FORMAT)
        info = parse_sinfo_node(res.stdout, name)
        if info is None:  # sinfo prints nothing (rc 0) for a name slurmctld does not know
            raise InputError(f"node: not known to Slurm: {name!r}")
        return info

    def node_record(self, name: str) -> NodeInfo:
        """One node with every field Slurm has (``scontrol show node -o NAME``: Comment,
        BootTime, Weight, ...). Costs slurmctld the whole node table: for an admin's command
        or evidence, not for a loop or a hook. InputError if Slurm has no such node."""
        validate_node_name(name)
        found = [n for n in self._show_nodes(name) if n.name == name]
        if not found:
            raise ParseError(f"scontrol show node {name}: no record for node {name!r}")
        return found[0]

    def nodes(self, nodeset: str | None = None) -> list[NodeInfo]:
        """All nodes, or those of ``nodeset`` (``gpu[001-004]``)."""
        if nodeset is not None:
            validate_nodeset(nodeset)
        return self._show_nodes(nodeset)

    def drained_nodes(self) -> list[NodeInfo]:
        """The nodes with DRAIN set (drained, draining, DOWN+DRAIN), each with its reason, the
        reason's user and time, and its partitions: ``sinfo -h -N -a -t drain -O``
        :data:`SINFO_NODE_FORMAT`. slurmctld packs the whole node table for it all the same
        (REQUEST_NODE_INFO: sinfo filters by state on the client, on 22.05 and since), but
        only the drained nodes travel on through the parser: what the hooks' fallback cap
        needs (node/fallback.py, docs/slurm.md)."""
        res = self._run("sinfo", "-h", "-N", "-a", "-t", "drain", "-O", SINFO_NODE_FORMAT)
        return parse_sinfo_nodes(res.stdout)

    def partitions(self) -> dict[str, str]:
        """Partition name -> its node set (``gpu[001-128]``), in Slurm's order:
        ``scontrol show partition -o``, which slurmctld answers from its partition table
        alone (REQUEST_PARTITION_INFO), whatever the number of nodes."""
        return parse_show_partition_oneliner(self._run("scontrol", "show", "partition", "-o").stdout)

    def nodes_text(self) -> str:
        """The whole node table as ``scontrol show node -o`` prints it: what serve's leader
        publishes for the other replicas (serve/slurmview.py), who parse it with
        :func:`nodes_from_text` into the same NodeInfo as :meth:`nodes`."""
        return self._run("scontrol", "show", "node", "-o").stdout

    def _show_nodes(self, nodeset: str | None) -> list[NodeInfo]:
        args = ["show", "node", "-o"] + ([nodeset] if nodeset else [])
        try:
            res = self._run("scontrol", *args)
        except CommandError as exc:
            if exc.rc == 1 and "not found" in exc.stderr:
                raise InputError(f"node: not known to Slurm: {nodeset!r}") from None
            raise
        return nodes_from_text(res.stdout)

    def drain(self, name: str, reason: str) -> bool:
        """Drain ``name`` with ``reason`` (must start ``slurmguard:``); True if we drained it.

        Skips (returns False) a node that is DOWN (Slurm already keeps work off it, and a
        drain would hide the real cause), one already drained by us, and one drained or
        failed by someone else (their reason stays).
        """
        validate_node_name(name)
        if not isinstance(reason, str) or not reason.startswith(REASON_PREFIX):
            raise InputError(f"drain reason: must start with {REASON_PREFIX!r}: {_show(reason)}")
        flat = one_line(reason, REASON_MAX)
        info = self.node(name)
        if info.down or info.drained or "FAIL" in info.flags:
            return False
        return self._change("scontrol", "update", f"nodename={name}", "state=drain",
                            f"reason={flat}") is Change.MADE

    def undrain(self, name: str) -> bool:
        """Clear our own drain of ``name`` with ``state=UNDRAIN``; True if cleared.

        Leaves alone (returns False) a node that is not drained, one drained by anyone
        else, and a DOWN one (Slurm's ReturnToService decides when that comes back).
        """
        return self.undrain_change(name) is Change.MADE

    def undrain_change(self, name: str) -> Change:
        """:meth:`undrain`, saying what it came to: MADE, WITHHELD (observe mode), or NONE
        (a node it leaves alone)."""
        validate_node_name(name)
        info = self.node(name)
        if not info.drained or not info.ours or info.state == "down":
            return Change.NONE
        return self._change("scontrol", "update", f"nodename={name}", "state=UNDRAIN")

    def reboot(self, name: str, reason: str) -> None:
        """Reboot ``name`` through Slurm: ``scontrol reboot ASAP nextstate=DOWN reason=...``.

        Slurm's RebootProgram reboots it once its jobs end and tracks the reboot; the node
        comes back DOWN with ``reason`` (ours), so nothing runs there until we return it.
        CommandError when Slurm refuses (the caller records that as an outcome)."""
        validate_node_name(name)
        if not isinstance(reason, str) or not reason.startswith(REASON_PREFIX):
            raise InputError(f"reboot reason: must start with {REASON_PREFIX!r}: {_show(reason)}")
        self._run("scontrol", "reboot", "ASAP", "nextstate=DOWN",
                  f"reason={one_line(reason, REASON_MAX)}", name)

    def resume_ours(self, name: str) -> bool:
        """Return ``name`` after our own repair: UNDRAIN our drain, RESUME a DOWN node whose
        reason is ours (a reboot's nextstate=DOWN); True if Slurm was asked. Anyone else's
        drain or DOWN is left alone."""
        validate_node_name(name)
        info = self.node(name)
        raw = str(info.raw.get("Reason") or "")  # a DOWN node's reason reads cut (parse.py)
        rebooted = info.down and raw.startswith(f"{REASON_PREFIX} repair:")
        if not rebooted and not (info.ours and info.drained and not info.down):
            return False
        state = "RESUME" if rebooted else "UNDRAIN"
        return self._change("scontrol", "update", f"nodename={name}",
                            f"state={state}") is Change.MADE

    def drain_ours_down(self, name: str, reason: str) -> bool:
        """Drain ``name`` while it is DOWN from our own repair (a reboot's nextstate=DOWN,
        reason ``slurmguard: repair: ...``): the DRAIN stays when ReturnToService brings the
        node back at its next ping, so a ticketed node does not return to service on its own.
        True if Slurm was asked; anyone else's DOWN, and a node not DOWN, are left alone."""
        validate_node_name(name)
        if not isinstance(reason, str) or not reason.startswith(REASON_PREFIX):
            raise InputError(f"drain reason: must start with {REASON_PREFIX!r}: {_show(reason)}")
        info = self.node(name)
        raw = str(info.raw.get("Reason") or "")  # a DOWN node's reason reads cut (parse.py)
        if not info.down or info.drained or not raw.startswith(f"{REASON_PREFIX} repair:"):
            return False
        return self._change("scontrol", "update", f"nodename={name}", "state=drain",
                            f"reason={one_line(reason, REASON_MAX)}") is Change.MADE

    def version(self) -> tuple[int, int, int]:
        """Slurm's version as ``scontrol -V`` prints it, e.g. (24, 11, 5); asked once."""
        if self._version is None:
            self._version = parse_version(self._run("scontrol", "-V").stdout)
        return self._version

    def nodes_json(self) -> list[NodeInfo]:
        """All nodes through Slurm's JSON output; the same NodeInfo as :meth:`nodes`.

        ``scontrol --json show nodes`` from 23.02 on (one object per node, each with its
        own reason); ``sinfo --json`` on 22.05, whose scontrol has no ``--json``. (23.11+
        ``sinfo --json`` groups nodes and keeps one reason per group: not used here.)
        """
        if self.version() >= (23, 2, 0):
            return parse_scontrol_nodes_json(self._run("scontrol", "--json", "show", "nodes").stdout)
        return parse_sinfo_json(self._run("sinfo", "--json").stdout)

    # -- jobs ----------------------------------------------------------------------------------
    def job(self, job_id: str | int) -> JobInfo:
        """One job (``scontrol show job -o ID``); InputError if Slurm no longer knows it."""
        jid = validate_job_id(job_id)
        try:
            res = self._run("scontrol", "show", "job", "-o", jid)
        except CommandError as exc:
            if exc.rc == 1 and "Invalid job id" in exc.stderr:
                raise InputError(f"job: not known to Slurm: {jid}") from None
            raise
        jobs = [job_info_from_show(f) for f in parse_show_job_oneliner(res.stdout)]
        base = jid.split("_")[0].split("+")[0]
        for j in jobs:
            if j.job_id == base or j.job_id == jid:
                return j
        if jobs:
            return jobs[0]
        raise ParseError(f"scontrol show job {jid}: no record for job {jid}")

    def jobs(self) -> list[JobInfo]:
        """Jobs in the queue (``squeue --json``): pending, running, completing.

        22.05's ``squeue --json`` also lists jobs that have ended (until MinJobAge), unlike
        plain ``squeue`` and 24.11's: those are left out here, on every version alike.
        """
        return [j for j in parse_squeue_json(self._run("squeue", "--json").stdout)
                if not j.finished]

    def queue(self) -> list[JobInfo]:
        """Jobs in the queue with what the requeue watcher reads: ``squeue -h -O``
        :data:`SQUEUE_FORMAT` (state, reason, priority, restarts, eligible time, nodes). No
        JSON for Slurm to build and us to parse for every job every poll; ``exc_nodes`` is
        not read (no 22.05 ``-O`` field has it): :meth:`job` has it, for the jobs acted on."""
        return parse_squeue_brief(self._run("squeue", "-h", "-O", SQUEUE_FORMAT).stdout)

    def update_job(self, job_id: str | int, **fields: str | int) -> None:
        """``scontrol update jobid=ID Key=Value ...``, e.g. ``EligibleTime="now"``."""
        jid = validate_job_id(job_id)
        if not fields:
            raise InputError("update_job: no fields given")
        args = []
        for key, value in fields.items():
            if not _FIELD_RE.fullmatch(key):
                raise InputError(f"job field: not a Slurm field name: {_show(key)}")
            text = str(value)
            if not text.isprintable() or len(text) > 4096:
                raise InputError(f"job field {key}: value not printable or too long: {_show(text)}")
            args.append(f"{key}={text}")
        self._run("scontrol", "update", f"jobid={jid}", *args)

    def release(self, job_id: str | int) -> None:
        """Release a held job (``scontrol release ID``)."""
        self._run("scontrol", "release", validate_job_id(job_id))

    def requeue(self, job_id: str | int) -> None:
        """Requeue a batch job (``scontrol requeue ID``)."""
        self._run("scontrol", "requeue", validate_job_id(job_id))

    def accounting(self, job_ids: list[str] | None = None, *, since: float | None = None,
                   until: float | None = None) -> list[AcctRecord]:
        """Allocations from Slurm accounting: ``sacct -D -X --json`` (every run of a requeued
        job), or ``sacct -D -X -P`` where ``--json`` is missing (before 21.08) or fails.

        Raises CommandError when sacct cannot answer (no slurmdbd: "Slurm accounting
        storage is disabled").
        """
        import time as _time

        args = ["-D", "-X", "--allusers"]
        if job_ids:
            args += ["-j", ",".join(validate_job_id(j) for j in job_ids)]
        if since is not None:
            args += ["-S", _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(since)),
                     "-E", _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(
                         _time.time() if until is None else until))]
        res = self._run("sacct", *args, "--json", check=False)
        if res.rc == 0 and res.stdout.lstrip().startswith("{"):
            return parse_sacct_json(res.stdout)
        res = self._run("sacct", *args, "-P", "-n", f"--format={SACCT_FIELDS}")
        return parse_sacct_parsable(res.stdout)

    def node_events(self, since: float, until: float | None = None) -> list[NodeEvent]:
        """Node events from Slurm accounting (``sacctmgr show event event=node``): who took
        which node out of service, why, from when to when (``end`` None: still out).
        CommandError when there is no accounting (no slurmdbd)."""
        import time as _time

        def at(t: float) -> str:
            return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(t))

        res = self._run("sacctmgr", "-n", "-P", "show", "event", "event=node",
                        f"start={at(since)}", f"end={at(_time.time() if until is None else until)}",
                        "format=NodeName,Start,End,State,Reason,User")
        return parse_node_events(res.stdout)

    def ping(self) -> bool:
        """True when the primary slurmctld answers ``scontrol ping`` as UP."""
        try:
            res = self._run("scontrol", "ping", check=False)
        except CommandError:
            return False
        return res.rc == 0 and " is UP" in res.stdout

    def clear_comment(self, name: str, prefix: str) -> bool:
        """Empty the node's Comment when it starts with ``prefix`` (ours); True if cleared."""
        validate_node_name(name)
        if not str(self.node_record(name).raw.get("Comment") or "").startswith(prefix):
            return False
        return self._change("scontrol", "update", f"nodename={name}", "comment=") is Change.MADE

    def show_config(self) -> dict[str, str]:
        """The running slurmctld's config (``scontrol show config``), lower-case keys."""
        from slurmguard.adapters.slurm.conf import parse_show_config

        return parse_show_config(self._run("scontrol", "show", "config").stdout)
