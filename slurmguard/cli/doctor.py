"""`slurmguard doctor`: check this host's installation end to end (slurmguard.install.doctor)."""

from __future__ import annotations

import socket

import click

from slurmguard.cli._common import load_config
from slurmguard.output import Result, Table, emit


def _auto_role(conf: dict[str, str]) -> str:
    host = socket.gethostname().split(".")[0]
    ctld = " ".join(v for k, v in conf.items() if k.startswith(("slurmctldhost", "controlmachine")))
    return "controller" if host and host in ctld.replace("(", " ").replace(")", " ").split() else "node"


@click.command("doctor")
@click.argument("role", type=click.Choice(["node", "controller"]), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the items as JSON.")
@click.option("--ack", is_flag=True,
              help="After fixing what made an entry script fail open, move the "
                   "hook-unrunnable marker aside (to hook-unrunnable.log.1) and clear the "
                   "node's 'slurmguard: hook-unrunnable' Comment in Slurm.")
@click.option("--node", "node_name", metavar="NAME",
              help="This host's Slurm node name, for --ack and the node-key check (default "
                   "$SLURMD_NODENAME, else the short hostname).")
@click.pass_context
def doctor_cmd(ctx: click.Context, role: str | None, as_json: bool, ack: bool,
               node_name: str | None) -> int:
    """Check that slurmguard is wired in end to end; print each item with its fix.

    ROLE is node (the default unless this host is a SlurmctldHost) or controller. Items:
    slurm.conf runs our entry scripts (Prolog, Epilog, HealthCheckProgram; PrologSlurmctld
    on the controller), Slurm's hook time limits > hooks.budget (PrologEpilogTimeout, or
    PrologTimeout/EpilogTimeout on 25.05+; HealthCheckTimeout on 25.11+ also below
    HealthCheckInterval), nohold_on_prolog_fail, the scripts resolve to a working
    slurmguard, from the hooks' own environment (what /etc/default/slurmguard sets, nothing
    of yours) `scontrol ping` reaches slurmctld and NVML loads (or no GPUs are expected),
    check state is per node where several slurmd share this host, no hook failed open since
    the last --ack, the SPANK plugin is in plugstack.conf, the serve token
    is readable by the hooks and not world-readable, munged answers (serve.auth = munge; a
    WARN while the shared token is in use), the store is at the current schema
    (controller), serve's user may drain (controller), serve's TLS certificate (key, CA,
    names, expiry; on a node a real handshake with each https report URL). Exit 0 only when
    every item passes (skips and WARN, such as a certificate expiring within 30 days, count
    as passes), else 1.

    \b
    Example:
      sudo slurmguard doctor
      sudo slurmguard doctor controller --json | jq '.items[] | select(.status == "FAIL")'
    """
    import os

    from slurmguard.errors import SlurmguardError
    from slurmguard.install.doctor import COMMENT_PREFIX, FAIL, Doctor, ack_marker

    cfg = load_config(ctx)
    if ack:
        moved = ack_marker(str(cfg["hooks.state_dir"]))
        click.echo(f"marker moved to {moved}" if moved else "no hook-unrunnable marker",
                   err=as_json)
        name = node_name or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        try:
            from slurmguard.adapters.slurm.commands import SlurmCLI

            # An admin's acknowledgement: a person's change, not withheld in observe mode.
            if SlurmCLI.from_config(cfg, person=True).clear_comment(name, COMMENT_PREFIX):
                click.echo(f"cleared the hook-unrunnable Comment of node {name}", err=as_json)
        except SlurmguardError as exc:
            click.echo(f"slurmguard: warning: node {name}: Comment not cleared ({exc.message})",
                       err=True)
    doc = Doctor(role or "node", cfg)
    if node_name:
        doc.node = node_name
    if role is None:
        doc.read_slurm()
        doc.role = _auto_role(doc.conf)
        doc.items.clear()
    items = doc.run()
    ok = not any(i.status == FAIL for i in items)
    failed = [i.name for i in items if i.status == FAIL]
    emit(Result({"ok": ok, "role": doc.role, "items": [i.to_dict() for i in items]},
                [f"slurmguard doctor ({doc.role}):",
                 Table([[i.name, i.status, i.detail, i.fix or "-"] for i in items],
                       ["item", "result", "detail", "fix"], wrap=[None, None, 60, 60]),
                 f"\n{'all items pass' if ok else 'FAILED: ' + ', '.join(failed)}"]), as_json)
    return 0 if ok else 1
