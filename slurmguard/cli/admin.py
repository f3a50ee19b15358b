"""Admin commands: `nodes`, `node show`, `drain`, `resume`, `events`.

Thin over the store API (slurmguard.store), the Slurm adapter and slurmguard.triage.admin.
SQLAlchemy and tabulate are imported only when these commands run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from slurmguard.cli._common import ago, iso, load_config, open_store, parse_since, slurm_of, warn
from slurmguard.errors import EXIT_OK, EXIT_REFUSED, SlurmguardError
from slurmguard.observe import mode_set_by, observer, observing_groups
from slurmguard.output import Block, Result, Table, emit

if TYPE_CHECKING:
    from slurmguard.config import Config




def _risks(cfg: Any, store: Any, names: list[str] | None) -> dict[str, Any]:
    """Node risk scores (docs/fleet.md); none, with a warning, if they cannot be computed."""
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store.fleet import node_risks

    return node_risks(store.engine, RiskParams.from_section(cfg.section("risk")), nodes=names)


def _risk_fields(risk: Any) -> dict[str, Any]:
    if risk is None:
        return {"risk": None, "risk_factors": []}
    return {"risk": risk.score, "risk_factors": [f.line() for f in risk.factors]}


def _state(info: Any) -> str:
    if info is None:
        return "?"
    flags = sorted(f.lower() for f in info.flags)
    return "+".join([info.state, *flags])


def _alert_lines(alerts: list[Any]) -> list[str]:
    return [f"FLEET ALERT #{a.id} ({a.scope}): {a.message} [cause {a.cause}; nodes {a.nodes}; "
            f"since {iso(a.opened)}]" for a in alerts]


def _alert_dict(a: Any) -> dict[str, Any]:
    return {"id": a.id, "opened": iso(a.opened), "updated": iso(a.updated), "cause": a.cause,
            "scope": a.scope, "nodes": a.nodes, "count": a.count, "message": a.message}


# What `nodes --state` matches: Slurm's base states and flags (lower case), slurmguard's own
# flags and the stored health values.
_SLURM_FLAGS = ("blocked", "cloud", "completing", "drain", "drained", "draining", "fail",
                "failing", "invalid_reg", "maintenance", "not_responding", "planned",
                "power_down", "powered_down", "powering_down", "powering_up", "reboot_issued",
                "reboot_requested", "reserved", "resume", "undrain")
_OWN_STATES = ("lemon", "probation", "burnin", "hook-unrunnable")


def _known_states() -> frozenset[str]:
    from slurmguard.adapters.slurm.parse import BASE_STATES
    from slurmguard.contract import HEALTHS

    return frozenset(BASE_STATES) | frozenset(_SLURM_FLAGS) | frozenset(_OWN_STATES) \
        | frozenset(HEALTHS)


def _wanted_states(states: tuple[str, ...]) -> set[str]:
    """The --state words, lower case; InputError (exit 6) naming an unknown one."""
    from slurmguard.errors import InputError

    wanted = {w.strip().lower() for s in states for w in s.split(",") if w.strip()}
    unknown = sorted(wanted - _known_states())
    if unknown:
        raise InputError(f"--state: not a node state: {unknown[0]!r} (one of: "
                         f"{', '.join(sorted(_known_states()))})")
    return wanted


def _matches(states: set[str], info: Any, s: Any) -> bool:
    if not states:
        return True
    have = set()
    if info is not None:
        have |= {info.state, *(f.lower() for f in info.flags)}
        if info.drained:
            have.add("drained")
    if _unrunnable_comment(info):
        have.add("hook-unrunnable")
    if s is not None:
        have |= {k for k, v in (("lemon", s.lemon), ("probation", s.probation),
                                ("burnin", s.burnin_required)) if v}
        if s.last_health:
            have.add(s.last_health)
    return bool(states & have)


@click.command("nodes")
@click.argument("nodeset", required=False)
@click.option("--state", "states", metavar="STATE[,STATE]", multiple=True,
              help="Only nodes in one of these states: a Slurm state (idle, down, ...), a flag "
                   "(drain, drained, not_responding), lemon, probation, burnin, "
                   "hook-unrunnable, or a health "
                   "(unhealthy, degraded). Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def nodes_cmd(ctx: click.Context, nodeset: str | None, states: tuple[str, ...], as_json: bool) -> None:
    """List nodes: Slurm state, last check, failing checks, failures in 7 days, risk score
    (docs/fleet.md), repair state (docs/repair.md; episodes of the last 30 days), flags.

    Open fleet alerts (a shared cause that stopped draining) are shown above the table. If
    Slurm cannot be asked, the store's view is shown with a warning.

    \b
    Example:
      slurmguard nodes
      slurmguard nodes 'gpu[001-064]' --state drained --state lemon
      slurmguard nodes --json | jq '.nodes[] | select(.lemon)'
    """
    from slurmguard.nodeset import expand

    names = expand(nodeset) if nodeset else None
    wanted = _wanted_states(states)
    cfg = load_config(ctx)
    store = open_store(cfg)
    infos: dict[str, Any] = {}
    try:
        slurm_nodes = slurm_of(cfg).nodes(nodeset)
        infos = {i.name: i for i in slurm_nodes}
    except SlurmguardError as exc:
        warn(f"warning: Slurm state unavailable ({exc.message}); showing the store only")
    summaries = {s.name: s for s in store.nodes.summary(names)}
    all_names = names or sorted(set(infos) | set(summaries))
    alerts = store.nodes.alerts(open_only=True)
    risks = _risks(cfg, store, names)
    repairs = _repairs_of(store, names)
    rows = []
    for name in all_names:
        info, s = infos.get(name), summaries.get(name)
        if not _matches(wanted, info, s):
            continue
        rows.append({**_node_dict(name, info, s), **_risk_fields(risks.get(name)),
                     "repair": repairs.get(name)})
    marker = _hook_unrunnable(cfg)
    watching = observing_groups(cfg)
    observes = observer(cfg)
    for r in rows:
        r["mode"] = "observe" if observes(r["name"]) else "act"
    data = {"alerts": [_alert_dict(a) for a in alerts], "this_host_marker": marker,
            "observing": watching,
            "nodes": [{k: v for k, v in r.items() if k != "_last_seen"} for r in rows]}
    head = _alert_lines(alerts) + ([_marker_line(marker)] if marker else [])
    if watching:
        head.append(f"observe mode (policy.mode), nothing changed in Slurm: {'; '.join(watching)}")
    emit(Result(data, [*head, *([""] if head else []), Table(
        [[r["name"], r["state"], _cut(r["reason"], 40), ago(r["_last_seen"]),
          r["last_health"] or "-", ",".join(r["failing_checks"]) or "-",
          r["failures_7d"], "-" if r["risk"] is None else f"{r['risk']:g}",
          _repair_cell(r["repair"]), ",".join(r["flags"]) or "-"] for r in rows],
        ["node", "state", "reason", "last check", "health", "failing", "fail/7d", "risk",
         "repair", "flags"])]),
         as_json)


def _unrunnable_comment(info: Any) -> str:
    """The Comment an entry script sets when it could not run slurmguard, or ''."""
    from slurmguard.install.doctor import COMMENT_PREFIX

    comment = str((info.raw.get("Comment") if info is not None else "") or "")
    return comment if comment.startswith(COMMENT_PREFIX) else ""


def _node_dict(name: str, info: Any, s: Any) -> dict[str, Any]:
    flags = []
    unrunnable = _unrunnable_comment(info)
    if unrunnable:
        flags.append("hook-unrunnable")
    if s is not None:
        if s.lemon:
            flags.append("lemon")
        if s.burnin_required:
            flags.append("burnin")
        if s.probation:
            flags.append(f"probation({s.probation_passes})")
    return {
        "name": name, "state": _state(info),
        "reason": (info.reason or "") if info is not None else "",
        "reason_user": getattr(info, "reason_user", None) if info is not None else None,
        "last_check": iso(s.last_seen) if s else None, "_last_seen": s.last_seen if s else None,
        "last_hook": s.last_hook if s else None, "last_health": s.last_health if s else None,
        "failing_checks": list(s.failing_checks) if s else [],
        "failures_7d": s.failures if s else 0, "lemon": bool(s and s.lemon),
        "lemon_reason": s.lemon_reason if s else None,
        "burnin_required": bool(s and s.burnin_required), "probation": bool(s and s.probation),
        "probation_passes": s.probation_passes if s else 0, "flags": flags,
        "in_slurm": info is not None, "hook_unrunnable": unrunnable or None,
    }


def _hook_unrunnable(cfg: Config) -> dict[str, Any] | None:
    """This host's hook-unrunnable marker (docs/install.md "Loud fail-open"), or None.

    The marker is written by an entry script that could not run slurmguard, on the host where
    it ran; the fleet-wide view is the textfile metric slurmguard_hook_unrunnable_total."""
    import os
    import socket

    from slurmguard.install.doctor import MARKER, read_marker

    path = os.path.join(str(cfg["hooks.state_dir"]), MARKER)
    lines = read_marker(path)
    if not lines:
        return None
    return {"host": socket.gethostname(), "path": path, "count": len(lines), "last": lines[-1]}


def _marker_line(m: dict[str, Any]) -> str:
    return (f"HOOK UNRUNNABLE on this host ({m['host']}): {m['count']} entry-script run(s) could "
            f"not run slurmguard, jobs ran unchecked; last: {m['last']} ({m['path']}; "
            "run `slurmguard doctor`)")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


@click.group("node")
def node_cmd() -> None:
    """Look at one node.

    \b
    Example:
      slurmguard node show gpu017
    """


@node_cmd.command("show")
@click.argument("node")
@click.option("--since", metavar="WHEN", help="Only history since then: 1h, 7d or an ISO time.")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True,
              help="Timeline entries at most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def node_show_cmd(ctx: click.Context, node: str, since: str | None, limit: int, as_json: bool) -> None:
    """Show one node: Slurm state, flags, risk score with its factors, and a timeline of its
    results and events.

    \b
    Example:
      slurmguard node show gpu017
      slurmguard node show gpu017 --since 24h --json
    """
    from slurmguard.errors import InputError
    from slurmguard.nodeset import validate_node_name

    validate_node_name(node)
    cfg = load_config(ctx)
    store = open_store(cfg)
    info, slurm_says = None, ""
    try:
        info = slurm_of(cfg).node_record(node)  # the Comment too (an unrunnable hook)
    except SlurmguardError as exc:
        slurm_says = exc.message
    summary = next(iter(store.nodes.summary([node])), None)
    items = store.nodes.history(node, since=parse_since(since) if since else None, limit=limit)
    if info is None and summary is None and not items:
        # Nothing to show is a wrong name, not a node fault (exit 1 means a fault).
        raise InputError(f"node: {node!r} is known neither to Slurm ({slurm_says}) nor to "
                         "the store")
    if slurm_says:
        warn(f"warning: Slurm state unavailable ({slurm_says})")
    data = {**_node_dict(node, info, summary), **_risk_fields(_risks(cfg, store, [node]).get(node))}
    data.pop("_last_seen")
    data["repair"] = _repair_of(store, node)
    data["mode"] = "observe" if observer(cfg)(node) else "act"
    data["mode_set_by"] = mode_set_by(cfg, node)
    timeline = [{"at": iso(i.at), "kind": i.kind, "health": i.health, "actor": i.actor,
                 "source": i.source, "reason": i.reason, "checks": list(i.checks)} for i in items]
    marker = _hook_unrunnable(cfg)
    emit(Result({"node": data, "timeline": timeline, "this_host_marker": marker},
                _show_text(node, data, timeline, marker)), as_json)


# `nodes` shows repair episodes that moved in this window (an older one is history:
# `repair history NODE`).
_REPAIR_LISTED = 30 * 86400.0


def _repairs_of(store: Any, names: list[str] | None) -> dict[str, dict[str, Any]]:
    """Every node's newest repair episode of the last 30 days, from one ledger query."""
    from slurmguard.repair.plan import REPAIR_KINDS

    by_node: dict[str, list[Any]] = {}
    wanted = set(names) if names is not None else None
    for e in store.nodes.events(since=time.time() - _REPAIR_LISTED, kinds=list(REPAIR_KINDS),
                                limit=200_000):
        if wanted is None or e.node in wanted:
            by_node.setdefault(e.node, []).append(e)
    out = {}
    for node, rows in by_node.items():
        got = _latest_repair(rows)
        if got is not None:
            out[node] = got
    return out


