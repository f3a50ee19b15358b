"""The hook path: `slurmguard prolog|epilog|healthcheck|check` on a compute node.

Runs on every job start on every node, so it imports only what the enabled checks need
(no SQLAlchemy, kubernetes, paramiko, tabulate), and it ends inside ``hooks.budget`` even
when a check hangs: sources have deadlines, and a watchdog timer ends the process if anything
else overruns.

Exit codes (docs/hooks.md): 0 = the job may run (healthy, or slurmguard itself failed: a
checker fault never blocks a job nor drains a node); 1 = a node fault was found and the node
drained (Slurm then requeues the job elsewhere with ``nohold_on_prolog_fail``). `check`
(admin use, never drains) exits 0 healthy, 1 unhealthy, 8 checker error, 3 bad config.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from slurmguard.decide import Action, Decision, decide
from slurmguard.errors import (
    EXIT_CHECKER,
    EXIT_OK,
    EXIT_UNHEALTHY,
    SlurmguardError,
)
from slurmguard.health import Health, one_line

HOOKS = ("prolog", "epilog", "healthcheck", "check")
# Seconds kept back from the budget for the drain command and the report.
_RESERVE_FRACTION = 0.3


@dataclass(frozen=True)
class HookOutcome:
    exit_code: int
    decision: Decision
    record: dict[str, Any] | None
    applied: str  # what was done in Slurm: "drained", "undrained", "none", or an error line


def node_identity(flag: str | None) -> str:
    """Node name in hooks: $SLURMD_NODENAME, then --node, then the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or flag or socket.gethostname().split(".")[0]


