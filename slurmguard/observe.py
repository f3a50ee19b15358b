"""Observe mode: ``policy.mode = "observe"`` (per ``[[group]]``) runs every check and stores
every record, and changes nothing in Slurm or Kubernetes (docs/policy.md, "Observe mode").

Enforced at one choke point per world, never by the callers:

* Slurm: :meth:`slurmguard.adapters.slurm.commands.SlurmCLI._run`, through which every
  Slurm command of the package goes. :func:`state_change` says whether an argv changes
  state (``scontrol update|reboot|requeue|release|hold|create|delete``, ``sbatch``) and
  which nodes it touches; a call whose nodes observe is withheld (not run) and handed to
  the adapter's ``on_withheld`` (serve writes it to the ledger as a would-event).
* Kubernetes: :class:`slurmguard.adapters.k8s.KubeNodes`' writes (``patch_node``,
  ``patch_node_status``), with the same predicate over the Node's Slurm name.

Precedence: a group observing under ``policy.mode`` acts nowhere, whatever ``repair.mode``
says (the choke point withholds repair's reboot and returns as it withholds any other).

Standard library only (the hooks import it on every drain).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from slurmguard.frozen import Frozen
from slurmguard.lazyre import LazyPattern

MODES = ("observe", "act")
OBSERVE, ACT = MODES
# A hook record's ``applied`` for an undrain observe mode withheld: serve ledgers it.
WOULD_UNDRAIN_APPLIED = "would undrain (observe)"
# What acting changes, by scontrol's first word; sbatch (burn-in jobs) is one too.
_SCONTROL_CHANGES = frozenset({"update", "reboot", "requeue", "release", "hold", "uhold",
                               "create", "delete", "resume", "suspend", "cancel_reboot"})
_NODE_KEYS = ("nodename=", "nodes=", "excnodelist=", "reqnodelist=", "--nodelist=", "-w")
_JOB_KEYS = ("jobid=",)
_WORD = LazyPattern(r"[A-Za-z0-9_.\[\],-]+")


class Withheld(Frozen):
    """A state-changing Slurm call that observe mode did not make. Frozen; ``extra`` is
    left out of ``==`` and ``hash``."""

    __slots__ = ("verb", "nodes", "job", "argv", "reason", "extra")
    _NOT_COMPARED = frozenset({"extra"})
    verb: str  # drain, undrain, resume, reboot, requeue, release, update_job, features,
    # weight, comment, reservation, sbatch, update
    nodes: tuple[str, ...]
    job: str
    argv: tuple[str, ...]
    reason: str
    extra: dict[str, Any]

    def __init__(self, verb: str, nodes: tuple[str, ...], job: str, argv: tuple[str, ...],
                 reason: str = "", extra: dict[str, Any] | None = None) -> None:
        for k, v in (("verb", verb), ("nodes", nodes), ("job", job), ("argv", argv),
                     ("reason", reason), ("extra", {} if extra is None else extra)):
            object.__setattr__(self, k, v)


def state_change(tool: str, args: Sequence[str]) -> tuple[str, tuple[str, ...], str, str] | None:
    """(verb, node patterns, job id, reason) when ``tool args`` changes Slurm's state, else
    None (a read). Node patterns are as written (``n[1-2]``): :func:`expand_nodes` them."""
    tool = tool.rsplit("/", 1)[-1]
    if tool == "sbatch":
        nodes = _values(args, ("--nodelist=", "-w"))
        return "sbatch", nodes, "", ""
    if tool != "scontrol" or not args:
        return None
    first = args[0].lower()
    if first not in _SCONTROL_CHANGES:
        return None
    low = [a.lower() for a in args]
    reason = next((a.split("=", 1)[1] for a in args if a.lower().startswith("reason=")), "")
    job = next((a.split("=", 1)[1] for a in args if a.lower().startswith(_JOB_KEYS)), "")
    if first == "reboot":
        return "reboot", (args[-1],), "", reason
    if first in ("requeue", "release", "hold", "uhold", "suspend", "resume") and len(args) > 1 \
            and "=" not in args[1]:
        return first, (), args[1], ""
    nodes = _values(args, _NODE_KEYS)
    if first in ("create", "delete"):
        return "reservation", nodes, "", ""
    if job:
        return "update_job", nodes, job, ""
    verb = "update"
    for a in low:
        if a.startswith("state="):  # drain, undrain, resume, down, ...
            verb = a.split("=", 1)[1]
        elif a.startswith(("availablefeatures=", "activefeatures=")):
            verb = "features"
        elif a.startswith("weight="):
            verb = "weight"
        elif a.startswith("comment="):
            verb = "comment"
    return verb, nodes, "", reason


def _values(args: Sequence[str], keys: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    keys = tuple(keys)
    for i, a in enumerate(args):
        for k in keys:
            if k.endswith("=") and a.lower().startswith(k):
                out.append(a.split("=", 1)[1])
            elif not k.endswith("=") and a == k and i + 1 < len(args):
                out.append(args[i + 1])
    return tuple(v for v in out if v)


def expand_nodes(patterns: Iterable[str]) -> list[str]:
    """Node names of ``patterns`` (``n1,n[3-4]``); a plain list without brackets needs no
    NodeSet import."""
    names: list[str] = []
    for p in patterns:
        if "[" in p:
            from slurmguard.nodeset import expand

            names.extend(expand(p))
        else:
            names.extend(x for x in p.split(",") if x)
    return names


def mode_of(cfg: Any, node: str | None) -> str:
    """``policy.mode`` for ``node`` (its groups applied); the base config's for None."""
    c = cfg.for_node(node) if node else cfg
    return str(c["policy.mode"])