def _repair_cell(r: dict[str, Any] | None) -> str:
    """The `repair` column: the episode's state, and its rung while one is under way."""
    if not r:
        return "-"
    if r["state"] in ("proving", "verifying", "burn-in", "in repair") and r["rung"]:
        return f"{r['state']} ({r['rung']} #{r['attempt']})"
    return str(r["state"])


def _repair_of(store: Any, node: str) -> dict[str, Any] | None:
    """The node's newest repair episode from the ledger (docs/repair.md), or None."""
    from slurmguard.repair.plan import REPAIR_KINDS

    return _latest_repair(store.nodes.events(node=node, kinds=list(REPAIR_KINDS), limit=200))


def _latest_repair(rows: list[Any]) -> dict[str, Any] | None:
    """The ledger reader's newest episode of one node's rows, in a few fields for output."""
    from slurmguard.repair.ledger import latest

    r = latest(rows)
    if r is None:
        return None
    st = r.state
    return {"episode": r.episode, "cause": r.cause, "state": st.state,
            "rung": str(st.open_rung or (st.taken[-1] if st.taken else "")),
            "attempt": len(st.taken), "since": iso(r.last_at)}


def _show_text(node: str, data: dict[str, Any], timeline: list[dict[str, Any]],
               marker: dict[str, Any] | None) -> list[Block]:
    out: list[Block] = [_marker_line(marker)] if marker else []
    out += [f"node:        {node}",
            f"slurm state: {data['state']}" + (f"  reason: {data['reason']}" if data["reason"] else ""),
            f"last check:  {data['last_check'] or '-'} {data['last_health'] or ''}".rstrip(),
            f"failing:     {', '.join(data['failing_checks']) or '-'}",
            f"fail/7d:     {data['failures_7d']}   flags: {', '.join(data['flags']) or '-'}",
            f"mode:        {data['mode']}  (policy.mode of {data['mode_set_by']}" +
            ("; checks run, nothing changes in Slurm)" if data["mode"] == "observe" else ")")]
    if data["lemon_reason"]:
        out.append(f"lemon:       {data['lemon_reason']}")
    if data["repair"]:
        r = data["repair"]
        out.append(f"repair:      {r['state']} {r['cause']}" + (
            f", {r['rung']} (attempt {r['attempt']})" if r["rung"] else "") + f" since {r['since']}")
    if data["risk"] is not None:
        out.append(f"risk:        {data['risk']:g}/100" + (
            f" = {'; '.join(data['risk_factors'])}" if data["risk_factors"] else ""))
    if data["hook_unrunnable"]:
        out.append(f"HOOK UNRUNNABLE: {data['hook_unrunnable']} (jobs ran unchecked; on the node: "
                   "slurmguard doctor, then doctor --ack)")
    return out + ["", Table(
        [[t["at"], t["kind"], t["health"] or "-", t["actor"] or "-", t["source"] or "-",
          _cut(t["reason"] + (f" [{', '.join(t['checks'])}]" if t["checks"] else ""), 70)]
         for t in timeline], ["time", "kind", "health", "actor", "source", "reason"])]