def run_hook(hook: str, *, node_flag: str | None = None, config_path: str | None = None,
             only: tuple[str, ...] = (), as_json: bool = False, out: TextIO | None = None,
             dry_run: bool = False) -> int:
    """Run one hook end to end and return its exit code. Never raises for checker faults."""
    out = out or sys.stdout
    t0 = time.monotonic()
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
    _arm_watchdog(budget, hook, node, cfg)
    try:
        outcome = _run(cfg, hook, node, only, acting, t0, budget)
    except SlurmguardError as exc:
        if not acting:
            raise
        _log_line(cfg, hook, node, f"checker error: {exc.message}")
        return EXIT_OK
    except Exception as exc:  # a bug in slurmguard must not fail the job or drain the node
        if not acting:
            raise
        _log_line(cfg, hook, node, f"internal error: {type(exc).__name__}: {exc}")
        return EXIT_OK
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)

    if as_json:
        json.dump(outcome.record, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        _print_human(out, outcome, hook, node)
    delivery = str((outcome.record or {}).get("delivery") or "")
    report_note = "" if delivery in ("", "sent", "skipped", "spooled") else f"; report {delivery}"
    _log_line(cfg, hook, node, f"{outcome.decision.action}: {outcome.decision.reason or 'ok'}; "
                               f"{outcome.applied}{report_note}")
    return outcome.exit_code


def _run(cfg: Any, hook: str, node: str, only: tuple[str, ...], acting: bool, t0: float,
         budget: float) -> HookOutcome:
    from slurmguard.runner import registry, run_checks, select_checks

    available, sources = registry(cfg)
    checks = select_checks(cfg, hook, only, available)
    reserve = min(float(cfg["slurm.timeout"]), budget * _RESERVE_FRACTION)
    deadline = t0 + max(0.1, budget - reserve)
    job_id = os.environ.get("SLURM_JOB_ID") or None
    uid = os.environ.get("SLURM_JOB_UID")
    report = run_checks(cfg, checks, hook=hook, node=node, job_id=job_id,
                        job_uid=int(uid) if uid and uid.isdigit() else None, deadline=deadline,
                        sources=sources)

    hooks_cfg = cfg.section("hooks")
    has_unhealthy = any(r.health is Health.UNHEALTHY for r in report.results)
    slurm = None
    info = None
    # Ask Slurm about the node only when the answer matters: to drain (the adapter checks
    # DOWN and foreign drains itself) or, in healthcheck mode, to see whether our drain can go.
    slurm_problem = ""
    if acting and (has_unhealthy or hook == "healthcheck"):
        try:
            from slurmguard.adapters.slurm import SlurmCLI

            slurm = SlurmCLI(cfg.section("slurm"))
        except Exception as exc:  # keep the verdict; say why Slurm was not told
            slurm_problem = one_line(f"{type(exc).__name__}: {exc}")
        if slurm is not None and hook == "healthcheck":
            try:
                info = slurm.node(node)
            except SlurmguardError:
                info = None
    decision = decide(
        report.results,
        hook=hook,
        drain_on_degraded=bool(hooks_cfg["drain_on_degraded"]),
        drain_on_error=bool(hooks_cfg["drain_on_error"]),
        node_down=bool(info and info.down),
        current_reason=info.reason if info and info.drained else None,
        node_checks=frozenset(c.name for c in available),
    )

    from slurmguard import report as report_mod

    applied = "none"
    exit_code = EXIT_OK
    refused = False
    if decision.action is Action.DRAIN and acting and hooks_cfg["report_url"]:
        # The fleet's blast-radius guard: when many nodes fail the same check at once the
        # cause is shared (a filesystem, a fabric) and draining them all would empty the
        # partition. serve answers; unreachable serve fails open (report.drain_permit).
        allowed, why = report_mod.drain_permit(node, decision.failing[0], decision.reason, cfg)
        if not allowed:
            # Exit 0: a non-zero prolog would make Slurm drain the node anyway.
            refused = True
            applied = one_line(f"not drained: {why}")
    if decision.action is Action.DRAIN and not refused:
        exit_code = EXIT_UNHEALTHY
        if not acting:
            applied = "none (check only)" if hook == "check" else "none (dry run)"
        elif slurm is None:
            applied = f"drain failed: {slurm_problem or 'no Slurm adapter'}"
        else:
            try:
                applied = "drained" if slurm.drain(node, decision.reason) else "already drained or down"
            except SlurmguardError as exc:
                applied = f"drain failed: {exc.message}"
    elif decision.action is Action.UNDRAIN and slurm is not None:
        try:
            applied = "undrained" if slurm.undrain(node) else "not undrained (state changed)"
        except SlurmguardError as exc:
            applied = f"undrain failed: {exc.message}"
    elif decision.action is Action.CHECKER_ERROR and not acting:
        exit_code = EXIT_CHECKER

    record = report_mod.make_record(
        node, hook, report.results, decision.action.value, decision.reason, job_id=job_id,
        started=report.started, duration=time.monotonic() - t0,
    )
    record["applied"] = applied
    if acting and hooks_cfg["report_url"]:
        try:
            record["delivery"] = report_mod.deliver(record, cfg)
        except Exception as exc:  # delivery problems never change the hook's verdict
            record["delivery"] = one_line(f"failed: {exc}")
    if report.abandoned:
        # A source thread may be stuck in the kernel; do not let interpreter shutdown wait.
        record["abandoned_sources"] = list(report.abandoned)
    return HookOutcome(exit_code, decision, record, applied)


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


def _log_line(cfg: Any, hook: str, node: str, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} slurmguard {hook} node={node} {one_line(text, 400)}\n"
    if hook != "check":
        sys.stderr.write(line)
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


def _arm_watchdog(budget: float, hook: str, node: str, cfg: Any) -> None:
    """Backstop: if anything overruns the budget, log and leave with 'job may run'."""

    def fire(signum: int, frame: Any) -> None:
        _log_line(cfg, hook, node, f"checker error: budget of {budget:g}s exceeded; exiting")
        sys.stdout.flush()
        os._exit(EXIT_OK if hook != "check" else EXIT_CHECKER)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, budget + 0.5)
