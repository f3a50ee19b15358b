"""The gate's refusal for node risk (``risk.gate_max_nodes``; docs/fleet.md, "Uses").

Reached only when a job larger than ``risk.gate_max_nodes`` was given a node whose stored
risk score is at or above ``risk.level`` (the decision: :mod:`slurmguard.fleet.uses`), so it
may open the store with SQLAlchemy and ask Slurm for its nodes, as a drain does. The node is
never drained: it stays fine for small jobs. Each refused node becomes a ``risk_refused``
event naming the job; the requeue watcher reads them and excludes those nodes from the job
(slurmguard/job/requeue.py). A slurmguard fault (store or Slurm unreachable) never refuses.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slurmguard.fleet.uses import at_risk, risk_room

if TYPE_CHECKING:
    from slurmguard.config import Config
    from slurmguard.store.api import Store

DAY = 86400.0


def settle(cfg: Config, job: str, nodes: Sequence[str], refused: Mapping[str, str], now: float,
           *, dry_run: bool = False, observed: Collection[str] = (),
           store: Store | None = None) -> str | None:
    """None: refuse the job these nodes (ledgered, unless ``dry_run``); else why it keeps
    them (the per-job bound, no room elsewhere, or a slurmguard fault). ``observed``: those
    of ``refused`` that observe (policy.mode): the job keeps them, and each gets a
    ``would_act`` (source ``risk_refused``) instead of ``risk_refused``. Its episode is the
    job: acting refuses each large job anew while the node stays at risk (a passing health
    check does not end that), so one would-event per node and job, however often the job
    is gated. ``store``: serve's own when serve answers the gate (else one for this job)."""
    from slurmguard.errors import SlurmguardError
    from slurmguard.gate.storeopen import opened

    if not job or job == "?":
        return "no job id: a refusal could not be followed to the requeue"
    try:
        with opened(cfg.section("store"), store) as st:
            try:
                return _settle(cfg, st, job, nodes, refused, now, dry_run, observed)
            except SlurmguardError as exc:
                return f"not refused (a slurmguard fault never refuses): {exc}"
    except SlurmguardError as exc:
        return f"store unavailable, not refused (a slurmguard fault never refuses): {exc}"


def _settle(cfg: Config, store: Store, job: str, nodes: Sequence[str],
            refused: Mapping[str, str], now: float, dry_run: bool,
            observed: Collection[str]) -> str | None:
    from slurmguard.adapters.slurm.commands import SlurmCLI

    prior = max(store.nodes.risk_refusals(now - DAY).get(job, {}).values(), default=0)
    infos = SlurmCLI.from_config(cfg).nodes()
    pools = room(store, infos, nodes, level=float(cfg["risk.level"]), now=now)
    why = risk_room(len(set(nodes)), pools, prior=prior)
    if why is None and not dry_run:
        for n, reason in sorted(refused.items()):
            details = {"job": job, "round": prior + 1, "job_nodes": len(set(nodes))}
            if n in observed:  # observe mode: the job runs there; the would-event, once
                _would_refuse(store, n, job, reason, now, details)
                continue
            store.nodes.record_event(n, "risk_refused", "slurmguard", reason, source="risk",
                                     at=now, details=details)
    return why


def _would_refuse(store: Any, node: str, job: str, reason: str, now: float,
                  details: Mapping[str, Any]) -> None:
    """Observe mode: the gate's risk refusal of ``job`` on ``node`` as a ``would_act``, unless
    this job's is already written (a job gated again after a requeue)."""
    from slurmguard.wouldledger import ACTOR, WOULD_ACT

    seen = store.nodes.events(node=node, kinds=[WOULD_ACT], since=now - DAY, limit=1000)
    if any(e.source == "risk_refused" and e.details.get("job") == job for e in seen):
        return
    store.nodes.record_event(node, WOULD_ACT, ACTOR, reason, source="risk_refused", at=now,
                             details={**details, "verb": "risk_refused", "via": "gate"})


def room(store: Any, infos: Iterable[Any], nodes: Sequence[str], *, level: float,
         now: float) -> dict[str, set[str]]:
    """For each partition holding every node of the allocation: its nodes that are up, not
    drained and not at risk (the nodes a refused job could still run on)."""
    by = {i.name: i for i in infos}
    if not nodes or any(n not in by for n in nodes):
        return {}
    common = set.intersection(*(set(by[n].partitions) for n in nodes))
    members = {p: [i for i in by.values() if p in i.partitions] for p in common}
    names = sorted({i.name for m in members.values() for i in m})
    scores = {r[0]: (r[1], r[2]) for r in store.nodes.columns(names, ("name", "risk_score", "risk_at"))}
    hot = at_risk(scores, level=level, now=now)
    return {p: {i.name for i in m if not (i.down or i.not_responding or i.drained)} - hot
            for p, m in members.items()}
