"""What `slurmguard drain` and `slurmguard resume` do, over the Slurm adapter and the store.

Ownership rules (docs/triage.md, architecture.md): an admin drain carries the reason
``slurmguard: admin: <text>``; resume clears only drains whose reason starts with
``slurmguard:``, with ``state=UNDRAIN``, never a DOWN node and never another's reason, even
with ``--force``. ``--force`` only overrides slurmguard's own objections (the node still
fails, is a lemon, or awaits burn-in). Every change is an event in the store naming the
admin; the store is opened before Slurm is touched, so a change is never left unrecorded
because the store was down.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from slurmguard.errors import InputError, RefusedError

SOURCE = "admin"
MAX_REASON = 200


def admin_name(env: Mapping[str, str] | None = None) -> str:
    """Who is acting: ``$SUDO_USER`` (the human behind sudo), else the login name."""
    env = os.environ if env is None else env
    sudo = env.get("SUDO_USER", "").strip()
    if sudo and sudo != "root":
        return sudo
    try:
        return os.getlogin()
    except OSError:  # no controlling terminal (cron, ssh -T): the uid's name
        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return f"uid{os.getuid()}"


def require_admin(groups: Sequence[str], command: str) -> None:
    """Let root and members of ``groups`` (admin.groups) through; anyone else gets one line
    and exit 7 before the store or Slurm is touched. Slurm and the store keep their own
    rights: this is the door of slurmguard's commands, not the only lock."""
    if os.geteuid() == 0:
        return
    import grp

    mine: set[str] = set()
    for gid in {*os.getgroups(), os.getegid()}:
        try:
            mine.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    if mine & set(groups):
        return
    allowed = ", ".join(groups) if groups else "empty: root only"
    raise RefusedError(f"{command}: refused: {admin_name()} is neither root nor in "
                       f"admin.groups ({allowed})")


@dataclass(frozen=True)
class Outcome:
    """The result of one node's drain or resume, for the table and --json."""

    node: str
    action: str  # drain | resume
    result: str  # drained | resumed | skipped | refused
    message: str
    event_id: int | None = None

    @property
    def refused(self) -> bool:
        return self.result == "refused"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_reason(text: str) -> str:
    """An admin's reason text: one printable line, short enough for `sinfo -R`."""
    cleaned = " ".join(text.split())
    if not cleaned:
        raise InputError("--reason: must not be empty")
    if not cleaned.isprintable() or len(cleaned) > MAX_REASON:
        raise InputError(f"--reason: expected one printable line of at most {MAX_REASON} "
                         f"characters, got {text[:60]!r}")
    return cleaned


def drain_nodes(slurm: Any, store: Any, nodes: Sequence[str], text: str,
                actor: str) -> list[Outcome]:
    """Drain each node with ``slurmguard: admin: <text>`` and record who did it."""
    from slurmguard.adapters.slurm.commands import format_reason
    from slurmguard.drainguard import Unguarded, guarded_drain

    text = check_reason(text)
    reason = format_reason(SOURCE, text)
    out: list[Outcome] = []
    for node in nodes:
        info = slurm.node(node)
        if info.down:
            out.append(Outcome(node, "drain", "refused", f"node is {info.state.upper()}: not touched"))
            continue
        if info.drained and not info.ours:
            out.append(Outcome(node, "drain", "refused",
                               f"already drained by someone else: {info.reason!r}"))
            continue
        # An admin's drain is a human decision, not an unattended one: no cap, but the same
        # one path (slurmguard.drainguard), and the event below names the admin.
        done = guarded_drain(slurm, Unguarded("an admin's own drain"), node, SOURCE, reason,
                             via="admin")
        if done.error is not None:
            raise done.error
        if done.result != "drained":
            out.append(Outcome(node, "drain", "skipped", "state changed meanwhile; not drained"))
            continue
        eid = store.nodes.record_event(node, "drain", actor, text, source=SOURCE,
                                       details={"slurm_reason": reason,
                                          "previous_reason": info.reason if info.drained else ""})
        out.append(Outcome(node, "drain", "drained", reason, eid))
    return out


def resume_nodes(slurm: Any, store: Any, nodes: Sequence[str], actor: str, *,
                 force: bool = False) -> list[Outcome]:
    """UNDRAIN our own drains; refuse a node that still fails or is a lemon unless forced."""
    summaries = {s.name: s for s in store.nodes.summary(list(nodes))}
    out: list[Outcome] = []
    for node in nodes:
        info = slurm.node(node)
        if info.down:
            out.append(Outcome(node, "resume", "refused",
                               f"node is {info.state.upper()}: slurmguard never resumes DOWN nodes"))
            continue
        if not info.drained:
            out.append(Outcome(node, "resume", "skipped", "not drained"))
            continue
        if not info.ours:
            out.append(Outcome(node, "resume", "refused",
                               f"drain is not slurmguard's ({info.reason!r}); use scontrol"))
            continue
        objections = _objections(summaries.get(node))
        if objections and not force:
            out.append(Outcome(node, "resume", "refused",
                               "; ".join(objections) + " (--force to resume anyway)"))
            continue
        if not slurm.undrain(node):
            out.append(Outcome(node, "resume", "skipped", "state changed meanwhile; not resumed"))
            continue
        note = "forced: " + "; ".join(objections) if objections else "resumed"
        eid = store.nodes.record_event(node, "clear", actor, note, source=SOURCE,
                                       details={"force": force, "objections": objections,
                                          "previous_reason": info.reason})
        s = summaries.get(node)
        if s is not None and (s.lemon or s.burnin_required):
            # Returned by an admin: the lemon mark goes, probation (policy) starts.
            store.nodes.return_node(node, actor, note)
        out.append(Outcome(node, "resume", "resumed", note, eid))
    return out


def _objections(summary: Any) -> list[str]:
    """Why slurmguard would rather keep this node out (empty: nothing against it)."""
    if summary is None:
        return []
    why = []
    if summary.lemon:
        why.append(f"lemon ({summary.lemon_reason or 'repeated failures'})")
    if summary.burnin_required:
        why.append("awaiting burn-in")
    if summary.last_health == "unhealthy":
        checks = ", ".join(summary.failing_checks) or summary.last_reason or "unhealthy"
        why.append(f"still failing: {checks}")
    return why
