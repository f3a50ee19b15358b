"""`slurmguard gate`: the PrologSlurmctld backstop at allocation time.

slurmctld runs it once per job before the job starts, with SLURM_JOB_ID and
SLURM_JOB_NODELIST set. For each node of the allocation the store is asked whether the node
must not run jobs:

* it is a lemon (fleet policy) -> the lemon's reason;
* it awaits a burn-in -> ``slurmguard: burn-in: awaiting burn-in``;
* its newest result is unhealthy and fresher than ``gate.fresh`` seconds (default 900) ->
  that result's reason; when the check it failed was, at the time, under a shared fault's
  fleet alert (slurmguard.policy.shared), the node is refused the job but never drained for
  it: a filer's hang is not the node's.

When none is refused for those, ``risk.gate_max_nodes`` (off by default) refuses a job of
more than that many nodes the nodes whose stored risk score is at or above ``risk.level``,
and drains nothing (slurmguard.gate.risk; docs/fleet.md).

The gate exits 1 for such nodes, so Slurm requeues the job onto other nodes (with
``SchedulerParameters=nohold_on_prolog_fail``), and drains them with the reason
(``gate.drain``) through the one blast-radius guard (slurmguard.drainguard): past the cap a
node is refused the job but not drained. A node
the store does not know is allowed. When the store cannot be read, ``gate.on_store_error``
decides: ``open`` (default) logs one line and lets the job run; ``closed`` exits 5
(EXIT_STORE) so the job is requeued, and drains nothing: a store fault is never a node fault.

The SQLite path uses the standard library's sqlite3 only (one indexed query on
``nodes.name``); SQLAlchemy is imported only for PostgreSQL stores and when a node is
refused (the guard reads and writes the store's ledger).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurmguard.contract import REASON_PREFIX, is_ours
from slurmguard.errors import EXIT_OK, EXIT_STORE, EXIT_UNHEALTHY, StoreError
from slurmguard.gate.storeopen import opened
from slurmguard.store.sqlite_read import open_read_only, sqlite_path

if TYPE_CHECKING:
    from slurmguard.config import Config
    from slurmguard.store.api import Store

_CHUNK = 500
_COLUMN_NAMES = ("name", "last_seen", "last_health", "last_reason", "lemon", "lemon_reason",
                 "burnin_required", "risk_score", "risk_at", "probation_since")
_COLUMNS = ", ".join(_COLUMN_NAMES)
GATE_QUERY = f"SELECT {_COLUMNS} FROM nodes WHERE name IN ({{marks}})"


@dataclass(frozen=True)
class NodeRow:
    name: str
    last_seen: float | None
    last_health: str | None
    last_reason: str | None
    lemon: bool
    lemon_reason: str | None
    burnin_required: bool
    risk_score: float | None = None  # as serve's policy pass last stored it (risk.gate_max_nodes)
    risk_at: float | None = None
    returned_at: float | None = None  # the node's last return (repair's or a person's), if any

    @classmethod
    def of(cls, r: Sequence[Any]) -> NodeRow:
        """A row of _COLUMN_NAMES, in that order."""
        return cls(r[0], r[1], r[2], r[3], bool(r[4]), r[5], bool(r[6]), r[7], r[8], r[9])


def refusal(row: NodeRow | None, now: float, fresh: float) -> str | None:
    """Why this node must not start a job now (a Slurm drain reason), or None. Pure."""
    if row is None:
        return None
    if row.lemon:
        return row.lemon_reason or f"{REASON_PREFIX} lemon: flagged by fleet policy"
    if row.burnin_required:
        return f"{REASON_PREFIX} burn-in: awaiting burn-in"
    # A result taken before the node's last return is history: the return (repair's verified
    # one, or a person's) judged the node after it. Seen: a health check that ran while a
    # repaired node was still DOWN from its reboot reached serve just after repair returned
    # it, and the gate drained the node again on it.
    if (row.last_health == "unhealthy" and row.last_seen is not None
            and now - row.last_seen <= fresh
            and (row.returned_at is None or row.last_seen > row.returned_at)):
        reason = (row.last_reason or "").strip()
        if is_ours(reason):
            return reason
        return f"{REASON_PREFIX} gate: unhealthy result {int(now - row.last_seen)}s ago: {reason or 'unhealthy'}"
    return None


def read_sqlite(path: str, nodes: Sequence[str], busy_timeout: float) -> dict[str, NodeRow]:
    """The gate's rows from a SQLite store, read-only, with the stdlib driver."""
    import sqlite3

    conn = open_read_only(path, busy_timeout)
    try:
        out: dict[str, NodeRow] = {}
        for i in range(0, len(nodes), _CHUNK):
            chunk = list(nodes[i:i + _CHUNK])
            sql = GATE_QUERY.format(marks=",".join("?" * len(chunk)))
            for r in conn.execute(sql, chunk):
                out[r[0]] = NodeRow.of(r)
        return out
    except sqlite3.Error as exc:
        raise StoreError(f"store {path}: {exc}") from None
    finally:
        conn.close()


