"""`burnin report` and `--apply`: judge the latest runs, then drain, return and record.

The judging is pure (:mod:`slurmguard.burnin.verdict`); this module gathers its inputs (store,
config groups, Slurm) and carries out the verdicts:

* suspects (one metric out of bounds on one run, not clearly) are not drained: their re-run
  (``burnin submit`` takes them first) confirms or clears them;
* failed or flagged nodes are drained ``slurmguard: burnin: ...`` through the one
  blast-radius guard and its ledger (slurmguard.drainguard), as every other drain (a fleet-wide drop raises one alert instead of draining
  the fleet); each judged run is also stored as a result record (hook ``burnin``) so that
  lemon counting includes burn-in failures;
* nodes awaiting burn-in (or on probation, or lemons) that pass are returned: UNDRAIN (our
  own drains only), lemon and burn-in flags cleared, probation ended;
* partial runs (cancelled, preempted, killed) never drain a node in service; a node that was
  opened for its burn-in inside slurmguard's MAINT reservation is put back as it was
  (drained, ``slurmguard: burnin: awaiting burn-in (...)``).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurmguard.burnin.stats import StatParams
from slurmguard.burnin.verdict import REASON_PREFIX, NodeVerdict, Report, judge
from slurmguard.errors import SlurmguardError

if TYPE_CHECKING:
    from slurmguard.config import Config

log = logging.getLogger("slurmguard.burnin")
ACTOR = "slurmguard"


@dataclass(frozen=True)
class Outcome:
    node: str
    action: str  # drained, refused, re-run, returned, restored, recorded, none, error,
    # would drain / would restore (observe mode)
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "action": self.action, "detail": self.detail}


def stat_params(cfg: Config) -> StatParams:
    return StatParams.from_section(cfg.section("burnin"))


def config_groups(cfg: Config, nodes: Iterable[str]) -> dict[str, str]:
    """Node -> configured group name (``[burnin.groups]``; the first matching wins)."""
    groups = cfg["burnin.groups"] or {}
    if not groups:
        return {}
    from slurmguard.nodeset import expand

    sets = [(name, set(expand(pattern, source=f"burnin.groups.{name}")))
            for name, pattern in groups.items()]
    out = {}
    for n in nodes:
        for name, ns in sets:
            if n in ns:
                out[n] = name
                break
    return out


def vanished(store: Any, slurm: Any) -> list[tuple[Any, str]]:
    """Open runs whose job Slurm no longer runs: (run, why). A Slurm failure: none."""
    from slurmguard.adapters.slurm.burnin import LIVE_STATES, job_states

    runs = store.burnin.open_runs()
    if not runs:
        return []
    states = job_states(slurm)
    out = []
    for r in runs:
        st = states.get(r.job_id or "")
        if st is None or st not in LIVE_STATES:
            out.append((r, f"job {r.job_id} ended ({(st or 'gone').lower()}) before the worker "
                           "finished: cancelled, preempted or killed"))
    return out


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector: a fleet report builds ~1,000,000 row tuples and
    judgements, none in a reference cycle, and the collector rescanning them as they pile up
    cost ~15 % of the report (docs/burnin.md, "Report at fleet scale")."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build(cfg: Config, store: Any, since: float, *, nodes: Iterable[str] | None = None,
          slurm: Any = None, mark_vanished: bool = False) -> tuple[Report, dict[str, Any]]:
    """The report over each node's latest run since ``since`` (and those runs by node).

    With ``slurm``, open runs whose job is gone count as partial (stored when
    ``mark_vanished``)."""
    with _no_cycle_collection():
        return _build(cfg, store, since, nodes=nodes, slurm=slurm, mark_vanished=mark_vanished)


def _build(cfg: Config, store: Any, since: float, *, nodes: Iterable[str] | None,
           slurm: Any, mark_vanished: bool) -> tuple[Report, dict[str, Any]]:
    gone: dict[int, str] = {}
    if slurm is not None:
        try:
            gone = {r.id: why for r, why in vanished(store, slurm)}
        except SlurmguardError as exc:
            log.warning("burn-in: cannot ask Slurm for job states: %s", exc)
        if gone and mark_vanished:
            for rid, why in gone.items():
                store.burnin.mark([rid], status="partial", reason=why)
    names = None if nodes is None else list(nodes)
    runs = store.burnin.latest_runs(since, names)
    if gone:
        runs = [r._replace(status="partial", reason=gone[r.id]) if r.id in gone else r
                for r in runs]
    params = stat_params(cfg)
    by_node = {r.node: r for r in runs}
    groups_of = config_groups(cfg, by_node)
    drain_degrading = bool(cfg["burnin.drain_degrading"])
    # numpy (the burnin extra) judges column by column, the same verdicts as the pure judge
    # (docs/burnin.md, "Report at fleet scale"): from burnin_packs (one row a node) where
    # they hold every summary row, else from burnin_series; without numpy, or on odd input,
    # the pure judge.
    from slurmguard.burnin.vector import judge_packs, judge_rows

    report = None
    packs = store.burnin.packs(names)
    if packs is not None:
        report = judge_packs(runs, packs, params, since=since, groups_of=groups_of,
                             drain_degrading=drain_degrading)
    if report is None:
        raw = store.burnin.series_raw(since, names)
        report = judge_rows(runs, raw, params, groups_of=groups_of,
                            drain_degrading=drain_degrading)
    if report is None:
        from slurmguard.store.burnin_read import series_rows

        # The trend reads each node's last trend_nights + 1 nights: parse no more of them.
        series = series_rows(raw, nights=max(1, params.trend_nights) + 1)
        report = judge(runs, series, params, groups_of=groups_of, drain_degrading=drain_degrading)
    return report, by_node


def _cause(v: NodeVerdict) -> str:
    # The guard's cause: what a shared fault would share (one metric, one failing check).
    if v.verdict == "failed":
        check = (v.why.split(":", 1)[0] or "failed").strip()
        return ("burnin-" + check.replace(" ", "-"))[:64]
    return ("burnin-" + (v.metric or "straggler"))[:64]


def apply(cfg: Config, store: Any, report: Report, runs: Mapping[str, Any], slurm: Any,
          *, now: float | None = None) -> list[Outcome]:
    """Carry out the report's verdicts (see the module doc). Returns one outcome per action."""
    from slurmguard.drainguard import StorePermit, guarded_drain
    from slurmguard.policy.blast import DrainRequest, scopes
    from slurmguard.policy.params import PolicyParams

    now = time.time() if now is None else now
    params = PolicyParams.from_section(cfg.section("policy"))
    infos = {n.name: n for n in slurm.nodes()}
    summaries = {s.name: s for s in store.nodes.summary(list(report.nodes))}
    out: list[Outcome] = []
    todo = {n: v for n, v in report.nodes.items()
            if runs[n].verdict is None and v.verdict not in ("pending",)}
    record_runs(store, todo, runs)
    requests = []
    for n, v in sorted(todo.items()):
        info = infos.get(n)
        if not v.bad:
            continue
        if info is None:
            out.append(Outcome(n, "none", "not known to Slurm"))
        elif info.down:
            out.append(Outcome(n, "none", "DOWN in Slurm: left alone"))
        elif info.drained:
            out.append(Outcome(n, "none", f"already drained: {info.reason}"))
        else:
            requests.append(DrainRequest(n, _cause(v), v.reason))
    # One permit per drain, in cause order (what the guard's batch would decide), each
    # counted in the ledger before the next is asked.
    permit = StorePermit(store, params, scopes(infos.values(), params.groups), via="burnin")
    for r in sorted(requests, key=lambda r: (r.cause, r.node)):
        done = guarded_drain(slurm, permit, r.node, r.cause, r.reason, via="burnin",
                             ledger=store, details={"run": runs[r.node].id}, now=now)
        if done.result == "drained":
            out.append(Outcome(r.node, "drained", r.reason))
        elif done.result == "refused":
            log.warning("burn-in: %s not drained: %s", r.node, done.detail)
            out.append(Outcome(r.node, "refused", done.detail))
        elif done.result == "failed":
            out.append(Outcome(r.node, "error", f"drain failed: {done.detail}"))
        elif done.result == "would":  # observe mode: the would_drain is in the ledger
            out.append(Outcome(r.node, "would drain", done.detail))
        else:
            out.append(Outcome(r.node, "none", "not drained (state changed)"))
    for n, v in sorted(todo.items()):
        s = summaries.get(n)
        info = infos.get(n)
        if v.verdict == "suspect":
            # Statistics alone, one run: not drained; `burnin submit` takes it first (after
            # the nodes awaiting burn-in) and that re-run confirms (drains) or clears it.
            out.append(Outcome(n, "re-run", f"{v.why}; queued first by burnin submit"))
        if v.verdict in ("pass", "no_verdict", "degrading") and s is not None and (
                s.burnin_required or s.lemon or s.probation):
            out.append(_return(cfg, store, slurm, n, info, s, now))
        elif v.verdict == "partial" and runs[n].reservation and s is not None and (
                s.burnin_required or s.lemon):
            out.append(_restore(store, slurm, n, info, v, now))
    for n, v in todo.items():
        if v.verdict in ("failed", "flagged", "suspect", "pass", "no_verdict", "degrading",
                         "partial"):
            store.burnin.mark([runs[n].id], verdict=v.verdict, at=now)
    out += _cleanup_reservations(store, slurm, runs)
    return out