@click.command("drain")
@click.argument("nodeset")
@click.option("--reason", required=True, metavar="TEXT", help="Why (one line); stored with your name.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome per node as JSON.")
@click.pass_context
def drain_cmd(ctx: click.Context, nodeset: str, reason: str, as_json: bool) -> int:
    """Drain nodes with the reason `slurmguard: admin: TEXT` and record who did it.

    The actor recorded in the event ledger is $SUDO_USER, else your login name. DOWN nodes and
    nodes already drained by someone else are left alone (exit 7). Only root and members of
    admin.groups may drain; anyone else is refused in one line (exit 7), nothing changed.

    \b
    Example:
      sudo slurmguard drain 'gpu[017,023]' --reason "fans replaced, needs burn-in"
    """
    from slurmguard.nodeset import expand
    from slurmguard.triage.admin import admin_name, check_reason, drain_nodes, require_admin

    nodes = expand(nodeset)
    check_reason(reason)
    cfg = load_config(ctx)
    require_admin(cfg["admin.groups"], "drain")
    store = open_store(cfg)  # before Slurm: a change must never go unrecorded
    outcomes = drain_nodes(slurm_of(cfg, person=True), store, nodes, reason, f"admin:{admin_name()}")
    return _report(outcomes, as_json)


@click.command("resume")
@click.argument("nodeset")
@click.option("--force", is_flag=True,
              help="Resume even if the node still fails, is a lemon or awaits burn-in.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome per node as JSON.")