def observer(cfg: Any) -> Callable[[str | None], bool]:
    """node -> does it observe? (None: the base config, for a call that names no node).
    Answers are cached: a config does not change under a running process."""
    base = mode_of(cfg, None) == OBSERVE
    if not any(str(o.get("policy", {}).get("mode", "")) for _, o in cfg.groups()):
        return lambda node: base
    cache: dict[str, bool] = {}

    def observes(node: str | None) -> bool:
        if node is None:
            return base
        if node not in cache:
            cache[node] = mode_of(cfg, node) == OBSERVE
        return cache[node]

    return observes


def observing_groups(cfg: Any) -> list[str]:
    """The node patterns that observe, in words: ``["all nodes"]``, or each ``[[group]]``
    pattern whose ``policy.mode`` is observe (and "the other nodes" when the base observes
    while some group acts). Empty: everything acts."""
    base = mode_of(cfg, None) == OBSERVE
    set_in = [(p, str(o["policy"]["mode"])) for p, o in cfg.groups()
              if "mode" in o.get("policy", {})]
    observing = [p for p, m in set_in if m == OBSERVE]
    acting = [p for p, m in set_in if m == ACT]
    if base and not acting:
        return ["all nodes"]
    if base:
        return observing + ["the other nodes (not " + ", ".join(acting) + ")"]
    return observing


def mode_set_by(cfg: Any, node: str) -> str:
    """Where ``node``'s ``policy.mode`` comes from, in words: the last ``[[group]]`` holding
    it that sets the key (``[[group]] n[1-2]``), else ``[policy]`` (or its default)."""
    from slurmguard.nodeset import contains

    for pattern, overrides in reversed(cfg.groups()):
        if "mode" in overrides.get("policy", {}) and contains(pattern, node):
            return f"[[group]] {pattern}"
    return "[policy]"


def repair_overridden(cfg: Any) -> list[str]:
    """The observing node patterns (:func:`observing_groups`) where ``repair.mode = "act"``
    is set, base or group, and does not apply (policy.mode wins): empty when none."""
    acts = str(cfg["repair.mode"]) == ACT or any(
        str(o.get("repair", {}).get("mode", "")) == ACT for _, o in cfg.groups())
    return observing_groups(cfg) if acts else []