def record_runs(store: Any, todo: Mapping[str, NodeVerdict], runs: Mapping[str, Any]) -> None:
    """One result record per judged run (exactly once: id ``burnin-<run>``), so that lemon
    counting, `nodes` and `node show` see burn-in failures like any other check."""
    from slurmguard import __version__

    recs = []
    for n, v in todo.items():
        if v.verdict not in ("failed", "flagged", "suspect", "pass", "no_verdict", "degrading"):
            continue
        r = runs[n]
        # A suspect (one metric out one night) is not a fault yet: degraded, never drained.
        health = "unhealthy" if v.bad else (
            "degraded" if v.verdict in ("degrading", "suspect") else "healthy")
        text = v.reason[len(REASON_PREFIX):] if v.reason.startswith(REASON_PREFIX) else v.why
        recs.append({"id": f"burnin-{r.id:08d}", "node": n, "hook": "burnin", "job_id": r.job_id,
                     "started": r.started or r.submitted,
                     "duration": max(0.0, (r.finished or r.submitted) - (r.started or r.submitted)),
                     "decision": {"action": "drain" if v.bad else "pass",
                                  "reason": v.reason if v.bad else ""},
                     "results": [{"name": "burnin", "health": health, "reason": text,
                                  "details": {"verdict": v.verdict, "run": r.id,
                                              "metric": v.metric}}],
                     "slurmguard_version": __version__})
    if recs:
        store.nodes.record_many(recs)


