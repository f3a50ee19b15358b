"""`slurmguard burnin submit`: one exclusive, low-priority, preemptible job per node.

Nodes awaiting burn-in (``burnin_required``: new, repaired, lemons) go first, then suspects
(named slow by K jobs within a window: slurmguard.policy.suspect; or whose latest burn-in
was a ``suspect``, awaiting the re-run that confirms or clears it), then nodes at risk
(``risk.burnin_first``, docs/fleet.md), then nodes an admin returned with ``resume --force``
(on probation: burn-in is what ends it). An awaiting node is
usually drained by slurmguard; Slurm never starts a job on a drained node, so it is opened
inside a MAINT reservation of its own (``slurmguard_burnin_<time>``, only the submitting user
may run there) and undrained: production cannot land on it, the burn-in can. `burnin report
--apply` then drains it again (failed, flagged, or cut short) or returns it, and deletes the
reservation. Nodes drained by someone else, DOWN nodes, and (with ``--idle``) busy nodes are
skipped, each with the reason.
"""

from __future__ import annotations

import getpass
import os
import shlex
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurmguard.errors import SlurmguardError

if TYPE_CHECKING:
    from slurmguard.config import Config

# A suspect waits this long for its re-run (the report's default --since): older, its next
# run is an ordinary one.
RERUN_WINDOW = 7 * 86400.0

ACTOR = "slurmguard"


@dataclass(frozen=True)
class Submitted:
    node: str
    job_id: str | None
    run_id: int | None
    awaiting: bool
    reservation: str
    note: str
    observed: bool = False  # observe mode withheld the submission (a would_act in the ledger)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "job_id": self.job_id, "run_id": self.run_id,
                "awaiting_burnin": self.awaiting, "reservation": self.reservation,
                "note": self.note, "observed": self.observed}


def program(cfg: Config, config_path: str | None) -> list[str]:
    argv = list(cfg["burnin.program"]) or [sys.executable, "-m", "slurmguard"]
    if config_path:
        argv += ["-c", os.path.abspath(config_path)]
    return argv


def script(argv: Sequence[str], level: str) -> str:
    words = " ".join(shlex.quote(a) for a in [*argv, "burnin", "worker", "--level", level])
    return f"#!/bin/sh\n# slurmguard burn-in (docs/burnin.md)\nexec {words}\n"


def sbatch_args(cfg: Config, node: str, reservation: str) -> list[str]:
    b = cfg.section("burnin")
    args = [f"--nodelist={node}", "--nodes=1", "--exclusive", "--no-requeue", "--chdir=/",
            f"--job-name=sg-burnin-{node}", f"--time={b['time_limit']}", f"--nice={b['nice']}"]
    for key, flag in (("partition", "--partition"), ("qos", "--qos"), ("account", "--account")):
        if b[key]:
            args.append(f"{flag}={b[key]}")
    if reservation:
        args.append(f"--reservation={reservation}")
    # The store has every value; without a configured file the job's output is dropped
    # (rather than a slurm-%j.out in whatever directory submit ran from).
    args.append(f"--output={b['output'] or '/dev/null'}")
    return args


def _minutes(limit: str) -> int:
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if len(parts) == 1:
        minutes = parts[0]
    elif len(parts) == 2:
        minutes = parts[0] + parts[1] / 60
    else:
        minutes = parts[0] * 60 + parts[1] + parts[2] / 60
    return int(minutes + (int(days) * 1440 if days else 0)) + 1


def feature_group(cfg: Config, info: Any) -> str:
    if cfg["burnin.group_by"] != "feature" or info is None:
        return ""
    feats = set(getattr(info, "features", ()) or ())
    for f in cfg["burnin.group_features"]:
        if f in feats:
            return f
    return "no-feature"


def submit_order(nodes: Iterable[str], awaiting: set[str], probation: set[str],
                 at_risk: Mapping[str, float] | None = None,
                 suspects: set[str] | None = None) -> list[str]:
    """Awaiting burn-in first, then suspects (named slow by K jobs: direct evidence), then at
    risk (``risk.burnin_first``: highest score first), then returned by an admin (probation),
    then the rest; by name."""
    risk = at_risk or {}
    suspects = suspects or set()
    return sorted(nodes, key=lambda n: (n not in awaiting, n not in suspects, n not in risk,
                                        -risk.get(n, 0.0),
                                        n not in probation, n))


def rerun_due(latest: Iterable[Any]) -> set[str]:
    """The nodes whose latest burn-in run (``latest``: one per node) `report --apply` judged a
    ``suspect``: their next run is the re-run that confirms or clears it."""
    return {r.node for r in latest if r.verdict == "suspect"}


def at_risk(cfg: Any, store: Any) -> dict[str, float]:
    """Nodes at or above ``risk.level`` when ``risk.burnin_first`` is on (else none)."""
    if not cfg["risk.burnin_first"]:
        return {}
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store.fleet import node_risks

    rp = RiskParams.from_section(cfg.section("risk"))
    return {n: r.score for n, r in node_risks(store.engine, rp).items() if r.score >= rp.level}


@dataclass(frozen=True)
class Choice:
    """What `burnin submit` will do, decided before it does any of it (:func:`choose`)."""

    order: tuple[str, ...]  # every node considered, in submit order
    todo: tuple[str, ...]  # to submit, in that order
    reserve: tuple[str, ...]  # of those, the drained ones to open in a reservation of their own
    skipped: tuple[tuple[str, str], ...]  # (node, why), in that order
    notes: Mapping[str, str]  # node to submit -> why it is in the night's list


