"""`slurmguard doctor`: check this host's installation end to end (slurmguard.doctor)."""

from __future__ import annotations

import socket

import click

from slurmguard.cli._common import echo_json, load_config


def _auto_role(conf: dict[str, str]) -> str:
    host = socket.gethostname().split(".")[0]
    ctld = " ".join(v for k, v in conf.items() if k.startswith(("slurmctldhost", "controlmachine")))
    return "controller" if host and host in ctld.replace("(", " ").replace(")", " ").split() else "node"


@click.command("doctor")
@click.argument("role", type=click.Choice(["node", "controller"]), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the items as JSON.")
@click.option("--ack", is_flag=True,
              help="After fixing what made an entry script fail open, move the "
                   "hook-unrunnable marker aside (to hook-unrunnable.log.1).")
@click.pass_context
def doctor_cmd(ctx: click.Context, role: str | None, as_json: bool, ack: bool) -> int:
    """Check that slurmguard is wired in end to end; print each item with its fix.

    ROLE is node (the default unless this host is a SlurmctldHost) or controller. Items:
    slurm.conf runs our entry scripts (Prolog, Epilog, HealthCheckProgram; PrologSlurmctld
    on the controller), PrologEpilogTimeout > hooks.budget, nohold_on_prolog_fail, the
    scripts resolve to a working slurmguard, no hook failed open since the last --ack, NVML
    loads (or no GPUs are expected), the SPANK plugin is in plugstack.conf, the serve token
    is readable by the hooks and not world-readable, the store is at the current schema
    (controller). Exit 0 only when every item passes (skips count as passes), else 1.

    \b
    Example:
      sudo slurmguard doctor
      sudo slurmguard doctor controller --json | jq '.items[] | select(.status == "FAIL")'
    """
    from slurmguard.doctor import FAIL, Doctor, ack_marker

    cfg = load_config(ctx)
    if ack:
        moved = ack_marker(str(cfg["hooks.state_dir"]))
        click.echo(f"marker moved to {moved}" if moved else "no hook-unrunnable marker",
                   err=as_json)
    doc = Doctor(role or "node", cfg)
    if role is None:
        doc.read_slurm()
        doc.role = _auto_role(doc.conf)
        doc.items.clear()
    items = doc.run()
    ok = not any(i.status == FAIL for i in items)
    if as_json:
        echo_json({"ok": ok, "role": doc.role, "items": [i.to_dict() for i in items]})
    else:
        click.echo(f"slurmguard doctor ({doc.role}):")
        from tabulate import tabulate

        click.echo(tabulate([[i.name, i.status, i.detail, i.fix or "-"] for i in items],
                            headers=["item", "result", "detail", "fix"], tablefmt="simple",
                            disable_numparse=True, maxcolwidths=[None, None, 60, 60]))
        failed = [i.name for i in items if i.status == FAIL]
        click.echo(f"\n{'all items pass' if ok else 'FAILED: ' + ', '.join(failed)}")
    return 0 if ok else 1
