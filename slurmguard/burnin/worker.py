"""`slurmguard burnin worker`: the burn-in job's body, on the node (docs/burnin.md).

1. the run becomes ``running`` in the store (the one `burnin submit` recorded for this job);
2. the health checks (``burnin.checks``, default all) run: an unhealthy one is a hard
   failure and ends the run ``failed`` at once;
3. each measurement runs in its own child process with its time limit; its values are
   stored as soon as it ends (a killed job keeps what it measured);
4. the health checks run again: an Xid or ECC error raised *during* the load is caught here;
5. the run ends ``complete`` or ``failed``. SIGTERM/SIGINT (scancel, preemption, the time
   limit) end it ``partial``: never a failure, never a drain.

The worker never drains anything itself: `burnin report --apply` decides, across the group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slurmguard.burnin import measure
from slurmguard.burnin.values import BurninValue
from slurmguard.contract import Health

if TYPE_CHECKING:
    from slurmguard.config import Config

EXIT_PARTIAL = 143
# The built-in measurements whose GPU load is torch's (slurmguard/burnin/probe.py).
TORCH_LOADS = ("gpu-matmul", "gpu-membw", "gpu-clocks")


class Interrupted(BaseException):
    """SIGTERM/SIGINT arrived: the job was cancelled, preempted or ran out of time."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def node_name(flag: str | None = None) -> str:
    return os.environ.get("SLURMD_NODENAME") or flag or socket.gethostname().split(".")[0]


def health(cfg: Config, node: str, job_id: str | None) -> tuple[list[Any], str]:
    """Run the burn-in's health checks; (results, "<check>: <reason>" of the first failure)."""
    from slurmguard.node.runner import registry, run_checks, select_checks

    available, sources = registry(cfg)
    checks = select_checks(cfg, "check", tuple(cfg["burnin.checks"]), available)
    report = run_checks(cfg, checks, hook="burnin", node=node, job_id=job_id, sources=sources)
    bad = [r for r in report.results if r.health is Health.UNHEALTHY]
    return list(report.results), (f"{bad[0].name}: {bad[0].reason}" if bad else "")


def torch_missing(chosen: list[measure.Measurement]) -> str:
    """One line when a chosen GPU load cannot run because only cupy is installed, else "".

    The GPU loads are written for torch. With neither torch nor cupy the node has no GPU
    stack (a CPU node): those measurements are ``unsupported``, as documented. With cupy
    alone the site meant to measure its GPUs and would silently get nothing, so the
    worker refuses to start instead (exit 3, docs/burnin.md)."""
    from importlib.util import find_spec

    wanted = [m.name for m in chosen if m.name in TORCH_LOADS and not m.target]
    if not wanted or find_spec("torch") is not None or find_spec("cupy") is None:
        return ""
    return (f"burnin worker: {', '.join(wanted)} need torch, and this node has cupy but no "
            "torch (slurmguard's GPU loads run on torch only): install torch beside slurmguard, "
            "or leave them out of burnin.measurements")


def group_key(cfg: Config, inventory: list[BurninValue]) -> str:
    """The comparison group of this node when ``group_by = gpu``: "8x NVIDIA H100 ..."."""
    if cfg["burnin.group_by"] != "gpu":
        return ""  # feature (set by submit) or none
    inv = inventory[0] if inventory else None
    if inv is None or inv.status != "ok":
        return "cpu-only"
    count = int(inv.details.get("count", 0))
    names = list(inv.details.get("names", []))
    if count == 0:
        return "cpu-only"
    return f"{count}x {' + '.join(names) or 'GPU'}"[:128]


def run(cfg: Config, *, node: str, job_id: str | None, level: str,
        echo: Callable[[str], None] = print) -> int:
    from slurmguard.errors import ConfigError
    from slurmguard.store import Store
    from slurmguard.store.burnin import night_of

    store = Store.open(cfg)
    b = cfg.section("burnin")
    chosen = measure.select(cfg)
    refused = torch_missing(chosen)
    if refused:  # on the run too, so that `burnin report` shows why it measured nothing
        rid = store.burnin.started(node, job_id=job_id, group_key="", level=level,
                                   night=night_of(time.time(), int(b["night_boundary_utc"])))
        store.burnin.finish(rid, "partial", refused)
        raise ConfigError(refused)
    p = measure.params(cfg, level, 0)
    inv = measure.run(measure.Measurement("gpu-inventory", "GPUs seen by NVML"), p,
                      timeout=min(60.0, p["timeout"]))
    gpus = int(inv[0].details.get("count", 0)) if inv and inv[0].status == "ok" else 0
    p = measure.params(cfg, level, gpus)
    run_id = store.burnin.started(node, job_id=job_id, group_key=group_key(cfg, inv), level=level,
                                  night=night_of(time.time(), int(b["night_boundary_utc"])))
    summary: dict[str, Any] = {"node": node, "job_id": job_id, "run_id": run_id, "level": level,
                               "gpus": gpus, "values": []}

    def on_signal(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    status, reason = "complete", ""
    try:
        _, bad = health(cfg, node, job_id)
        if bad:
            status, reason = "failed", bad
        else:
            for m in chosen:
                values = measure.run(m, p)
                store.burnin.record(run_id, values)
                for v in values:
                    summary["values"].append({"measurement": v.measurement, "status": v.status,
                                              "metric": v.metric, "value": v.value,
                                              "unit": v.unit, "reason": v.reason})
                    echo(f"{m.name}: {v.status}" + (f" {v.metric} {v.value:.4g} {v.unit}"
                                                   if v.value is not None else "")
                         + (f" ({v.reason})" if v.reason else ""))
                failed = [v for v in values if v.status == "failed"]
                if failed and not reason:
                    status, reason = "failed", failed[0].reason or f"{m.name}: failed"
            _, bad = health(cfg, node, job_id)
            if bad and not reason:
                status, reason = "failed", f"{bad} (during the burn-in)"
    except Interrupted as exc:
        name = signal.Signals(exc.signum).name
        store.burnin.finish(run_id, "partial", f"{name}: cancelled, preempted or out of time")
        echo(f"burn-in of {node} cut short by {name}: recorded as partial")
        return EXIT_PARTIAL
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    store.burnin.finish(run_id, status, reason)
    summary.update(status=status, reason=reason)
    echo(json.dumps(summary, sort_keys=True, default=str))
    return 0 if status == "complete" else 1


def main_entry(cfg: Config, node_flag: str | None, level: str) -> int:
    node = node_name(node_flag)
    job = os.environ.get("SLURM_JOB_ID") or None
    return run(cfg, node=node, job_id=job, level=level,
               echo=lambda s: (sys.stdout.write(s + "\n"), sys.stdout.flush()))
