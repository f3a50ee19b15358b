"""One reconcile round: read both views, plan, apply; and the ``--watch`` loop.

The only part of the reconciler with side effects, and it has them only through the two
adapters (the Slurm adapter and :mod:`slurmguard.adapters.k8s`). A side that cannot be read
yields ``None`` for its view and the planner plans nothing (fail closed). A Kubernetes write
that meets 409 re-reads the Node, re-plans that node and tries again (3 tries at most).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmguard.errors import SlurmguardError

from .metrics import Metrics
from .plan import (
    K8S_MARK,
    K8S_UNMARK,
    K8S_UPDATE,
    REFUSED,
    SLURM_DRAIN,
    SLURM_UNDRAIN,
    Action,
    Plan,
    Rules,
    plan,
    plan_node,
)
from .views import KubeView, NameMapping, SlurmView, kube_view, map_kube_names, slurm_view

K8S_KINDS = (K8S_MARK, K8S_UPDATE, K8S_UNMARK)
CONFLICT_TRIES = 3


def rules_from(section: Mapping[str, Any], policy: Mapping[str, Any] | None = None) -> Rules:
    """The planner's rules from ``[reconcile]``, and the blast-radius guard's from ``[policy]``."""
    pol = policy or {}
    d = Rules()
    return Rules(not_ready_grace=float(section["not_ready_grace"]),
                 problem_conditions=tuple(section["problem_conditions"]),
                 min_hold=float(section["min_hold"]), set_condition=bool(section["set_condition"]),
                 blast_window=float(pol.get("blast_window", d.blast_window)),
                 blast_max_nodes=int(pol.get("blast_max_nodes", d.blast_max_nodes)),
                 blast_max_percent=float(pol.get("blast_max_percent", d.blast_max_percent)),
                 groups=tuple(sorted((pol.get("groups") or {}).items())))


def mapping_from(section: Mapping[str, Any]) -> NameMapping:
    return NameMapping(mode=section["name_mapping"], label=section["name_label"],
                       pattern=section["name_pattern"])


def kube_observer(cfg: Any) -> Callable[[Mapping[str, Any]], bool] | None:
    """Observe mode for the Kubernetes adapter: Node object -> does its Slurm node observe
    (policy.mode, per group; a Node that maps to no Slurm name goes by the base config).
    None when nothing observes."""
    from slurmguard.observe import observer, observing_groups

    if not observing_groups(cfg):
        return None
    observes, mapping = observer(cfg), mapping_from(cfg.section("reconcile"))

    def node_observes(raw: Mapping[str, Any]) -> bool:
        return observes(mapping.slurm_name(kube_view(dict(raw))))

    return node_observes


@dataclass
class Outcome:
    action: Action
    ok: bool
    changed: bool = False
    error: str = ""
    withheld: bool = False  # observe mode: not made (its would-event is in the ledger)

    def to_dict(self) -> dict[str, Any]:
        return {**self.action.to_dict(), "ok": self.ok, "changed": self.changed,
                **({"error": self.error} if self.error else {}),
                **({"withheld": True} if self.withheld else {})}


@dataclass
class Round:
    plan: Plan
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # why a side could not be read

    @property
    def ok(self) -> bool:
        return not self.errors and all(o.ok for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "errors": self.errors,
                "outcomes": [o.to_dict() for o in self.outcomes]}


class Reconciler:
    """Reads both sides, plans and applies. ``slurm`` is a ``SlurmCLI``, ``kube`` a ``KubeNodes``."""

    def __init__(self, section: Mapping[str, Any], slurm: Any, kube: Any, *,
                 policy: Mapping[str, Any] | None = None, nodeset: str | None = None, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = lambda _line: None,
                 metrics: Metrics | None = None, store: Any = None) -> None:
        self.section = section
        # The ledger and the one permit for Slurm drains (slurmguard.drainguard); without a
        # store the plan's guard, counted from the two views, is the only cap.
        self.store = store
        self.policy = policy or {}
        self._scopes: dict[str, frozenset[str]] = {}
        self.slurm, self.kube = slurm, kube
        self.nodeset = nodeset or section.get("nodes") or None
        self.rules, self.mapping = rules_from(section, policy), mapping_from(section)
        self.clock, self.log = clock, log
        self.metrics = metrics or Metrics()
        self._members: Any = None
        if store is not None:  # observe mode: what either adapter withheld, to the ledger
            from slurmguard.wouldledger import watch_withheld

            watch_withheld(slurm, store, "reconcile")
            if getattr(kube, "observe", None) is not None:
                kube.on_withheld = self._kube_withheld
        if self.nodeset:
            from slurmguard.nodeset import expand

            self._members = set(expand(self.nodeset, source="reconcile.nodes"))

    def _kube_withheld(self, verb: str, raw: Mapping[str, Any], reason: str) -> None:
        """A Kubernetes write observe mode withheld: a ``would_act`` of the Node's Slurm
        node (``source`` the verb: k8s-cordon, k8s-taint, k8s-unmark), once per episode."""
        from slurmguard.wouldledger import WOULD_ACT, record_would

        k = kube_view(dict(raw))
        node = self.mapping.slurm_name(k) or k.name
        try:
            record_would(self.store, node, WOULD_ACT, verb, reason or verb, at=self.clock(),
                         details={"verb": verb, "via": "reconcile", "k8s_node": k.name,
                                  "condition": self.rules.set_condition})
        except SlurmguardError as exc:
            self.log(f"reconcile: observe: would-event of {verb} {node} not written: {exc}")

    # -- views --------------------------------------------------------------------------------

    def read_slurm(self, errors: list[str]) -> dict[str, SlurmView] | None:
        try:
            infos = self.slurm.nodes(self.nodeset)
            return {v.name: v for v in map(slurm_view, infos)}
        except SlurmguardError as exc:
            errors.append(f"slurm: {exc}")
            return None

    def read_kube(self, errors: list[str]) -> list[dict[str, Any]] | None:
        try:
            items, _rv = self.kube.list(self.section.get("label_selector") or "")
            return items
        except SlurmguardError as exc:
            errors.append(str(exc))
            return None

    def kube_views(self, objs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, KubeView], list[str]]:
        mapped, unmapped = map_kube_names((kube_view(o) for o in objs), self.mapping)
        if self._members is not None:
            mapped = {n: v for n, v in mapped.items() if n in self._members}
        return mapped, unmapped

    # -- one round ------------------------------------------------------------------------------

    def round(self, *, apply: bool, kube_objs: list[dict[str, Any]] | None = None,
              kube_failed: str = "") -> Round:
        """Read (Kubernetes from ``kube_objs`` when the watch loop has them), plan, apply."""
        errors: list[str] = []
        now = self.clock()
        if kube_failed:
            errors.append(kube_failed)
            kobjs = None
        else:
            kobjs = kube_objs if kube_objs is not None else self.read_kube(errors)
        sviews = self.read_slurm(errors)
        kviews, unmapped = self.kube_views(kobjs) if kobjs is not None else (None, [])
        p = plan(sviews, kviews, self.rules, now, unmapped=unmapped)
        if sviews is not None and kviews is not None:
            from slurmguard.policy.blast import scopes

            # The guard's scopes of both views, as the plan's cap counted them.
            self._scopes = scopes(sviews.values(), self.rules.groups, fleet=kviews)
        r = Round(plan=p, errors=errors)
        if p.failed:
            self.metrics.round("failed_closed")
            self.log(f"reconcile: round failed closed, nothing changed: {'; '.join(errors)}")
            return r
        for a in p.actions:
            if a.kind == REFUSED:
                self.metrics.action(REFUSED, "refused")
        for alert in p.alerts:
            self.log(f"reconcile: ALERT: {alert}")
        if apply:
            assert sviews is not None and kviews is not None
            for a in p.changes:
                r.outcomes.append(self._apply(a, sviews[a.node], kviews[a.node], now))
        self.metrics.round("ok" if r.ok else "errors")
        return r

    def _apply(self, a: Action, s: SlurmView, k: KubeView, now: float) -> Outcome:
        try:
            if a.kind in K8S_KINDS:
                out = self._apply_k8s(a, s, k, now)
            elif a.kind == SLURM_DRAIN:
                out = self.slurm_drain(a, now)
            elif a.kind == SLURM_UNDRAIN:
                before = len(getattr(self.slurm, "withheld", ()))
                out = Outcome(a, True, bool(self.slurm.undrain(a.node)),
                              withheld=len(getattr(self.slurm, "withheld", ())) > before)
            else:  # pragma: no cover - plan.changes holds only the kinds above
                raise AssertionError(a.kind)
        except SlurmguardError as exc:
            out = Outcome(a, False, error=str(exc))
        self.metrics.action(a.kind, ("withheld" if out.withheld else "ok") if out.ok else "failed")
        state = ("done" if out.changed else "withheld (observe mode)" if out.withheld
                 else "no change") if out.ok else f"FAILED: {out.error}"
        self.log(f"reconcile: {a.node}: {a.kind}: {state} ({a.why})")
        return out

    def slurm_drain(self, a: Action, now: float) -> Outcome:
        """A Slurm drain mirrored from Kubernetes (``a.kind == SLURM_DRAIN``), through the one
        guard and its ledger when a store is configured."""
        from slurmguard.drainguard import StorePermit, Unguarded, guarded_drain
        from slurmguard.policy.blast import scopes
        from slurmguard.policy.params import PolicyParams

        from .plan import _cause

        permit: Any = Unguarded("reconcile: capped by the plan from both views (no store)")
        if self.store is not None:
            params = PolicyParams.from_section(self.policy)
            sc = self._scopes or scopes(self.slurm.nodes(), params.groups)
            permit = StorePermit(self.store, params, sc, via="reconcile")
        done = guarded_drain(self.slurm, permit, a.node, _cause(a)[:64], a.reason,
                             via="reconcile", ledger=self.store, now=now)
        if done.result == "failed":
            return Outcome(a, False, error=done.detail)
        if done.result == "refused":
            self.log(f"reconcile: {a.node}: drain refused by the blast-radius guard: {done.detail}")
        return Outcome(a, True, done.result == "drained", withheld=done.result == "would")

    def _apply_k8s(self, a: Action, s: SlurmView, k: KubeView, now: float) -> Outcome:
        from slurmguard.adapters.k8s import KubeConflict

        cond = self.rules.set_condition
        for _ in range(CONFLICT_TRIES):
            before = len(getattr(self.kube, "withheld", ()))
            try:
                if a.kind == K8S_UNMARK:
                    self.kube.unmark(k.raw, condition=cond, now=now)
                else:
                    self.kube.mark(k.raw, taint=a.taint, reason=a.reason, cordon=a.cordon,
                                   condition=cond, now=now)
                if len(getattr(self.kube, "withheld", ())) > before:  # observe mode
                    return Outcome(a, True, False, withheld=True)
                return Outcome(a, True, True)
            except KubeConflict:
                # Someone changed the Node since we read it: read it again and re-plan.
                k = kube_view(self.kube.get(k.name))
                again = [x for x in plan_node(s, k, self.rules, now) if x.kind in K8S_KINDS]
                if not again:
                    return Outcome(a, True, False)
                a = again[0]
        return Outcome(a, False, error=f"kubernetes: node {k.name} kept changing (409 x{CONFLICT_TRIES})")