def read_store(section: Mapping[str, Any], nodes: Sequence[str],
               store: Store | None = None) -> dict[str, NodeRow]:
    """The gate's rows for ``nodes`` from the configured store (``store``: serve's, open).
    A SQLite store is opened read-only for each job, in serve too: as cheap as a pooled read,
    and a store file moved or removed under serve is unreadable to both paths alike."""
    path = sqlite_path(section)
    if path is not None:
        return read_sqlite(path, nodes, float(section.get("busy_timeout", 5.0)))
    with opened(section, store) as st:
        return {r[0]: NodeRow.of(r) for r in st.nodes.columns(nodes, _COLUMN_NAMES)}


@dataclass
class GateOutcome:
    code: int
    refused: dict[str, str]
    drained: list[str]
    message: str


def run_gate(cfg: Config, env: Mapping[str, str], *, dry_run: bool = False,
             now: float | None = None, store: Store | None = None) -> GateOutcome:
    """Check the job's nodes; drain the refused ones; return the exit code and what was done.
    ``store``: serve's own, when serve answers (slurmguard/gate/sock.py); else one per job."""
    gcfg = cfg.section("gate")
    job = env.get("SLURM_JOB_ID", "?")
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return GateOutcome(EXIT_OK, {}, [], f"job {job}: no SLURM_JOB_NODELIST; nothing to check")
    from slurmguard.nodeset import expand

    nodes = expand(nodelist, source="SLURM_JOB_NODELIST")
    now = time.time() if now is None else now
    try:
        rows = read_store(cfg.section("store"), nodes, store)
    except StoreError as exc:
        if gcfg["on_store_error"] == "closed":
            return GateOutcome(EXIT_STORE, {}, [], f"job {job}: store unreadable, refusing (fail-closed): {exc}")
        return GateOutcome(EXIT_OK, {}, [], f"job {job}: store unreadable, allowing (fail-open): {exc}")
    refused = {}
    for n in nodes:
        why = refusal(rows.get(n), now, float(gcfg["fresh"]))
        if why:
            refused[n] = why
    # Refused, never drained, for a result that failed in a shared fault: the job must not
    # start on a node whose mount may still be gone, but the fault is not the node's.
    shared = _excused(cfg, rows, [n for n in refused if not rows[n].lemon
                                  and not rows[n].burnin_required], now, float(gcfg["fresh"]),
                      store)
    watched = _observed(cfg, refused)
    if watched:  # observe mode: the job runs there; the would-drains go to the ledger
        refused = {n: r for n, r in refused.items() if n not in watched}
        if not dry_run and gcfg["drain"]:
            _drain(cfg, {n: r for n, r in watched.items() if n not in shared}, job, store)
        if not refused:
            what = "; ".join(f"{n}: {r}" for n, r in sorted(watched.items()))
            return GateOutcome(EXIT_OK, {}, [], f"job {job}: observe mode, would refuse "
                                                f"{len(watched)} of {len(nodes)} nodes: {what}")
    if not refused:
        return _risk_gate(cfg, job, nodes, rows, now, dry_run, store)
    drained = [] if dry_run or not gcfg["drain"] else _drain(
        cfg, {n: r for n, r in refused.items() if n not in shared}, job, store)
    what = "; ".join(f"{n}: {r}" for n, r in sorted(refused.items()))
    kept = ("; not drained, its result failed in a shared fault: "
            + ", ".join(f"{n} ({c})" for n, c in sorted(shared.items()))) if shared else ""
    return GateOutcome(EXIT_UNHEALTHY, refused, drained,
                       f"job {job}: refused {len(refused)} of {len(nodes)} nodes: {what}{kept}")


