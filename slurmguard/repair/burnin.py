"""Verification's second half: a quick burn-in inside the node's own repair reservation.

A node whose rung is proven and whose health checks pass again is not yet known to be fit
for a job: a GPU that came back from a reboot at a fraction of its clocks passes every health
check. With ``repair.verify_burnin`` (default on) serve's repair pass submits the nightly
burn-in's own job (``slurmguard burnin worker --level quick``, the ``[burnin]`` settings)
with ``--nodelist=NODE --reservation=sg_repair_NODE``, so it runs on that node while
production still cannot. ``repair.burnin_timeout`` bounds it: the job's ``--deadline`` is the
bound and its ``--time`` half of it, so Slurm removes a job not started in the first half and
kills one still running at the bound.

The finished run is judged as `burnin report` judges the night (:func:`slurmguard.burnin.apply
.build`): against its group's latest runs among its partitions' nodes in the last week
(``burnin report``'s default ``--since``), with the same threshold, z-limit and
corroboration. The verdict is written to the run and a ``burnin`` result record (as the nightly
report does), so the nightly report does not judge it again and lemon counting sees it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

PEERS_SINCE = 7 * 86400.0  # `burnin report --since 7d`: each peer's latest run of the week


class Judged(NamedTuple):
    verdict: str  # pending, partial, or a burn-in verdict (pass, failed, flagged, ...)
    why: str
    run: Any = None  # the BurninRunRow
    node_verdict: Any = None  # the report's NodeVerdict (to record), None when not judged


def main_config(cfg: Any) -> str | None:
    """The config file serve loaded (the job's worker loads the same), not a conf.d part."""
    return next((s for s in cfg.sources if Path(s).parent.name != "conf.d"), None)


def submit(cfg: Any, store: Any, slurm: Any, node: str, reservation: str, timeout: float,
           info: Any, now: float, since: float) -> tuple[str, int, bool]:
    """Open ``node`` inside ``reservation`` (our drain UNDRAINed, our reboot's DOWN RESUMEd:
    the reservation keeps production off it) and submit its quick burn-in; a run of ours
    already open in that reservation since ``since`` (submitted by a pass whose ledger event
    was not written) is taken instead of a second job. (job id, run id, opened).
    CommandError/ParseError when Slurm refuses."""
    from slurmguard.adapters.slurm import burnin as sb
    from slurmguard.burnin import submit as sm
    from slurmguard.store.burnin import OPEN, night_of

    for r in store.burnin.latest_runs(since, [node]):
        if r.status in OPEN and r.reservation == reservation and r.job_id:
            return r.job_id, r.id, False
    opened = bool(slurm.resume_ours(node))
    args = [a for a in sm.sbatch_args(cfg, node, reservation) if not a.startswith("--time=")]
    # Slurm removes a job that cannot *end* by its deadline: half the bound to start, half
    # to run (a job still queued at the half is removed, one still running is killed).
    args += [f"--time={max(1, math.floor(timeout / 120))}", f"--deadline=now+{int(timeout)}"]
    job = sb.sbatch(slurm, sm.script(sm.program(cfg, main_config(cfg)), "quick"), args)
    run = store.burnin.submitted(node, job_id=job, level="quick",
                                 night=night_of(now, int(cfg["burnin.night_boundary_utc"])),
                                 group_key=sm.feature_group(cfg, info), reservation=reservation,
                                 at=now)
    return job, run, opened


def judge(cfg: Any, store: Any, slurm: Any, node: str, since: float, peers: Iterable[str],
          now: float | None = None) -> Judged:
    """The verdict of ``node``'s newest burn-in run submitted since ``since``."""
    from slurmguard.burnin.apply import build, vanished
    from slurmguard.errors import SlurmguardError
    from slurmguard.store.burnin import OPEN

    now = time.time() if now is None else now
    runs = store.burnin.latest_runs(since, [node])
    if not runs:
        return Judged("partial", "its burn-in run is not in the store")
    run = runs[0]
    if run.status in OPEN:
        try:
            gone = {r.id: why for r, why in vanished(store, slurm)}
        except SlurmguardError:
            gone = {}
        if run.id in gone:
            return Judged("partial", gone[run.id], run)
        return Judged("pending", f"burn-in {run.status}", run)
    report, _ = build(cfg, store, now - PEERS_SINCE, nodes=sorted({*peers, node}))
    v = report.nodes.get(node)
    if v is None or v.run_id != run.id:
        return Judged("partial", "its run was not the node's latest", run)
    return Judged(v.verdict, v.reason or v.why, run, v)


def settle(store: Any, node: str, judged: Judged, now: float) -> None:
    """Write the judged verdict to the run and a ``burnin`` result record, as the nightly
    report does; a run whose job vanished is marked partial."""
    from slurmguard.burnin.apply import record_runs

    if judged.run is None:
        return
    if judged.node_verdict is not None:
        record_runs(store, {node: judged.node_verdict}, {node: judged.run})
        store.burnin.mark([judged.run.id], verdict=judged.verdict, at=now)
    elif judged.verdict == "partial":
        store.burnin.mark([judged.run.id], status="partial", reason=judged.why,
                          verdict="partial", at=now)