def _return(cfg: Config, store: Any, slurm: Any, node: str, info: Any, s: Any, now: float) -> Outcome:
    """A node awaiting burn-in passed: UNDRAIN (ours only), clear flags, end probation."""
    detail = []
    if info is not None and info.drained:
        if not info.ours:
            return Outcome(node, "none", f"passed, but drained by someone else: {info.reason}")
        try:
            if slurm.undrain(node):
                store.nodes.record_event(node, "clear", ACTOR, "burn-in passed", source="burnin", at=now)
                detail.append("undrained")
        except SlurmguardError as exc:
            return Outcome(node, "error", f"undrain failed: {exc.message}")
    if s.lemon:
        store.nodes.record_event(node, "lemon_cleared", ACTOR, "burn-in passed", source="burnin", at=now)
        detail.append("lemon cleared")
    if s.probation:
        if info is not None and str(cfg["policy.probation_mark"]) == "feature":
            from slurmguard.adapters.slurm import marks as slurm_marks

            try:
                slurm_marks.set_feature(slurm, info, str(cfg["policy.probation_feature"]), False)
            except SlurmguardError as exc:
                log.warning("burn-in: %s: cannot remove the probation feature: %s", node, exc)
        store.nodes.record_event(node, "probation_end", ACTOR, "burn-in passed", source="burnin", at=now)
        detail.append("probation ended")
    store.nodes.set_flags(node, lemon=False, lemon_reason=None, lemon_since=None,
                          burnin_required=False, probation=False, probation_since=None)
    return Outcome(node, "returned", ", ".join(detail) or "flags cleared")


def _restore(store: Any, slurm: Any, node: str, info: Any, v: NodeVerdict, now: float) -> Outcome:
    """A node opened for its burn-in whose run was cut short goes back to drained."""
    reason = f"{REASON_PREFIX}awaiting burn-in ({v.why})"[:200]
    if info is None or info.down or info.drained:
        return Outcome(node, "none", "partial; node already out of service")
    from slurmguard.drainguard import Unguarded, guarded_drain

    # Not a new drain: the one this node had before burn-in lifted it for the run.
    done = guarded_drain(slurm, Unguarded("burn-in restores its own drain"), node, "burnin",
                         reason, via="burnin", ledger=store, details={"restore": True}, now=now)
    if done.result == "drained":
        return Outcome(node, "restored", reason)
    if done.result == "failed":
        return Outcome(node, "error", f"drain failed: {done.detail}")
    if done.result == "would":  # observe mode: the would_drain is in the ledger
        return Outcome(node, "would restore", done.detail)
    return Outcome(node, "none", "partial; not drained (state changed)")


def _cleanup_reservations(store: Any, slurm: Any, runs: Mapping[str, Any]) -> list[Outcome]:
    """Delete slurmguard's own burn-in reservations once none of their runs is open."""
    from slurmguard.adapters.slurm.burnin import (
        RESERVATION_PREFIX,
        delete_reservation,
        reservations,
    )

    ours = {r.reservation for r in runs.values() if r.reservation.startswith(RESERVATION_PREFIX)}
    if not ours:
        return []
    still_open = {r.reservation for r in store.burnin.open_runs()}
    out = []
    try:
        existing = set(reservations(slurm))
    except SlurmguardError as exc:
        return [Outcome("-", "error", f"cannot list reservations: {exc.message}")]
    for name in sorted(ours - still_open):
        if name in existing:
            try:
                delete_reservation(slurm, name)
                out.append(Outcome("-", "reservation deleted", name))
            except SlurmguardError as exc:
                out.append(Outcome("-", "error", f"delete reservation {name}: {exc.message}"))
    return out
