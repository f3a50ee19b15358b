"""The reconcile planner: two views in, a list of actions out. Pure; table-tested.

Rules (docs/reconcile.md has the full table):

- Slurm drained / down / failed (by slurmguard or an admin) -> **k8s-mark**: cordon (unless
  someone already cordoned it), taint ``slurmguard.io/unhealthy=<check>:NoSchedule``,
  annotate the Slurm reason, condition ``SlurmguardHealthy=False``.
- Node NotReady longer than the grace period, cordoned by someone else, or a configured
  problem condition True -> **slurm-drain** with ``slurmguard: k8s: <what>``.
- Both sides healthy and the mark is ours -> **k8s-unmark** (only our taint, our cordon,
  our annotations) or **slurm-undrain** (only drains whose reason starts
  ``slurmguard: k8s:``). Marks set by others are never undone.
- Origin: a Slurm drain from Kubernetes (``slurmguard: k8s:``) is never mirrored back as a
  Kubernetes mark, and our own cordon is never read as "cordoned by someone else".
- Hysteresis: a mark is not removed until ``min_hold`` seconds after it was set (the Node
  annotation ``slurmguard.io/marked-at``, Slurm's ReasonTime); NotReady must last
  ``not_ready_grace`` seconds before it drains.
- Blast radius: new marks go through the health path's guard
  (:func:`slurmguard.policy.blast.guard`, the ``[policy] blast_*`` settings): per window, at
  most ``blast_max_nodes`` nodes of the fleet and ``blast_max_percent`` % of each partition
  and configured group; nodes slurmguard marked or drained in the window count. The rest
  are refused and one alert per cause and scope names the suspect shared cause.
- Fail closed: when either side could not be read this round (``None``), nothing is planned.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmguard.contract import REASON_ANNOTATION, REASON_PREFIX

from .views import K8S_REASON_PREFIX, KubeView, SlurmView

# Action kinds. Stable strings: shown in tables, JSON and metrics.
K8S_MARK = "k8s-mark"
K8S_UPDATE = "k8s-update"
K8S_UNMARK = "k8s-unmark"
SLURM_DRAIN = "slurm-drain"
SLURM_UNDRAIN = "slurm-undrain"
NONE = "none"
HOLD = "hold"  # a change is due but hysteresis holds it back
REFUSED = "refused"  # over the blast-radius cap

CHANGES = (K8S_MARK, K8S_UPDATE, K8S_UNMARK, SLURM_DRAIN, SLURM_UNDRAIN)
NEW_MARKS = (K8S_MARK, SLURM_DRAIN)  # what the blast-radius cap counts

_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Rules:
    """The planner's knobs (the ``[reconcile]`` config section)."""

    not_ready_grace: float = 300.0
    problem_conditions: tuple[str, ...] = ("KernelDeadlock", "ReadonlyFilesystem")
    min_hold: float = 300.0
    set_condition: bool = True
    # the blast-radius guard's settings, shared with the health path ([policy] blast_*)
    blast_window: float = 3600.0
    blast_max_nodes: int = 50
    blast_max_percent: float = 10.0
    groups: tuple[tuple[str, str], ...] = ()  # (name, NodeSet pattern)


@dataclass(frozen=True)
class Action:
    """One row of the plan: what to do to one node (or why nothing)."""

    node: str  # Slurm name
    kind: str
    why: str
    k8s_name: str = ""
    slurm: str = ""  # summary of the Slurm view
    kube: str = ""  # summary of the Kubernetes view
    taint: str = ""  # taint value for k8s-mark / k8s-update
    reason: str = ""  # Slurm reason (k8s-mark annotation) or drain reason (slurm-drain)
    cordon: bool = False  # k8s-mark: we cordon (nobody else did)
    resource_version: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "k8s_name": self.k8s_name, "action": self.kind,
                "why": self.why, "slurm": self.slurm, "kubernetes": self.kube,
                **({"taint": self.taint} if self.taint else {}),
                **({"reason": self.reason} if self.reason else {})}


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    slurm_only: list[str] = field(default_factory=list)
    k8s_only: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # sides that could not be read
    alerts: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[Action]:
        return [a for a in self.actions if a.kind in CHANGES]

    def to_dict(self) -> dict[str, object]:
        return {"failed": self.failed, "alerts": self.alerts,
                "actions": [a.to_dict() for a in self.actions],
                "slurm_only": self.slurm_only, "k8s_only": self.k8s_only}


