"""The hook path: `slurmguard prolog|epilog|healthcheck|check` on a compute node.

Runs on every job start on every node, so it imports only what the enabled checks need
(no SQLAlchemy, kubernetes, paramiko, tabulate), and it ends inside ``hooks.budget`` even
when a check hangs: sources have deadlines, and a watchdog timer ends the process if anything
else overruns.

Exit codes (docs/hooks.md): 0 = the job may run (healthy, or slurmguard itself failed: a
checker fault never blocks a job nor drains a node; or a fault was found but its drain was
refused by the guard or could not be made); 1 = a node fault was found and the node is
drained (Slurm then requeues the job elsewhere with ``nohold_on_prolog_fail``). `check`
(admin use, never drains) exits 0 healthy, 1 unhealthy, 8 checker error, 3 bad config.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from slurmguard.contract import Health, one_line
from slurmguard.errors import (
    EXIT_CHECKER,
    EXIT_OK,
    EXIT_UNHEALTHY,
    SlurmguardError,
)
from slurmguard.node.decide import Action, Decision, decide

if TYPE_CHECKING:
    from slurmguard.config import Config

HOOKS = ("prolog", "epilog", "healthcheck", "check")
# Seconds kept back from the budget for the drain command and the report.
_RESERVE_FRACTION = 0.3
# Seconds of the budget left after a spool replay, for the record's log line and metrics.
_REPLAY_MARGIN = 1.0


# The call form with real types: the class form's string annotations (this module's
# ``from __future__ import annotations``) would each be compiled by typing at import.
# applied: what was done in Slurm: "drained", "undrained", "none", or an error line.
HookOutcome = NamedTuple("HookOutcome", [("exit_code", int), ("decision", Decision),  # noqa: UP014
                                         ("record", dict[str, Any] | None), ("applied", str)])


def node_identity(flag: str | None) -> str:
    """Node name in hooks: $SLURMD_NODENAME, then --node, then the short hostname."""
    # os.uname() is gethostname() without importing socket (a few ms on every job start).
    return os.environ.get("SLURMD_NODENAME") or flag or os.uname().nodename.split(".")[0]


def run_hook(hook: str, *, node_flag: str | None = None, config_path: str | None = None,
             only: tuple[str, ...] = (), as_json: bool = False, out: TextIO | None = None,
             dry_run: bool = False) -> int:
    """Run one hook end to end and return its exit code. Never raises for checker faults."""
    out = out or sys.stdout
    # A thin client (slurmguard-agent-client, docs/agent.md) that gave up on the agent hands
    # over the time it already spent, so the whole hook still ends inside hooks.budget.
    t0 = time.monotonic() - _spent_before()
    acting = hook != "check" and not dry_run
    node = node_identity(node_flag)
    try:
        from slurmguard import config as config_mod

        cfg = config_mod.load(config_path).for_node(node)
    except SlurmguardError as exc:
        # Unreadable config: slurmguard's fault, not the node's. Hooks let the job run.
        _log_line(None, hook, node, f"config error: {exc.message}")
        if not acting:
            raise
        return EXIT_OK

    budget = float(cfg["hooks.budget"])
    _arm_watchdog(max(0.1, budget - (time.monotonic() - t0)), budget, hook, node, cfg)
    job_id, job_uid = _job_from_env()
    try:
        return execute(cfg, hook, node, only=only, as_json=as_json, out=out, err=sys.stderr,
                       dry_run=dry_run, t0=t0, job_id=job_id, job_uid=job_uid)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def execute(cfg: Config, hook: str, node: str, *, only: tuple[str, ...] = (), as_json: bool = False,
            out: TextIO, err: TextIO, dry_run: bool = False, t0: float,
            job_id: str | None = None, job_uid: int | None = None,
            sources: Mapping[str, Any] | None = None,
            extra: Mapping[str, Any] | None = None) -> int:
    """One hook run (gather, evaluate, decide, act, report), printed and logged; its exit code.

    The one definition of a hook run: `slurmguard prolog` calls it in its own process; the
    resident agent (slurmguard/node/agent.py) calls it with its cached and live ``sources`` and
    sends back what was written to ``out`` and ``err``. ``extra`` goes into the record (the
    agent's source ages and boot id).
    """
    acting = hook != "check" and not dry_run
    budget = float(cfg["hooks.budget"])
    try:
        outcome = _run(cfg, hook, node, only, acting, t0, budget, job_id=job_id,
                       job_uid=job_uid, sources=sources, extra=extra)
    except SlurmguardError as exc:
        if not acting:
            raise
        _log_line(cfg, hook, node, f"checker error: {exc.message}", err)
        _write_metrics(cfg, hook, node, t0, None)
        return EXIT_OK
    except Exception as exc:  # a bug in slurmguard must not fail the job or drain the node
        if not acting:
            raise
        _log_line(cfg, hook, node, f"internal error: {type(exc).__name__}: {exc}", err)
        _write_metrics(cfg, hook, node, t0, None)
        return EXIT_OK
    if acting:
        _write_metrics(cfg, hook, node, t0, outcome)

    if as_json:
        json.dump(outcome.record, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        _print_human(out, outcome, hook, node)
    delivery = str((outcome.record or {}).get("delivery") or "")
    report_note = "" if delivery in ("", "sent", "skipped", "spooled") else f"; report {delivery}"
    _log_line(cfg, hook, node, f"{outcome.decision.action}: {outcome.decision.reason or 'ok'}; "
                               f"{outcome.applied}{report_note}", err)
    return outcome.exit_code


def _spent_before() -> float:
    """Seconds since $SLURMGUARD_HOOK_STARTED (epoch), set by the thin client; 0 if unset."""
    started = os.environ.get("SLURMGUARD_HOOK_STARTED")
    if not started:
        return 0.0
    try:
        return min(max(0.0, time.time() - float(started)), 60.0)
    except ValueError:
        return 0.0


def _run(cfg: Config, hook: str, node: str, only: tuple[str, ...], acting: bool, t0: float,
         budget: float, *, job_id: str | None = None, job_uid: int | None = None,
         sources: Mapping[str, Any] | None = None,
         extra: Mapping[str, Any] | None = None) -> HookOutcome:
    """One hook run, step by step: gather + evaluate, look at Slurm, decide, act, report."""
    available, report = _gather_and_evaluate(cfg, hook, node, only, job_id, job_uid,
                                             deadline=_checks_deadline(cfg, t0, budget),
                                             sources=sources)
    slurm = _slurm_view(cfg, hook, node, acting, report)
    report = _gres_gpus(cfg, node, report, slurm)
    decision = _decide(cfg, hook, report, available, slurm)
    applied, exit_code = _act(cfg, hook, node, decision, acting, slurm,
                              _checks_deadline(cfg, t0, budget))
    record = _report(cfg, hook, node, report, decision, applied, acting, job_id, t0, extra)
    return HookOutcome(exit_code, decision, record, applied)


class _SlurmView:
    """What the hook knows of Slurm: the adapter (None when it could not be made, and why)
    and, in healthcheck mode, the node's state."""

    __slots__ = ("cli", "own", "problem")

    def __init__(self) -> None:
        self.cli: Any = None  # slurmguard.adapters.slurm.commands.SlurmCLI, imported only when needed
        self.own: Any = None  # slurmguard.node.ownstate.OwnState | None
        self.problem = ""

    @property
    def info(self) -> Any:
        """The node's NodeInfo, or None (not asked, or nothing answered)."""
        return self.own.info if self.own is not None else None


def _job_from_env() -> tuple[str | None, int | None]:
    job_id = os.environ.get("SLURM_JOB_ID") or None
    uid = os.environ.get("SLURM_JOB_UID")
    return job_id, int(uid) if uid and uid.isdigit() else None


def _checks_deadline(cfg: Config, t0: float, budget: float) -> float:
    """When gathering must end: the budget less what the drain and the report need."""
    reserve = min(float(cfg["slurm.timeout"]), budget * _RESERVE_FRACTION)
    return t0 + max(0.1, budget - reserve)


def _gather_and_evaluate(cfg: Config, hook: str, node: str, only: tuple[str, ...],
                         job_id: str | None, job_uid: int | None, deadline: float,
                         sources: Mapping[str, Any] | None = None) -> tuple[list[Any], Any]:
    """Steps 1-2 (slurmguard.node.runner): gather the sources once, run the pure checks.
    Returns every check this node knows and the run's RunReport. ``sources`` replaces
    entries of the source table (the agent's cached and live sources)."""
    from slurmguard.node.runner import registry, run_checks, select_checks

    available, table = registry(cfg)
    if sources:
        table = {**table, **sources}
    checks = select_checks(cfg, hook, only, available)
    report = run_checks(cfg, checks, hook=hook, node=node, job_id=job_id, job_uid=job_uid,
                        deadline=deadline, sources=table)
    return available, report


def _slurm_view(cfg: Config, hook: str, node: str, acting: bool, report: Any) -> _SlurmView:
    """Ask about the node only when the answer matters: to drain (the adapter checks DOWN and
    foreign drains itself) or, in healthcheck mode, to see whether our drain can go: serve's
    view first, then what the node saw last, then Slurm (slurmguard.node.ownstate)."""
    view = _SlurmView()
    has_unhealthy = any(r.health is Health.UNHEALTHY for r in report.results)
    if not (acting and (has_unhealthy or hook == "healthcheck")):
        return view
    try:
        from slurmguard.adapters.slurm.commands import SlurmCLI

        view.cli = SlurmCLI.from_config(cfg)
    except Exception as exc:  # keep the verdict; say why Slurm was not told
        view.problem = one_line(f"{type(exc).__name__}: {exc}")
    if view.cli is not None and hook == "healthcheck":
        from slurmguard.node.ownstate import own_state

        view.own = own_state(cfg, node, view.cli)
    return view


def _gres_gpus(cfg: Config, node: str, report: Any, slurm: _SlurmView) -> Any:
    """When Slurm was asked anyway (healthcheck), the node's GPU Gres stands in for an unset
    ``checks.gpu.expected_count``: saved in gpu-count's state for the next runs (the prolog
    reads it for free) and applied to this run's gpu-count result. Returns the report."""
    info = slurm.info
    if info is None or int(cfg["checks.gpu.expected_count"]) >= 0:
        return report
    from slurmguard.adapters.slurm.gres import gpu_count

    gres = gpu_count(info.gres)
    if not gres:
        return report  # no GPU Gres (or unreadable): the count stays unchecked
    from slurmguard.node.runner import remember

    problem = remember(cfg, node, "gpu-count", {"slurm_gres_gpus": gres})
    results = list(report.results)
    for i, r in enumerate(results):
        if r.name == "gpu-count" and r.details.get("expected") is None and "count" in r.details:
            from slurmguard.checks.gpu import count_verdict

            results[i] = count_verdict(int(r.details["count"]), gres, "slurm gres",
                                       r.details.get("driver_version"))._replace(
                                           duration=r.duration)
    warnings = report.warnings + ((problem,) if problem else ())
    return report._replace(results=tuple(results), warnings=warnings)


def _decide(cfg: Config, hook: str, report: Any, available: list[Any], slurm: _SlurmView) -> Decision:
    """Step 3: the pure rule (slurmguard.node.decide) over the results and the node's state."""
    hooks_cfg = cfg.section("hooks")
    info = slurm.info
    return decide(
        report.results,
        hook=hook,
        drain_on_degraded=bool(hooks_cfg["drain_on_degraded"]),
        drain_on_error=bool(hooks_cfg["drain_on_error"]),
        node_down=bool(info and info.down),
        current_reason=info.reason if info and info.drained else None,
        node_checks=frozenset(c.name for c in available),
    )


def _act(cfg: Config, hook: str, node: str, decision: Decision, acting: bool,
         slurm: _SlurmView, deadline: float) -> tuple[str, int]:
    """Step 4: drain or undrain in Slurm. Returns (what was done, the hook's exit code).
    ``deadline`` (monotonic): the fallback's wait for its window ends by then."""
    if decision.action is Action.DRAIN:
        if not acting:
            return ("none (check only)" if hook == "check" else "none (dry run)"), EXIT_UNHEALTHY
        if slurm.cli is None:  # not drained, so exit 0 (below)
            return f"drain failed: {slurm.problem or 'no Slurm adapter'}", EXIT_OK
        # The fleet's blast-radius guard decides (serve's /permit; unreachable serve fails
        # open): when many nodes fail the same check at once the cause is shared (a
        # filesystem, a fabric) and draining them all would empty the partition.
        from slurmguard.node import ownstate

        fallback = None
        if cfg["hooks.fallback_cap"]:  # no replica answers: the cap over Slurm's own view
            from slurmguard.node.fallback import SlurmPermit

            fallback = SlurmPermit(slurm.cli, cfg, deadline=deadline)
        done = ownstate.drain_guarded(cfg, slurm.cli, node, decision.failing[0],
                                      decision.reason, via=hook, own=slurm.own,
                                      fallback=fallback)
        # Exit 1 only with our drain in place (made now, or the node already drained or
        # DOWN). Refused, or not made (Slurm unreadable, the update refused or timed out):
        # exit 0, since a non-zero exit makes Slurm drain the node itself ("Prolog error",
        # "Epilog error"), past the guard and the ledger: under a shared fault with slurmctld
        # slow, every node would. The record keeps the verdict; the gate and the next health
        # check drain through the guard.
        made = done.result in ("drained", "already")
        return one_line(done.applied), EXIT_UNHEALTHY if made else EXIT_OK
    if decision.action is Action.UNDRAIN and slurm.cli is not None:
        from slurmguard.adapters.slurm.commands import Change

        try:
            change = slurm.cli.undrain_change(node)
        except SlurmguardError as exc:
            return f"undrain failed: {exc.message}", EXIT_OK
        if change is Change.WITHHELD:  # observe mode: serve ledgers it
            from slurmguard.observe import WOULD_UNDRAIN_APPLIED

            return WOULD_UNDRAIN_APPLIED, EXIT_OK
        from slurmguard.node import ownstate

        if change is Change.MADE:
            ownstate.undrained(cfg, node, slurm.info)
            return "undrained", EXIT_OK
        ownstate.forget(cfg, node)  # the view was not Slurm's: the next run asks again
        return "not undrained (state changed)", EXIT_OK
    if decision.action is Action.CHECKER_ERROR and not acting:
        return "none", EXIT_CHECKER
    return "none", EXIT_OK


def _report(cfg: Config, hook: str, node: str, report: Any, decision: Decision, applied: str,
            acting: bool, job_id: str | None, t0: float,
            extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Step 5: the result record, delivered to serve (or spooled) when one is configured."""
    from slurmguard.node.record import make_record

    record = make_record(
        node, hook, report.results, decision.action.value, decision.reason, job_id=job_id,
        started=report.started, duration=time.monotonic() - t0,
    )
    record["applied"] = applied
    if extra:
        record.update(extra)
    if acting and (cfg["hooks.report_url"] or cfg["hooks.report_urls"]):
        from slurmguard.node.delivery import deliver

        try:
            # replay ends a margin before the budget: the log line and metrics follow it
            record["delivery"] = deliver(record, cfg, until=t0 + float(cfg["hooks.budget"])
                                         - _REPLAY_MARGIN)
        except Exception as exc:  # delivery problems never change the hook's verdict
            record["delivery"] = one_line(f"failed: {exc}")
    if report.abandoned:
        # A source thread may be stuck in the kernel; do not let interpreter shutdown wait.
        record["abandoned_sources"] = list(report.abandoned)
    return record


def _write_metrics(cfg: Config, hook: str, node: str, t0: float, o: HookOutcome | None) -> None:
    """The node_exporter textfile of this run (``metrics.textfile_dir``; off when empty).

    ``o`` None: slurmguard itself failed (verdict ``internal-error``, no check results)."""
    directory = str(cfg["metrics.textfile_dir"] or "")
    if not directory:
        return
    from slurmguard.metrics import textfile

    rec = (o.record or {}) if o is not None else {}
    results = [(r["name"], r["health"]) for r in rec.get("results", ())]
    verdict = o.decision.action.value if o is not None else "internal-error"
    check = o.decision.failing[0] if o is not None and o.decision.failing else ""
    problem = textfile.write_hook(directory, hook, results=results, verdict=verdict,
                                  reason=o.decision.reason if o is not None else "",
                                  check=check, duration=time.monotonic() - t0)
    if problem:
        _log_line(cfg, hook, node, f"warning: {problem}")


def _print_human(out: TextIO, o: HookOutcome, hook: str, node: str) -> None:
    rec = o.record or {}
    results = rec.get("results", [])
    width = max([len(r["name"]) for r in results] + [5])
    out.write(f"node {node}  hook {hook}  {rec.get('duration', 0):.2f}s\n")
    for r in results:
        out.write(f"  {r['name']:<{width}}  {r['health']:<11}  {r['reason']}\n")
    verdict = o.decision.action.value
    line = f"verdict: {verdict}"
    if o.decision.reason:
        line += f": {o.decision.reason}"
    if not o.applied.startswith("none"):
        line += f" [{o.applied}]"
    out.write(line + "\n")


def _log_line(cfg: Config, hook: str, node: str, text: str, err: TextIO | None = None) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} slurmguard {hook} node={node} {one_line(text, 400)}\n"
    if hook != "check":
        (err or sys.stderr).write(line)
    path = None
    try:
        path = cfg["hooks.log_file"] if cfg is not None else None
    except KeyError:
        path = None
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError:
            pass


def _arm_watchdog(left: float, budget: float, hook: str, node: str, cfg: Config) -> None:
    """Backstop: if anything overruns the budget, log and leave with 'job may run'."""

    def fire(signum: int, frame: Any) -> None:
        _log_line(cfg, hook, node, f"checker error: budget of {budget:g}s exceeded; exiting")
        sys.stdout.flush()
        os._exit(EXIT_OK if hook != "check" else EXIT_CHECKER)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, left + 0.5)
