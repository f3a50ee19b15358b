"""What slurmguard costs, read from the outside: slurmctld's RPCs by message type (`sdiag`) and
processes' CPU and memory (/proc). The scale harness (tests/support/scaleharness.py) reads
these at each phase's start and end; nothing here asks slurmguard what it thinks it costs.

sdiag counts the RPCs slurmctld *received*, by message type, since the last `sdiag --reset`
(or its start). Everything on the test host runs as root, so the harness attributes by phase
(reset, run one thing, read) and by type: during a measured phase the harness itself sends
only `sdiag` (REQUEST_STATS_INFO) and the job submissions it is measuring.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# "\tREQUEST_NODE_INFO   ( 2007) count:12   ave_time:345   total_time:4140"
_RPC_LINE = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)"
                       r"\s+total_time:(\d+)\s*$")
_SECTION = "Remote Procedure Call statistics by message type"

# Slurm's own traffic: what a cluster with jobs costs with no slurmguard at all (node daemons
# registering and reporting, jobs submitted, started, completed). The rest are client queries
# and updates: on the scale harness's host, during a measured phase, those come from
# slurmguard (the harness polls nothing while a phase runs).
SLURM_OWN = frozenset({
    "MESSAGE_NODE_REGISTRATION_STATUS", "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_PROLOG",
    "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_STEP_COMPLETE",
    "REQUEST_JOB_STEP_CREATE", "REQUEST_JOB_ALLOCATION_INFO", "REQUEST_RESOURCE_ALLOCATION",
    "REQUEST_COMPLETE_JOB_ALLOCATION", "REQUEST_JOB_READY", "REQUEST_STATS_INFO",
    "REQUEST_HET_JOB_ALLOC_INFO", "REQUEST_JOB_PACK_ALLOC_INFO", "REQUEST_KILL_JOB",
    "REQUEST_CANCEL_JOB_STEP", "MESSAGE_COMPOSITE", "REQUEST_PING", "REQUEST_SHUTDOWN",
    "REQUEST_FED_INFO",  # every sbatch asks it once before submitting
})


@dataclass(frozen=True)
class RpcCount:
    type: str
    count: int
    total_us: int


def parse_sdiag(text: str) -> dict[str, RpcCount]:
    """The by-message-type section of `sdiag` output: type -> count and total time (us).
    Lines outside that section (by user, pending RPCs, scheduler figures) are ignored; a
    section that is absent gives {} (sdiag of another Slurm version says so by its lines)."""
    out: dict[str, RpcCount] = {}
    inside = False
    for line in text.splitlines():
        if _SECTION in line:
            inside = True
            continue
        if inside and line.startswith("Remote Procedure Call statistics by"):
            break
        if not inside:
            continue
        m = _RPC_LINE.match(line)
        if m:
            out[m.group(1)] = RpcCount(m.group(1), int(m.group(3)), int(m.group(5)))
    return out


def split_rpcs(counts: dict[str, RpcCount]) -> tuple[int, int]:
    """(Slurm's own RPCs, the client queries and updates) of one sdiag reading."""
    own = sum(c.count for t, c in counts.items() if t in SLURM_OWN)
    return own, sum(c.count for t, c in counts.items() if t not in SLURM_OWN)


def client_rpc_us(counts: dict[str, RpcCount]) -> int:
    """slurmctld's server time (us, sdiag's total_time) in the client queries and updates of
    one sdiag reading: what slurmguard's RPCs cost it on this host, whatever else it serves."""
    return sum(c.total_us for t, c in counts.items() if t not in SLURM_OWN)


_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Cpu:
    """CPU seconds of one process: its own, and its waited-for children's (cutime+cstime:
    what a daemon's hooks cost once it reaped them)."""
    own: float
    children: float


def proc_cpu(pid: int) -> Cpu | None:
    """CPU of ``pid`` from /proc/PID/stat (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return Cpu((utime + stime) / _TICK, (cutime + cstime) / _TICK)


def proc_rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` in MB (VmRSS), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_sum(pids: list[int]) -> Cpu:
    """The sum of :func:`proc_cpu` over ``pids`` (gone ones count 0)."""
    own = children = 0.0
    for pid in pids:
        c = proc_cpu(pid)
        if c is not None:
            own += c.own
            children += c.children
    return Cpu(own, children)


def children_of(ppid: int) -> list[int]:
    """Pids whose parent is ``ppid`` (e.g. slurmctld's slurmscriptd, which runs
    PrologSlurmctld in Slurm 21.08+)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        if int(raw[raw.rindex(")") + 2:].split()[1]) == ppid:
            out.append(int(entry))
    return out


def rusage_children_cpu() -> float:
    """CPU seconds of this process's reaped children so far (user + system)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q * len(ordered) + 0.5)) - 1))
    return ordered[k]


# -- who asked: the scale harness's tool recorders (scaleharness._write_recorders) ----------
# sdiag cannot tell slurmguard's callers apart (all run as root here), so each Slurm tool the
# harness's configs name logs its caller's command line. The slurmguard subcommand says the
# side: the controller's (serve answers /drains, the policy pass and the gate's socket; the
# rest run on the controller host) or the node's (hooks, the agent, the job's wrapper).
CONTROLLER_SIDE = frozenset({"serve", "gate", "repair", "reconcile", "requeue", "burnin"})
NODE_SIDE = frozenset({"healthcheck", "prolog", "epilog", "check", "agent", "run"})

# RPCs slurmctld receives for one call of each kind on Slurm 22.05, as sdiag counts them
# (tests/test_slurm_rpc_load.py measures each one): a node read loads the partitions too.
RPCS_PER_CALL = {
    "scontrol show node NAME": 2,   # REQUEST_NODE_INFO (the whole table) + PARTITION_INFO
    "scontrol show node": 2,
    "sinfo node NAME": 2,           # REQUEST_NODE_INFO_SINGLE + REQUEST_PARTITION_INFO
    "sinfo drained nodes": 2,       # REQUEST_NODE_INFO (the table, filtered by sinfo) + PARTITION
    "scontrol show partition": 1,   # REQUEST_PARTITION_INFO (the hooks' fallback, no node)
    "scontrol update": 1,           # REQUEST_UPDATE_NODE
}


def caller_side(cmdline: str) -> tuple[str, str]:
    """(side, subcommand) of a recorded caller's command line: ``controller`` or ``node`` by
    the first slurmguard subcommand among its words, else ``other`` and its program name."""
    for word in cmdline.split():
        if word in CONTROLLER_SIDE:
            return "controller", word
        if word in NODE_SIDE:
            return "node", word
    prog = cmdline.split()[0].rsplit("/", 1)[-1] if cmdline.split() else "?"
    return "other", prog


def call_kind(call: str) -> str:
    """The kind of a recorded call: ``scontrol show node NAME`` (one node), ``scontrol show
    node`` (the table), ``sinfo node NAME``, ``sinfo drained nodes`` and ``scontrol show
    partition`` (the hooks' fallback), ``scontrol update``, else the tool and its first word."""
    words = call.split()
    tool, args = words[0], [w for w in words[1:] if not w.startswith("-")]
    if tool == "scontrol" and args[:2] == ["show", "node"]:
        return "scontrol show node NAME" if len(args) > 2 else "scontrol show node"
    if tool == "sinfo" and "-n" in words:
        return "sinfo node NAME"
    if tool == "sinfo" and "-t" in words:
        return "sinfo drained nodes"
    if tool == "scontrol" and args[:2] == ["show", "partition"]:
        return "scontrol show partition"
    if tool == "scontrol" and args[:1] == ["update"]:
        return "scontrol update"
    return " ".join([tool] + args[:1] + [w for w in words[1:] if w == "--json"])


def calls_by_side(calls: list[tuple[float, str, str]]) -> dict[str, dict[str, int]]:
    """``side/subcommand`` -> call kind -> count."""
    out: dict[str, dict[str, int]] = {}
    for _, caller, call in calls:
        side, sub = caller_side(caller)
        kinds = out.setdefault(f"{side}/{sub}", {})
        kinds[call_kind(call)] = kinds.get(call_kind(call), 0) + 1
    return out


def node_side_rpcs(by_side: dict[str, dict[str, int]]) -> int:
    """The RPCs the node side's calls cost slurmctld (calls x RPCS_PER_CALL; a kind not in
    the table counts 1, at least the one request it is)."""
    return sum(n * RPCS_PER_CALL.get(kind, 1) for who, kinds in by_side.items()
               if who.startswith("node/") for kind, n in kinds.items())