def taint_value(s: SlurmView) -> str:
    """The taint value for a bad Slurm node: our check name, or where the mark came from."""
    if s.reason.startswith(REASON_PREFIX):
        check = s.reason[len(REASON_PREFIX):].split(":", 1)[0].strip()
        value = _LABEL_VALUE.sub("-", check).strip("-_.")[:63]
        if value:
            return value
    if s.down:
        return "slurm-down"
    if "FAIL" in s.flags or s.state == "fail":
        return "slurm-fail"
    return "slurm-drain"


def k8s_problem(k: KubeView, rules: Rules, now: float) -> tuple[str, str]:
    """(``what`` for the drain reason, or "", and a pending note while within grace)."""
    what: list[str] = []
    pending = ""
    if k.ready in ("False", "Unknown"):
        since = k.ready_since
        if since is not None and now - since >= rules.not_ready_grace:
            what.append("NotReady")
        else:
            age = "?" if since is None else f"{max(0.0, now - since):.0f}s"
            pending = f"NotReady for {age} < grace {rules.not_ready_grace:g}s"
    if k.cordoned_by_others:
        what.append("cordoned")
    what += [c for c in rules.problem_conditions if k.conditions.get(c) == "True"]
    return ", ".join(what), pending


def plan_node(s: SlurmView, k: KubeView, rules: Rules, now: float) -> list[Action]:
    """The actions for one node seen on both sides (before the blast-radius cap)."""
    base = {"node": s.name, "k8s_name": k.name, "slurm": s.summary(), "kube": k.summary(),
            "resource_version": k.resource_version}
    out: list[Action] = []

    # Kubernetes side: mirror a Slurm drain/down unless it came from Kubernetes itself.
    if s.bad and not s.from_k8s:
        value = taint_value(s)
        reason = s.reason or s.state
        if not k.marked:
            out.append(Action(kind=K8S_MARK, why=f"Slurm {'down' if s.down else 'drained'}: {reason}",
                              taint=value, reason=reason, cordon=not k.unschedulable, **base))
        elif (k.our_taint != value or k.annotations.get(REASON_ANNOTATION) != reason
              or (rules.set_condition and k.our_condition != "False")):
            out.append(Action(kind=K8S_UPDATE, why="Slurm reason changed", taint=value,
                              reason=reason, cordon=False, **base))
    elif k.marked or (rules.set_condition and k.our_condition == "False"):
        held = _held(k.marked_at, rules, now)
        if held:
            out.append(Action(kind=HOLD, why=f"Slurm healthy; our k8s mark kept: {held}", **base))
        else:
            out.append(Action(kind=K8S_UNMARK, why="Slurm healthy again: remove our mark", **base))

    # Slurm side: drain for a Kubernetes problem; undrain only our own k8s drain.
    what, pending = k8s_problem(k, rules, now)
    if what:
        if s.down:
            out.append(Action(kind=NONE, why=f"k8s: {what}; Slurm node down: left alone", **base))
        elif not s.drained:
            out.append(Action(kind=SLURM_DRAIN, why=f"k8s: {what}",
                              reason=f"{K8S_REASON_PREFIX} {what}", **base))
    elif s.from_k8s and not pending:
        held = _held(s.reason_time, rules, now)
        if k.ready != "True":
            out.append(Action(kind=NONE, why="k8s Ready not known: our Slurm drain kept", **base))
        elif held:
            out.append(Action(kind=HOLD, why=f"k8s healthy; our Slurm drain kept: {held}", **base))
        else:
            out.append(Action(kind=SLURM_UNDRAIN, why="k8s healthy again: undrain our drain", **base))
    elif pending:
        out.append(Action(kind=HOLD, why=pending, **base))

    if not out:
        out.append(Action(kind=NONE, why=_quiet_why(s, k), **base))
    return out


