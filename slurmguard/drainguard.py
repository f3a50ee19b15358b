"""Every drain slurmguard makes goes through :func:`guarded_drain`: ask the guard, drain,
write what happened.

    guarded_drain(slurm, permit, node, cause, reason, via="gate", ledger=store) -> Drained

1. Slurm's view first: a node that is DOWN, FAILed or already drained (by us or anyone) is
   left alone; nothing is asked and nothing is recorded (the ledger holds no drain that did
   not happen, and a second sighting of the same fault costs no permit).
2. The permit: the one blast-radius guard (:func:`slurmguard.policy.blast.guard`) over the one
   ledger (the store's events), either in this process (:class:`StorePermit`: serve, the gate,
   the policy pass, burn-in, the reconciler) or through serve's ``POST /permit``
   (:class:`ServePermit`: the hooks and the agent on a node, which have no database driver).
   A refused drain stays undone: the permit recorded ``drain_refused`` and the fleet alert.
3. ``scontrol update state=drain``. Taken: event ``drain``. Slurm refused or timed out: event
   ``drain_failed`` with the error. (On the node path the record's ``applied`` carries this
   and serve writes the event: see serve/fleet.py ``after_ingest``.)

The only other way past the guard is :class:`Unguarded`, named at each use: an admin's own
``slurmguard drain`` (a human decision, not an unattended one), burn-in putting back a
drain it had lifted for the run, and repair keeping a ticketed node out after a reboot let
Slurm return it (slurmguard/repair/loop.py; the node's drain was already counted). tests/test_drain_paths.py fails on any ``.drain(`` call in
the package outside this module.

Standard library only at import (the hooks import it on every drain).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurmguard.errors import SlurmguardError
from slurmguard.policy.blast import (
    GIVES_BACK,
    HELD,
    TAKES,
    DrainRequest,
    guard,
    ledger,
    narrowest,
    second_look,
)
from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.types import Action

ACTOR = "slurmguard"
WOULD_APPLIED = "would drain (observe)"  # a hook record's applied: serve ledgers it
# Event kinds of the guard's ledger: a granted permit holds its slot until the drain lands
# (``drain``) or fails (``drain_failed`` gives the slot back).
LEDGER_KINDS = (*TAKES, GIVES_BACK)
_LEDGER_LIMIT = 1_000_000


class Permit(Protocol):
    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        """(allowed, why); a refusal has been recorded by the permit itself."""


@dataclass(frozen=True)
class Drained:
    node: str
    result: str  # drained, refused, already, failed, would (observe mode: not made)
    detail: str = ""
    error: SlurmguardError | None = field(default=None, compare=False)  # when failed

    @property
    def applied(self) -> str:
        """The hook record's ``applied`` text (serve turns it into the ledger's event)."""
        return {"drained": "drained", "already": "already drained or down",
                "refused": f"not drained: {self.detail}",
                "failed": f"drain failed: {self.detail}",
                "would": f"{WOULD_APPLIED}: {self.detail}"}[self.result]


def guarded_drain(slurm: Any, permit: Permit, node: str, cause: str, reason: str, *,
                  via: str, ledger: Any = None, details: Mapping[str, Any] | None = None,
                  now: float | None = None, looked: Any = None) -> Drained:
    """Drain ``node`` for ``cause`` with ``reason`` if Slurm, the guard and the ledger agree.

    ``slurm``: the Slurm adapter (``node``, ``drain``). ``ledger``: the store, or None where
    serve writes the event from the hook's record. ``looked``: the node as this caller read
    it from Slurm moments ago (a health check's own read), taken as the look; None: read it
    here. Never raises for a Slurm failure."""
    observes = getattr(slurm, "observes", None)
    if observes is not None and observes(node):  # observe mode: nothing changes in Slurm
        return _would_drain(permit, node, cause, reason, via=via, ledger=ledger, now=now)
    try:
        info = looked if looked is not None and looked.name == node else slurm.node(node)
    except SlurmguardError as exc:
        return Drained(node, "failed", f"cannot read the node: {exc.message}", exc)
    if info.down or info.drained or "FAIL" in info.flags:
        return Drained(node, "already", info.reason)
    allowed, why = permit.ask(node, cause, reason)
    if not allowed:
        return Drained(node, "refused", why)
    at = time.time() if now is None else now
    extra = {"via": via, **(details or {})}
    try:
        taken = slurm.drain(node, reason)
    except SlurmguardError as exc:
        if ledger is not None:
            ledger.nodes.record_event(node, "drain_failed", ACTOR, exc.message, source=cause, at=at,
                                details=extra)
        return Drained(node, "failed", exc.message, exc)
    if not taken:  # drained or DOWN meanwhile: someone else's change stands
        return Drained(node, "already", "state changed meanwhile")
    if ledger is not None:
        ledger.nodes.record_event(node, "drain", ACTOR, reason, source=cause, at=at, details=extra)
    return Drained(node, "drained", reason)


def _would_drain(permit: Permit, node: str, cause: str, reason: str, *, via: str,
                 ledger: Any, now: float | None) -> Drained:
    """Observe mode (slurmguard/observe.py): the drain is not made, whatever Slurm's view;
    the would-event goes to the ledger once per episode with the guard's decision (here
    when this process has the store, else serve writes it from the hook's record)."""
    if ledger is None:
        return Drained(node, "would", "observe mode")
    would = getattr(permit, "would", None)
    if would is None:
        # An Unguarded drain (burn-in restoring the drain it lifted, repair keeping a ticketed
        # node out; an admin's own drain is never withheld): no guard to ask, as when acting.
        from slurmguard.wouldledger import WOULD_DRAIN, record_would

        why = f"not asked: {getattr(permit, 'why', 'unguarded')}"
        record_would(ledger, node, WOULD_DRAIN, cause, reason,
                     at=time.time() if now is None else now,
                     details={"via": via, "guard": why})
        return Drained(node, "would", f"guard: {why}")
    _written, allowed, why = would(node, cause, reason, now=now, via=via)
    return Drained(node, "would", "guard: allowed" if allowed else f"guard: refused: {why}")


@dataclass(frozen=True)
class Unguarded:
    """No guard, on purpose (``why`` says which): an admin's explicit drain, or burn-in
    restoring a drain it lifted for the run. Everything else asks a real permit."""

    why: str

    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        return True, self.why


class ServePermit:
    """serve's ``POST /permit`` (the node side). When no replica answers in
    ``hooks.report_timeout``: ``fallback`` decides (the cap over Slurm's view), or without one
    it fails open: a faulty node must not take jobs because the controller is busy."""

    def __init__(self, cfg: Any, fallback: Permit | None = None) -> None:
        self.cfg = cfg
        self.fallback = fallback  # when no replica answers (node/fallback.py: Slurm's view)

    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        from slurmguard.adapters.serve_client import UNREACHABLE, drain_permit

        allowed, why = drain_permit(node, cause, reason, self.cfg)
        if why.startswith(UNREACHABLE) and self.fallback is not None:
            return self.fallback.ask(node, cause, reason)
        return allowed, why


def ledger_recent(store: Any, since: float) -> dict[str, set[str]]:
    """The guard's input from the ledger: node -> causes slurmguard drained it for (or
    permitted a drain) since ``since``, less the permits whose drain then failed
    (:func:`slurmguard.policy.blast.ledger` over the store's events)."""
    events = store.nodes.events(since=since, kinds=list(LEDGER_KINDS), limit=_LEDGER_LIMIT)
    return ledger(((e.at, e.node, e.kind, e.source) for e in sorted(events, key=lambda e: (e.at, e.id))
                   if e.actor_kind == ACTOR), since)


@dataclass
class Verdict:
    allowed: bool
    actions: list[Action]  # refuse and alert actions when refused
    alert: str = ""  # the alert's text (or why the drain is held)
    alert_created: bool = False
    held: bool = False  # held for a second look (policy.blast.second_look): not refused


def held_for(store: Any, req: DrainRequest, params: PolicyParams, *, via: str, now: float,
             scopes: Mapping[str, frozenset[str]] | None = None) -> tuple[str, Verdict | None]:
    """The second look (:func:`slurmguard.policy.blast.second_look`) for ``req``, over the
    store's ledger of the last ``second_look_window`` seconds: (why it waits, or "";
    the held verdict). A drain held for the first time in the window writes one
    ``drain_held`` event (what the guard did: it answered "not yet") and, with ``scopes``,
    opens (or widens) the fleet alert of the cause in the narrowest scope holding every node
    seen failing it: many nodes failing one cause at once is a suspect shared cause, which
    the incidents, the lemon rule and the gate read from that alert. Later holds of the same
    node and cause write nothing."""
    p = params
    if p.second_look_after <= 0:
        return "", None
    since = now - p.second_look_window
    mine = [e.at for e in store.nodes.events(since=since, node=req.node, kinds=[HELD])
            if e.source == req.cause]
    others = [n for n, causes in ledger_recent(store, since).items() if req.cause in causes]
    why = second_look(req.node, req.cause, via, others, min(mine) if mine else None, now, p)
    if not why:
        return "", None
    verdict = Verdict(False, [], alert=why, held=True)
    if mine:
        return why, verdict
    store.nodes.record_event(req.node, HELD, ACTOR, why, source=req.cause, at=now,
                             details={"via": via})
    if scopes is not None:
        seen = {*others, req.node}
        scope = narrowest([s for s, m in scopes.items() if seen <= m or s == "fleet"], scopes)
        a = Action("alert", source=req.cause, scope=scope, nodes=tuple(sorted(seen)), reason=(
            f"blast-radius guard: {req.cause} failing on {len(seen)} nodes of {scope} within "
            f"{human_window(p.second_look_window)}; suspect a shared cause behind {req.cause}; "
            f"holding their drains for a second look"))
        verdict.actions.append(a)
        _text, verdict.alert_created = _alert(store, a, now, p.blast_window)
    return why, verdict


def decide(store: Any, req: DrainRequest, scopes: Mapping[str, frozenset[str]],
           params: PolicyParams, *, via: str, now: float | None = None) -> Verdict:
    """The one permit: the guard over the store's ledger, and the ledger's entry for the
    answer (``permit``, or ``drain_refused`` and the fleet alert). A pure decision between a
    read and a write of the store, so it can move into one serializing transaction."""
    now = time.time() if now is None else now
    _why, held = held_for(store, req, params, via=via, now=now, scopes=scopes)
    if held is not None:
        return held
    recent = ledger_recent(store, now - params.blast_window)
    failing = {req.cause: [n for n, causes in recent.items() if req.cause in causes]}
    allowed, actions = guard([req], recent, scopes, params, failing=failing)
    if allowed:
        store.nodes.record_event(req.node, "permit", ACTOR, req.reason, source=req.cause, at=now,
                           details={"via": via})
        return Verdict(True, [])
    verdict = Verdict(False, actions)
    for a in actions:
        if a.kind == "refuse":
            store.nodes.record_event(a.node, "drain_refused", ACTOR, a.reason, source=a.source, at=now,
                               details={"scope": a.scope, "via": via})
        elif a.kind == "alert":
            verdict.alert, verdict.alert_created = _alert(store, a, now, params.blast_window)
    return verdict


def _alert(store: Any, a: Action, now: float, window: float) -> tuple[str, bool]:
    alert, created = store.nodes.open_alert(a.source, a.scope, a.nodes, a.reason, now=now, window=window)
    text = a.reason
    if alert.count != len(a.nodes):  # merged with earlier refusals: say the total
        import re

        text = re.sub(r"failing on \d+ nodes", f"failing on {alert.count} nodes", a.reason)
        store.nodes.open_alert(a.source, a.scope, (), text, now=now, window=window)
    return text, created


class StorePermit:
    """The guard in this process, over ``store``'s ledger. ``scopes``: the scopes, or a
    function returning them (serve caches Slurm's view). ``lock``: serve's, so its threads
    decide one at a time. ``on_verdict``: serve's metrics."""

    def __init__(self, store: Any, params: PolicyParams,
                 scopes: Mapping[str, frozenset[str]] | Callable[[], Mapping[str, frozenset[str]]],
                 *, via: str, lock: Any = None,
                 on_verdict: Callable[[DrainRequest, Verdict, str], None] | None = None) -> None:
        self.store, self.params, self.via = store, params, via
        self._scopes, self._lock, self._on_verdict = scopes, lock, on_verdict

    def scopes(self, node: str) -> dict[str, frozenset[str]]:
        got = dict(self._scopes() if callable(self._scopes) else self._scopes)
        fleet = got.get("fleet", frozenset())
        if node not in fleet:  # not listed by Slurm (or no answer): still counts in the fleet
            got["fleet"] = frozenset(fleet) | {node}
        return got

    def _decide(self, req: DrainRequest, scopes: Mapping[str, frozenset[str]]) -> Verdict:
        # Read the ledger and write the answer in one transaction under the database's lock
        # for this cause: exact across serve replicas and the gate's processes (the thread
        # lock only saves this process's threads from queueing on the database).
        serialized = getattr(self.store, "serialized", None)
        if serialized is None:  # a store without transactions (none in the package today)
            return decide(self.store, req, scopes, self.params, via=self.via)
        with serialized(f"permit:{req.cause}") as tx:
            return decide(tx, req, scopes, self.params, via=self.via)

    def would(self, node: str, cause: str, reason: str, *, now: float | None = None,
              via: str = "", asks_as: str = "") -> tuple[bool, bool, str]:
        """Observe mode: (written, allowed, why). The guard decides as for a drain and the
        answer is the would-event (``would_drain`` counts like a drain); an episode already
        open for (node, cause) writes nothing and answers as its first event did. A hold or
        a refusal opens (or widens) the fleet alert as when acting: the alert changes
        nothing in Slurm, and the lemon rule, the incidents, the gate and repair read it, so
        an observing fleet does not call a shared fault's nodes flapping.
        ``asks_as``: the way the drain would have asked when acting, for the second look (a
        hook's record: "permit", as its drain would have asked serve's /permit); default
        ``via``."""
        from slurmguard.wouldledger import WOULD_DRAIN, WOULD_REFUSED, open_episode

        req = DrainRequest(node, cause, reason)
        scopes = self.scopes(node)
        at = time.time() if now is None else now
        with nullcontext() if self._lock is None else self._lock:
            serialized = getattr(self.store, "serialized", None)
            with (serialized(f"permit:{cause}") if serialized else nullcontext(self.store)) as tx:
                first = open_episode(tx, node, WOULD_DRAIN, cause, at=at)
                if first is not None:
                    return False, first.kind == WOULD_DRAIN, str(first.details.get("guard", ""))
                held, _ = held_for(tx, req, self.params, via=asks_as or via or self.via,
                                   now=at, scopes=scopes)
                if held:  # as when acting: not yet (the next look writes the would-event)
                    return False, False, held
                recent = ledger_recent(tx, at - self.params.blast_window)
                failing = {cause: [n for n, causes in recent.items() if cause in causes]}
                granted, actions = guard([req], recent, scopes, self.params, failing=failing)
                allowed = bool(granted)
                why = "allowed" if allowed else "refused by the blast-radius guard"
                for a in [] if allowed else actions:  # the fleet alert, as when acting
                    if a.kind == "alert":
                        why, _ = _alert(tx, a, at, self.params.blast_window)
                tx.nodes.record_event(node, WOULD_DRAIN if allowed else WOULD_REFUSED, ACTOR,
                                      reason, source=cause, at=at,
                                      details={"via": via or self.via, "guard": why})
                return True, allowed, why

    def ask(self, node: str, cause: str, reason: str) -> tuple[bool, str]:
        req = DrainRequest(node, cause, reason)
        scopes = self.scopes(node)
        with nullcontext() if self._lock is None else self._lock:
            verdict = self._decide(req, scopes)
        if self._on_verdict is not None:
            self._on_verdict(req, verdict, self.via)
        if verdict.allowed:
            return True, "allowed"
        return False, verdict.alert or "refused by the blast-radius guard"