@click.pass_context
def resume_cmd(ctx: click.Context, nodeset: str, force: bool, as_json: bool) -> int:
    """Return drained nodes to service (UNDRAIN), only where the drain is slurmguard's.

    Refused (exit 7) while a node's last result is unhealthy, it is a lemon or awaits
    burn-in, unless --force; a forced resume clears the lemon mark and starts probation. Never
    touches DOWN nodes or drains set by others, even with --force. The admin ($SUDO_USER or
    login name) is recorded in the event. Only root and members of admin.groups may resume
    (else exit 7, nothing changed).

    \b
    Example:
      sudo slurmguard resume gpu017
      sudo slurmguard resume gpu017 --force     # a lemon, after a hardware swap
    """
    from slurmguard.nodeset import expand
    from slurmguard.triage.admin import admin_name, require_admin, resume_nodes

    nodes = expand(nodeset)
    cfg = load_config(ctx)
    require_admin(cfg["admin.groups"], "resume")
    store = open_store(cfg)
    outcomes = resume_nodes(slurm_of(cfg, person=True), store, nodes, f"admin:{admin_name()}", force=force)
    return _report(outcomes, as_json)


def _report(outcomes: list[Any], as_json: bool) -> int:
    emit(Result([o.to_dict() for o in outcomes],
                [Table([[o.node, o.result, o.message] for o in outcomes], ["node", "result", "detail"])]),
         as_json)
    refused = [o for o in outcomes if o.refused]
    for o in refused:
        warn(f"refused: {o.node}: {o.message}")
    return EXIT_REFUSED if refused else EXIT_OK