def _excused(cfg: Config, rows: Mapping[str, NodeRow], nodes: Sequence[str], now: float,
             fresh: float, store: Store | None = None) -> dict[str, str]:
    """The ``nodes`` (refused for an unhealthy result) whose result failed for a cause that a
    shared fault covered when it was taken: node -> that cause. A filer that hung for 12 s
    left every node's result of that moment unhealthy; where a node's next result was late
    (a slow health-check pass), the gate refused, and drained within the cap, nodes that had
    been healthy for minutes (the fleet day, 128 nodes at load 57: five healthy nodes drained
    and jobs requeued onto refused nodes for 20 s). Such a result is excused as the fleet
    policy excuses it (slurmguard.policy.shared): the node is judged by its next result.
    Read only when a node is refused for its result; an unreadable store excuses nothing."""
    if not nodes:
        return {}
    from slurmguard.contract import reason_source
    from slurmguard.errors import SlurmguardError
    from slurmguard.policy.blast import cause_key
    from slurmguard.policy.params import PolicyParams
    from slurmguard.policy.shared import FLEET, covering

    params = PolicyParams.from_section(cfg.section("policy"))
    try:
        with opened(cfg.section("store"), store) as st:
            faults = st.nodes.shared_faults(since=now - fresh, blast_window=params.blast_window)
    except SlurmguardError as exc:
        log_line(cfg, f"shared faults unreadable, none excused: {exc}")
        return {}
    if not faults:
        return {}
    scoped: Mapping[str, frozenset[str]] = {}
    if any(f.scope != FLEET for f in faults):  # a partition's or group's alert: Slurm's view
        from slurmguard.adapters.slurm.commands import SlurmCLI
        from slurmguard.policy.blast import scopes

        try:
            scoped = scopes(SlurmCLI.from_config(cfg).nodes(), params.groups)
        except SlurmguardError as exc:
            log_line(cfg, f"Slurm's partitions unreadable, only fleet-wide shared faults "
                          f"excuse: {exc}")
    out = {}
    for n in nodes:
        row = rows[n]
        reason = row.last_reason or ""
        check = reason_source(reason) or (reason.partition(":")[0].strip() if ":" in reason else "")
        cause = cause_key(check, reason) if check else ""
        seen = row.last_seen
        if cause and seen is not None and any(
                c == cause and start <= seen <= end for c, start, end in covering(n, faults, scoped)):
            out[n] = cause
    return out


def _observed(cfg: Config, refused: Mapping[str, str]) -> dict[str, str]:
    """The refused nodes that observe (policy.mode): the gate refuses them nothing."""
    if not refused:
        return {}
    from slurmguard.observe import observer

    observes = observer(cfg)
    return {n: r for n, r in refused.items() if observes(n)}


def _risk_gate(cfg: Config, job: str, nodes: Sequence[str], rows: Mapping[str, NodeRow],
               now: float, dry_run: bool, store: Store | None = None) -> GateOutcome:
    """risk.gate_max_nodes: refuse at-risk nodes to a large job, draining nothing
    (slurmguard.fleet.uses, slurmguard.gate.risk). Off, or a small job: nothing to read."""
    rcfg = cfg.section("risk")
    max_nodes = int(rcfg["gate_max_nodes"])
    if max_nodes <= 0 or len(set(nodes)) <= max_nodes:
        return GateOutcome(EXIT_OK, {}, [], "")
    from slurmguard.fleet.uses import risk_refusal

    scores = {n: (r.risk_score, r.risk_at) for n, r in rows.items()}
    refused = risk_refusal(nodes, scores, max_nodes=max_nodes, level=float(rcfg["level"]), now=now)
    if not refused:
        return GateOutcome(EXIT_OK, {}, [], "")
    from slurmguard.gate.risk import settle

    watched = _observed(cfg, refused)  # observe mode: kept, with a would-event each
    why = settle(cfg, job, nodes, refused, now, dry_run=dry_run, observed=watched, store=store)
    at = ",".join(sorted(refused))
    if why is not None:
        return GateOutcome(EXIT_OK, {}, [], f"job {job}: at-risk {at} kept: {why}")
    what = "; ".join(f"{n}: {r}" for n, r in sorted(refused.items()) if n not in watched)
    if len(watched) == len(refused):
        return GateOutcome(EXIT_OK, {}, [], f"job {job}: observe mode, would refuse "
                                            f"{len(watched)} of {len(set(nodes))} nodes for node "
                                            f"risk: {','.join(sorted(watched))}")
    acting = {n: r for n, r in refused.items() if n not in watched}
    return GateOutcome(EXIT_UNHEALTHY, acting, [],
                       f"job {job}: refused {len(acting)} of {len(set(nodes))} nodes for node "
                       f"risk, none drained: {what}")


def _drain(cfg: Config, refused: Mapping[str, str], job: str,
           store: Store | None = None) -> list[str]:
    """Drain the refused nodes through the one guard (slurmguard.drainguard): the job is
    refused on every node named, but a node is drained only within the blast-radius caps, so
    jobs flowing onto nodes the hooks' guard spared cannot drain the partition."""
    if not refused:
        return []
    from slurmguard.adapters.slurm.commands import SlurmCLI
    from slurmguard.contract import reason_source
    from slurmguard.drainguard import StorePermit, guarded_drain
    from slurmguard.errors import SlurmguardError
    from slurmguard.policy.blast import cause_key, scopes
    from slurmguard.policy.params import PolicyParams

    cli = SlurmCLI.from_config(cfg)
    drained: list[str] = []
    try:
        with opened(cfg.section("store"), store) as st:
            try:
                infos = cli.nodes()
                params = PolicyParams.from_section(cfg.section("policy"))
                permit = StorePermit(st, params, scopes(infos, params.groups), via="gate")
                for node, reason in sorted(refused.items()):
                    cause = cause_key(reason_source(reason) or "gate", reason)
                    done = guarded_drain(cli, permit, node, cause, reason, via="gate", ledger=st,
                                         details={"job": job})
                    if done.result == "drained":
                        drained.append(node)
                    elif done.result in ("refused", "failed"):
                        log_line(cfg, f"{node}: {done.applied}")
            except SlurmguardError as exc:
                log_line(cfg, f"drain failed: {exc}")
    except SlurmguardError as exc:  # no ledger, no permit: refuse the job, drain nothing
        log_line(cfg, f"store unavailable, nothing drained: {exc}")
    return drained


