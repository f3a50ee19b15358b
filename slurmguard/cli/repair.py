"""`slurmguard repair status|history|pause|resume` (thin over slurmguard.repair; docs/repair.md)."""

from __future__ import annotations

import os
import time

import click

from slurmguard.cli._common import iso, load_config, open_store, slurm_of, warn
from slurmguard.output import Result, Table, emit


@click.group("repair")
def repair_grp() -> None:
    """Autonomous repair of the nodes slurmguard drained (docs/repair.md).

    serve takes the next rung of each node's ladder (reset-gpu, restart-service, reboot,
    power-cycle, ticket), proves it, verifies the node and returns it on probation; every
    step is an event in the ledger. repair.mode = observe (the default) only records.

    \b
    Examples:
      slurmguard repair status
      slurmguard repair history gpu017
      slurmguard repair pause
    """


@repair_grp.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Nodes in repair: cause, rung, attempt, state, since, and the next step.

    Computed as serve's next pass would (Slurm's view and the ledger), without acting.

    \b
    Example:
      slurmguard repair status --json
    """
    from slurmguard.repair.loop import RepairPass
    from slurmguard.repair.plan import episode_state, plan

    cfg = load_config(ctx)
    rp = RepairPass(cfg, open_store(cfg), slurm_of(cfg))
    now = time.time()
    nodes, events, fleet = rp.inputs(now)
    acts = {a.node: a for a in plan(nodes, events, fleet, rp.params, now)}
    rows = []
    for n in nodes:
        ep = episode_state(events.get(n.name, ()), n.episode)
        mine = [e.at for e in events.get(n.name, ()) if e.details.get("episode") == n.episode]
        a = acts[n.name]
        rows.append({"node": n.name, "cause": n.cause, "mode": n.mode,
                     "rung": str(ep.open_rung or (ep.taken[-1] if ep.taken else "")),
                     "attempt": len(ep.taken), "state": ep.state,
                     "since": iso(max(mine)) if mine else "",
                     "next": f"{a.kind}: {a.rung or ''} {a.why}".replace("  ", " ")})
    why = rp.paused() if fleet.paused else None
    data = {"paused": fleet.paused, "paused_why": why or "", "nodes": rows}
    head = f"repair: {why}" if why else f"repair: {len(rows)} node(s) drained by slurmguard"
    emit(Result(data, [head, Table([[r[k] for k in ("node", "cause", "mode", "rung", "attempt",
                                                     "state", "since", "next")] for r in rows],
                                   ["NODE", "CAUSE", "MODE", "RUNG", "ATTEMPT", "STATE",
                                    "SINCE", "NEXT"])]), as_json)


@repair_grp.command("history")
@click.argument("node")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def history_cmd(ctx: click.Context, node: str, as_json: bool) -> None:
    """NODE's repair episodes (each drain by slurmguard: cause, outcome, reboots), then every
    repair step from the ledger, oldest first.

    \b
    Example:
      slurmguard repair history gpu017
    """
    from slurmguard.nodeset import validate_node_name
    from slurmguard.repair.ledger import KINDS, episodes

    validate_node_name(node)
    kinds = [*KINDS, "lemon", "lemon_cleared", "probation_start", "clear"]
    rows = sorted(open_store(load_config(ctx)).nodes.events(node=node, kinds=kinds, limit=1000),
                  key=lambda e: (e.at, e.id))
    eps = [r.to_dict() for r in episodes(rows)]
    data = {"episodes": eps,
            "events": [{"at": iso(e.at), "kind": e.kind, "actor": e.who, "reason": e.reason,
                        "details": e.details} for e in rows]}
    emit(Result(data, [
        Table([[iso(r["first_at"]), r["cause"], r["outcome"], r["reboots"],
                iso(r["ended_at"]) if r["ended_at"] else ""] for r in eps],
              ["DRAINED", "CAUSE", "OUTCOME", "REBOOTS", "ENDED"]),
        Table([[d["at"], d["kind"], d["actor"], d["reason"]] for d in data["events"]],
              ["AT", "KIND", "ACTOR", "REASON"], wrap=[None, None, None, 70])]), as_json)


@repair_grp.command("pause")
@click.option("--reason", default="", metavar="TEXT", help="Why (shown by `repair status`).")
@click.pass_context
def pause_cmd(ctx: click.Context, reason: str) -> None:
    """The kill switch: no rung starts and no node is returned until `repair resume`.

    Turns on the store's switch, which every serve replica reads on every pass, from
    whichever host you run it. When the store cannot be reached, it creates
    repair.pause_file on this host instead (read by a serve on this host) and says so.
    Rungs already taken finish, and their outcomes are still recorded. Root and members of
    admin.groups only (else exit 7); the switch records who turned it on.

    \b
    Example:
      slurmguard repair pause --reason "firmware rollout"
    """
    from slurmguard.errors import EXIT_STORE, SlurmguardError
    from slurmguard.store.switches import REPAIR_PAUSED

    cfg = load_config(ctx)
    from slurmguard.triage.admin import admin_name, require_admin

    require_admin(cfg["admin.groups"], "repair pause")
    who = f"admin:{admin_name()}"
    try:
        store = open_store(cfg)
    except SlurmguardError as exc:
        path = str(cfg["repair.pause_file"])
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{iso(time.time())} paused by {who}: {reason}\n")
        warn(f"repair: the store is unreachable ({exc.message}): paused by the file {path} "
             "on this host only; run `repair pause` again once the store is back")
        ctx.exit(EXIT_STORE)
    try:
        new = store.switches.turn_on(REPAIR_PAUSED, actor=who, reason=reason)
    finally:
        store.close()
    click.echo("repair: paused (every serve replica)" if new else "repair: already paused")


@repair_grp.command("resume")
@click.pass_context
def resume_cmd(ctx: click.Context) -> None:
    """Lift `repair pause` (the store's switch and this host's repair.pause_file): serve's
    next pass repairs again. Root and members of admin.groups only (else exit 7).

    \b
    Example:
      slurmguard repair resume
    """
    from slurmguard.store.switches import REPAIR_PAUSED
    from slurmguard.triage.admin import require_admin

    cfg = load_config(ctx)
    require_admin(cfg["admin.groups"], "repair resume")
    path = str(cfg["repair.pause_file"])
    store = open_store(cfg)
    try:
        store.switches.turn_off(REPAIR_PAUSED)
    finally:
        store.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    click.echo("repair: resumed")