def choose(infos: Mapping[str, Any], nodes: Iterable[str] | None, *, awaiting: set[str],
           probation: set[str], suspects: set[str], rerun: set[str],
           at_risk: Mapping[str, float]) -> Choice:
    """Which nodes to submit, which to open in a reservation, which to skip and why. Pure.

    ``infos``: Slurm's nodes by name; ``nodes``: the nodes asked for (None: every idle node
    and every drained one of ours awaiting burn-in); ``suspects`` includes ``rerun`` (the
    nodes whose latest run was judged a suspect)."""
    if nodes is None:
        chosen = sorted(n for n, i in infos.items()
                        if (i.state == "idle" and not i.drained and not i.down)
                        or (n in awaiting and i.drained and i.ours and not i.down))
    else:
        chosen = list(dict.fromkeys(nodes))
    chosen = submit_order(chosen, awaiting, probation, at_risk, suspects)
    todo: list[str] = []
    reserve: list[str] = []
    skipped: list[tuple[str, str]] = []
    for n in chosen:
        info = infos.get(n)
        if info is None:
            skipped.append((n, "not known to Slurm: skipped"))
        elif info.down or info.not_responding:
            skipped.append((n, "DOWN or not responding: skipped"))
        elif info.drained and not info.ours:
            skipped.append((n, f"drained by someone else ({info.reason}): skipped"))
        elif info.drained and n not in awaiting:
            skipped.append((n, f"drained by slurmguard ({info.reason}) and not awaiting "
                               "burn-in: skipped"))
        else:
            todo.append(n)
            if info.drained:
                reserve.append(n)
    notes = {n: ("awaiting burn-in: opened in the reservation" if n in reserve
                 else "awaiting burn-in" if n in awaiting
                 else "re-run: a burn-in suspect, this run confirms or clears it" if n in rerun
                 else "suspect: named slow by several jobs" if n in suspects else "submitted")
             for n in todo}
    return Choice(tuple(chosen), tuple(todo), tuple(reserve), tuple(skipped), notes)


def submit(cfg: Config, store: Any, slurm: Any, nodes: Iterable[str] | None, *,
           level: str, reservation: str | None, config_path: str | None,
           progress: Any = None) -> list[Submitted]:
    """Carry out :func:`choose` over Slurm's nodes and the store's: open the drained ones in a
    reservation, sbatch one job per node, record each run. One :class:`Submitted` per node."""
    from slurmguard.adapters.slurm import burnin as sb
    from slurmguard.policy.suspect import from_store
    from slurmguard.store.burnin import night_of

    now = time.time()
    night = night_of(now, int(cfg["burnin.night_boundary_utc"]))
    infos = {n.name: n for n in slurm.nodes()}
    summaries = store.nodes.summary()
    awaiting = {s.name for s in summaries if s.burnin_required}
    rerun = rerun_due(store.burnin.latest_runs(now - RERUN_WINDOW))
    c = choose(infos, nodes, awaiting=awaiting, probation={s.name for s in summaries if s.probation},
               suspects=set(from_store(store, cfg, now)) | rerun, rerun=rerun,
               at_risk=at_risk(cfg, store))
    out = [Submitted(n, None, None, n in awaiting, "", why) for n, why in c.skipped]
    res_name = reservation or str(cfg["burnin.reservation"] or "")
    own_res = ""
    if c.reserve and not res_name:
        from slurmguard.nodeset import fold

        own_res = f"{sb.RESERVATION_PREFIX}_{int(now)}"
        sb.create_reservation(slurm, own_res, fold(list(c.reserve)), [getpass.getuser()],
                              _minutes(str(cfg["burnin.time_limit"])) + 60)
        for n in c.reserve:
            if slurm.undrain(n):
                store.nodes.record_event(n, "clear", ACTOR, f"opened for burn-in in reservation {own_res}",
                                         source="burnin", at=now, details={"reservation": own_res})
    text = script(program(cfg, config_path), level)
    for n in (c.todo if progress is None else progress(list(c.todo))):
        res = own_res if n in c.reserve else res_name
        try:
            job = sb.sbatch(slurm, text, sbatch_args(cfg, n, res))
        except SlurmguardError as exc:
            if exc.message == sb.NOT_SUBMITTED:  # observe mode: the would_act is in the ledger
                out.append(Submitted(n, None, None, n in awaiting, res,
                                     f"observe mode: not submitted ({c.notes[n]})", True))
            else:
                out.append(Submitted(n, None, None, n in awaiting, res,
                                     f"sbatch failed: {exc.message}"))
            continue
        rid = store.burnin.submitted(n, job_id=job, level=level, night=night,
                                     group_key=feature_group(cfg, infos.get(n)), reservation=res,
                                     at=now)
        out.append(Submitted(n, job, rid, n in awaiting, res, c.notes[n]))
    order = {n: i for i, n in enumerate(c.order)}
    return sorted(out, key=lambda s: order.get(s.node, 1 << 30))


def wait(cfg: Config, store: Any, slurm: Any, run_ids: Sequence[int], timeout: float,
         poll: float = 5.0) -> list[int]:
    """Wait until these runs are no longer open (or their jobs vanished); the ids still open."""
    from slurmguard.burnin.apply import vanished

    pending = set(run_ids)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        open_ids = {r.id for r in store.burnin.open_runs()}
        pending &= open_ids
        if pending:
            try:
                gone = {r.id for r, _ in vanished(store, slurm)}
            except SlurmguardError:
                gone = set()
            pending -= gone
        if pending:
            time.sleep(poll)
    return sorted(pending)