def log_line(cfg: Config, line: str, err: Any = None) -> None:
    """One line to stderr (slurmctld's log; ``err``: the fast path's answer) and to
    gate.log_file when set."""
    text = f"slurmguard gate: {line}"
    print(text, file=err or sys.stderr)
    path = str(cfg.section("gate").get("log_file") or "")
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + text + "\n")
        except OSError:
            pass


def main(config_path: str | None, *, dry_run: bool = False,
         env: Mapping[str, str] | None = None) -> int:
    """The whole gate: load config, check, drain, log; returns the exit code."""
    from slurmguard import config

    cfg = config.load(config_path)
    return answer_job(cfg, os.environ if env is None else env, dry_run=dry_run)


def answer_job(cfg: Config, env: Mapping[str, str], *, dry_run: bool = False,
               err: Any = None, store: Store | None = None) -> int:
    """The gate's whole answer for one job: check, drain, log; the exit code. The one
    definition, run by `slurmguard gate` and by serve's gate socket (slurmguard/gate/sock.py,
    which passes serve's open ``store``)."""
    outcome = run_gate(cfg, env, dry_run=dry_run, store=store)
    if outcome.message:
        log_line(cfg, outcome.message + (f" (drained {','.join(outcome.drained)})"
                                         if outcome.drained else ""), err)
    if not dry_run and cfg["metrics.textfile_dir"]:
        _count(cfg, outcome)
    return outcome.code


GATE_FILE = "slurmguard_gate.prom"
_GATE_HELP = {
    "slurmguard_gate_jobs_total": "Jobs the allocation gate checked, by result (allowed, refused, store_unreadable).",
    "slurmguard_gate_refusals_total": "Nodes the allocation gate refused a job, by cause (lemon, burn-in, or the check).",
    # The same family as serve's: `sum by (cause) (slurmguard_drains_total)` counts both.
    "slurmguard_drains_total": "Nodes drained by slurmguard, by cause and by who drained (source gate: the allocation gate).",
}


def _count(cfg: Config, o: GateOutcome) -> None:
    """The gate's counters in <metrics.textfile_dir>/slurmguard_gate.prom (the controller's
    node_exporter; standard library only, as the rest of the gate)."""
    from slurmguard.contract import reason_source
    from slurmguard.metrics.textfile import bump_counters, labels

    result = "refused" if o.refused else (
        "store_unreadable" if "store unreadable" in o.message else "allowed")
    add: dict[tuple[str, str], int] = {("slurmguard_gate_jobs_total", labels(result=result)): 1}
    for node, reason in o.refused.items():
        key = ("slurmguard_gate_refusals_total", labels(cause=reason_source(reason) or "unknown"))
        add[key] = add.get(key, 0) + 1
        if node in o.drained:
            key = ("slurmguard_drains_total",
                   labels(cause=reason_source(reason) or "unknown", source="gate"))
            add[key] = add.get(key, 0) + 1
    problem = bump_counters(str(cfg["metrics.textfile_dir"]), GATE_FILE, _GATE_HELP, add)
    if problem:
        log_line(cfg, f"warning: {problem}")


def fast_argv(argv: Iterable[str]) -> int | None:
    """``[-c PATH] gate [--dry-run]`` without click (PrologSlurmctld runs once per job);
    None when the command line needs the full CLI (``--help``, other commands)."""
    args = list(argv)
    config_path = os.environ.get("SLURMGUARD_CONFIG") or None
    if args[:1] in (["-c"], ["--config"]) and len(args) >= 2:
        config_path = args[1]
        args = args[2:]
    if args == ["gate"]:
        return _safe_main(config_path, False)
    if args == ["gate", "--dry-run"]:
        return _safe_main(config_path, True)
    return None


def _safe_main(config_path: str | None, dry_run: bool) -> int:
    from slurmguard.errors import EXIT_CHECKER, SlurmguardError

    try:
        return main(config_path, dry_run=dry_run)
    except SlurmguardError as exc:
        print(f"slurmguard: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug in the gate must not block every job
        print(f"slurmguard: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CHECKER