def _held(since: float | None, rules: Rules, now: float) -> str:
    if rules.min_hold <= 0:
        return ""
    if since is None:  # age unknown (annotation removed by hand): holding forever would
        return ""      # strand the mark, and one early removal flaps at most once
    left = rules.min_hold - (now - since)
    return f"{left:.0f}s of hold {rules.min_hold:g}s left" if left > 0 else ""


def _quiet_why(s: SlurmView, k: KubeView) -> str:
    if s.bad and s.from_k8s:
        return "drained for k8s (not echoed back)"
    if s.bad:
        return "marked on both sides"
    if s.drained:
        return "drained by others: left alone"
    return "in sync"


def plan(slurm: Mapping[str, SlurmView] | None, kube: Mapping[str, KubeView] | None,
         rules: Rules, now: float, *, unmapped: list[str] | None = None) -> Plan:
    """Plan one round. ``None`` for a side means it could not be read: plan nothing."""
    p = Plan()
    if slurm is None:
        p.failed.append("slurm")
    if kube is None:
        p.failed.append("kubernetes")
    if slurm is None or kube is None:
        return p
    p.slurm_only = sorted(set(slurm) - set(kube))
    p.k8s_only = sorted(set(unmapped or []) | {kube[n].name for n in set(kube) - set(slurm)})
    both = sorted(set(slurm) & set(kube))
    rows: list[Action] = []
    for name in both:
        rows += plan_node(slurm[name], kube[name], rules, now)
    p.actions = _cap(rows, slurm, kube, rules, now, p.alerts)
    return p


def _cap(rows: list[Action], slurm: Mapping[str, SlurmView], kube: Mapping[str, KubeView],
         rules: Rules, now: float, alerts: list[str]) -> list[Action]:
    """Send new marks through the health path's blast-radius guard; refuse what it refuses."""
    from slurmguard.policy.blast import ANY_CAUSE, DrainRequest, guard, ledger, scopes
    from slurmguard.policy.params import PolicyParams

    wanted = [a for a in rows if a.kind in NEW_MARKS]
    if not wanted:
        return rows
    params = PolicyParams(blast_window=rules.blast_window, blast_max_nodes=rules.blast_max_nodes,
                          blast_max_percent=rules.blast_max_percent)
    since = now - rules.blast_window
    # Nodes slurmguard marked (Kubernetes) or drained (any slurmguard reason) in the window:
    # they count against the cap, and marking them again costs nothing more. The two views
    # name causes in different words (a taint, a check), so each counts against every cause.
    marks = [(k.marked_at or 0, n, "drain", ANY_CAUSE) for n, k in kube.items() if k.marked]
    marks += [(s.reason_time or 0, n, "drain", ANY_CAUSE) for n, s in slurm.items()
              if s.drained and s.reason.startswith(REASON_PREFIX)]
    recent = ledger([m for m in marks if m[0] > since], since)
    requests = [DrainRequest(a.node, _cause(a), a.reason) for a in wanted]
    _allowed, refusals = guard(requests, recent, scopes(slurm.values(), rules.groups, fleet=kube),
                               params)
    refused = {r.node for r in refusals if r.kind == "refuse"}
    alerts += [r.reason for r in refusals if r.kind == "alert"]
    return [a if a.kind not in NEW_MARKS or a.node not in refused else
            Action(node=a.node, kind=REFUSED, k8s_name=a.k8s_name, slurm=a.slurm, kube=a.kube,
                   why=f"blast radius: {a.kind} refused ({a.why})")
            for a in rows]


def _cause(a: Action) -> str:
    """The guard's cause: the check behind a mirrored Slurm drain, or what Kubernetes says."""
    if a.kind == SLURM_DRAIN:
        return "k8s-" + a.reason.removeprefix(K8S_REASON_PREFIX).strip().split(",")[0].strip()
    return a.taint or "slurm-drain"

