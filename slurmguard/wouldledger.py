"""Would-events: what observe mode did not do, in the ledger once per episode.

Kinds (slurmguard/store/models.py EVENT_KINDS):

* ``would_drain``: slurmguard would have drained the node for ``source`` (the guard's
  cause) and the blast-radius guard would have allowed it. The guard counts it as it counts
  a drain (slurmguard/policy/blast.py TAKES), so the cap's effect shows in observe mode too.
* ``would_drain_refused``: ... and the guard would have refused it (details.guard says why).
* ``would_act``: any other state change withheld at the choke point (undrain, reboot,
  requeue, probation marks, reservations, Kubernetes marks): details.verb and details.argv.
* ``would_end``: the node passed its checks again; the next fault starts a new episode.

An episode of (node, kind family, source) is open from its first would-event until the
node's next ``would_end``: a second sighting in a later pass writes nothing.

Some would-acts follow a state, not a failing check, and a passing run does not end them
(acting, the change would stand whatever the checks say): the probation and risk marks
(``features``, ``weight``), the reconciler's Kubernetes marks (``k8s-cordon``,
``k8s-taint``, ``k8s-unmark``, one family) and undrains. Their episode is open while the
latest would-act of the family is the same change (same source and Slurm call), for a day at
most: once per change of what would be done, and a reminder a day while it stands. A
``would_end`` is written only when an episode it ends is open.

Standard library only; ``store`` is the store or a transaction of it (``store.nodes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

ACTOR = "slurmguard"
WOULD_DRAIN = "would_drain"
WOULD_REFUSED = "would_drain_refused"
WOULD_ACT = "would_act"
WOULD_END = "would_end"
WOULD_KINDS = (WOULD_DRAIN, WOULD_REFUSED, WOULD_ACT, WOULD_END)
_DRAINS = (WOULD_DRAIN, WOULD_REFUSED)
_LOOK_BACK = 500  # would-events of one node read to find its open episode
# would_act sources that follow a state (see the module doc): source -> its family
_FAMILIES = ({"features"}, {"weight"}, {"k8s-cordon", "k8s-taint", "k8s-unmark"}, {"undrain"})
STATEFUL = {s: frozenset(f) for f in _FAMILIES for s in f}
_STATEFUL_DAY = 86400.0
log = logging.getLogger("slurmguard.observe")


# ... and the gate's risk refusal, whose episode is its job (slurmguard/gate/risk.py)
_PASS_ENDS_NOT = frozenset(STATEFUL) | {"risk_refused"}


def _stateful(e: Any) -> bool:
    """A would-act a passing run does not end (no ``would_end`` for it alone)."""
    return e.kind == WOULD_ACT and e.source in _PASS_ENDS_NOT


def open_episode(store: Any, node: str, kind: str, source: str, *, argv: Any = None,
                 at: float | None = None) -> Any:
    """The first event of ``node``'s open episode for ``kind`` (a drain kind: either drain
    kind) and ``source``, or None when there is none; ``at``: when the sighting's run began
    (a ``would_end`` after it does not close the episode for it). A stateful would-act's
    (``argv``: its Slurm call) is the family's latest, when the same change and under a day
    old at ``at``."""
    if kind == WOULD_ACT and source in STATEFUL:
        family = STATEFUL[source]
        for e in store.nodes.events(node=node, kinds=[WOULD_ACT], limit=_LOOK_BACK):
            if e.source in family:
                fresh = at is None or at - e.at < _STATEFUL_DAY
                same = e.source == source and e.details.get("argv") == argv
                return e if same and fresh else None
        return None
    family = _DRAINS if kind in _DRAINS else (kind,)
    for e in store.nodes.events(node=node, kinds=list(WOULD_KINDS), limit=_LOOK_BACK):
        if e.kind == WOULD_END:
            if at is not None and e.at > at:
                # A pass from after this sighting's run, stored first (records arrive out of
                # order under load): it ends the episode this sighting belongs to, later.
                continue
            return None
        if e.kind in family and e.source == source:
            return e
    return None


def record_would(store: Any, node: str, kind: str, source: str, reason: str, *,
                 at: float, details: Mapping[str, Any] | None = None) -> bool:
    """Write the would-event unless its episode is open; True if written."""
    argv = (details or {}).get("argv")
    if open_episode(store, node, kind, source, argv=argv, at=at) is not None:
        return False
    store.nodes.record_event(node, kind, ACTOR, reason, source=source, at=at,
                             details=dict(details or {}))
    return True


def end_episodes(store: Any, node: str, reason: str, *, at: float,
                 passed: Collection[str] | None = None, checks: Collection[str] = ()) -> bool:
    """The node passed again: close its open would-episodes (one ``would_end``); True if
    any was open. ``passed``: the checks the passing run ran and did not fail (None: any);
    ``checks``: every check's name. A run that did not run an open episode's check, or ran it
    with an error, says nothing of that fault and ends nothing: acting, its pass would not
    clear that check's drain (the epilog, which runs no gpu-ecc, clears no ECC drain; seen
    on a fleet day, tests/scale/test_fleet_day_shadow_small.py: an epilog's pass split a
    node's one ECC fault into two episodes). Nor does a run that began before an open
    episode's first sighting (it may have read the node before the fault)."""
    evs = store.nodes.events(node=node, kinds=list(WOULD_KINDS), limit=50)
    latest = next((e for e in evs if not _stateful(e)), None)  # a pass does not end those
    if latest is None or latest.kind == WOULD_END:
        return False
    for e in evs:  # newest first: the open episodes, back to the node's last would_end
        if e.kind == WOULD_END:
            break
        if _stateful(e):
            continue
        check = e.source.split(":", 1)[0]  # "gpu-xid:79": the gpu-xid check's
        if e.at > at or (passed is not None and check in checks and check not in passed):
            return False
    store.nodes.record_event(node, WOULD_END, ACTOR, reason, source="", at=at)
    return True


def withheld_to_ledger(store: Any, w: Any, *, at: float, via: str) -> int:
    """A call the Slurm adapter withheld (:class:`slurmguard.observe.Withheld`) as
    ``would_act`` events, one per node, once per episode; returns how many were written.
    A drain is not written here: :func:`slurmguard.drainguard.guarded_drain` writes it
    with the guard's decision."""
    if w.verb == "drain":
        return 0
    details = {"verb": w.verb, "argv": list(w.argv[1:]), "via": via}
    if w.job:
        details["job"] = w.job
    return sum(record_would(store, n, WOULD_ACT, w.verb, w.reason or " ".join(w.argv[1:])[:500],
                            at=at, details=details) for n in w.nodes)


def ledger_writer(store: Any, via: str) -> Callable[[Any], None]:
    """An adapter's ``on_withheld`` that writes each withheld call to ``store``'s ledger
    (:func:`withheld_to_ledger`, ``via`` the path: burnin, reconcile, requeue, ...). A store
    fault is logged, never raised: observe mode must not fail the path it watches."""
    from slurmguard.errors import SlurmguardError

    def write(w: Any) -> None:
        try:
            withheld_to_ledger(store, w, at=time.time(), via=via)
        except SlurmguardError as exc:
            log.warning("observe: would-event of %s %s not written: %s", w.verb,
                        ",".join(w.nodes), exc.message)

    return write


def watch_withheld(slurm: Any, store: Any, via: str) -> None:
    """Point ``slurm``'s (the Slurm adapter's) withheld calls at ``store``'s ledger, when
    something observes (the adapter has a choke point) and there is a store."""
    if store is not None and getattr(slurm, "observe", None) is not None:
        slurm.on_withheld = ledger_writer(store, via)