@click.command("events")
@click.option("--since", default="7d", show_default=True, metavar="WHEN",
              help="A duration (90s, 30m, 1h, 7d, 2w) or an ISO time (UTC unless a zone is given).")
@click.option("--node", metavar="NODE", help="Only this node.")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help="Only these kinds (drain, clear, lemon, ...); repeatable.")
@click.option("--limit", type=click.IntRange(1, 1000000), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def events_cmd(ctx: click.Context, since: str, node: str | None, kinds: tuple[str, ...],
               limit: int, as_json: bool) -> None:
    """The drain ledger: every drain, clear and flag change, by any actor, newest first.

    Actors: slurmguard (checks and policy), admin:NAME, kubernetes, slurm.

    \b
    Example:
      slurmguard events --since 1h
      slurmguard events --node gpu017 --since 2026-12-01T00:00 --json
    """
    from slurmguard.nodeset import validate_node_name

    if node:
        validate_node_name(node)
    start = parse_since(since)
    store = open_store(load_config(ctx))
    rows = store.nodes.events(since=start, node=node, kinds=list(kinds) or None, limit=limit)
    emit(Result([{"id": e.id, "at": iso(e.at), "node": e.node, "kind": e.kind, "actor": e.who,
                  "source": e.source, "reason": e.reason, "details": e.details} for e in rows],
                [Table([[iso(e.at), e.node, e.kind, e.who, e.source or "-", _cut(e.reason, 70)]
                        for e in rows], ["time", "node", "kind", "actor", "source", "reason"])]),
         as_json)
