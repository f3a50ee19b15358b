"""`slurmguard setup node|controller`: install what Slurm runs, from this slurmguard's package.

The steps are computed in slurmguard.install.plan and applied by slurmguard.install.steps;
this module only resolves the config and prints. docs/install.md describes every file.
"""

from __future__ import annotations

import os
import tempfile

import click

from slurmguard.install.plan import CONFIG_FILE, ROLES, Docs


def _config(ctx: click.Context, prefix: str) -> tuple[str, bytes | None, object]:
    """(config path, content to create or None, the validated config it gives)."""
    from slurmguard import config
    from slurmguard.install.config_example import render
    from slurmguard.install.plan import observing_first, prefixed_config, under

    given = (ctx.find_root().obj or {}).get("config_path")
    path = os.path.abspath(given) if given else under(prefix, CONFIG_FILE)
    if os.path.exists(path):
        return path, None, config.load(path)
    content = observing_first(render().encode() if prefix in ("", "/") else prefixed_config(
        prefix, _prefix_serve_user()))
    # Validate the config we would create exactly as the hooks will load it.
    with tempfile.NamedTemporaryFile("wb", suffix=".toml", delete=False) as fh:
        fh.write(content)
    try:
        cfg = config.load(fh.name)
    finally:
        os.unlink(fh.name)
    return path, content, cfg


def _prefix_serve_user() -> str:
    """serve's user below --prefix (no user is created there): SlurmUser when this host has
    it (Slurm lets it drain with or without accounting), else root."""
    from slurmguard.adapters.slurm.conf import slurm_user
    from slurmguard.install.plan import slurm_settings
    from slurmguard.install.serveuser import exists

    conf, _ = slurm_settings()
    user = slurm_user(conf) if conf else "root"
    return user if exists(user) else "root"


def _serve_user(role: str, path: str, content: bytes | None, cfg: object) -> tuple[bytes | None, object]:
    """On a cluster without accounting serve must run as a user Slurm lets drain
    (install/serveuser.day_one_user). A config setup creates now, by either role, gets that
    user (one config serves both roles, and sites often run `setup node` first on the
    controller host); an existing one naming another stops `setup controller` with the one
    command to run."""
    from slurmguard import config
    from slurmguard.errors import ConfigError
    from slurmguard.install.plan import slurm_settings
    from slurmguard.install.serveuser import day_one_user, fix_command, with_serve_user

    if role != "controller" and content is None:
        return content, cfg
    user = str(cfg["serve.user"])  # type: ignore[index]
    conf, _ = slurm_settings()
    chosen, why = day_one_user(user, conf)
    if chosen == user:
        return content, cfg
    if content is None:
        raise ConfigError(f"serve.user {user} could not drain or reboot a node: {why}; run: "
                          f"{fix_command(path, chosen)}   (then setup controller again)")
    text = with_serve_user(content, chosen).decode()
    with tempfile.NamedTemporaryFile("wb", suffix=".toml", delete=False) as fh:
        fh.write(text.encode())
    try:
        cfg = config.load(fh.name)
    finally:
        os.unlink(fh.name)
    click.echo(f"serve.user = \"{chosen}\" in the new config: {why}")
    return text.encode(), cfg


def _mode(step: object) -> str:
    mode = getattr(step, "mode", None)
    owner = getattr(step, "owner", None)
    return f"{mode:04o} {owner}" if mode is not None else ""


@click.command("setup")
@click.argument("role", type=click.Choice(ROLES))
@click.option("--prefix", metavar="DIR", default="/", show_default=True,
              help="Install below DIR instead of / (the files refer to each other below DIR).")
@click.option("--dry-run", is_flag=True, help="Print every file it would write; change nothing.")
@click.pass_context
def setup_cmd(ctx: click.Context, role: str, prefix: str, dry_run: bool) -> int:
    """Install slurmguard on a compute node or the controller; idempotent.

    Installs the entry scripts (/usr/lib/slurmguard/{prolog,epilog}), writes
    /etc/default/slurmguard naming this slurmguard's absolute path, creates the config (when
    absent) and the state directories, builds the SPANK plugin (node; needs gcc and
    libslurm-dev), creates the serve token, runs `db upgrade` and installs the systemd units
    (controller). It never edits slurm.conf: it prints the lines to add. A second run
    changes nothing. Exit 0 when done (or nothing to do).

    \b
    Example:
      sudo /opt/slurmguard/.venv/bin/slurmguard setup node --dry-run
      sudo /opt/slurmguard/.venv/bin/slurmguard setup controller
      slurmguard setup node --prefix /tmp/sgroot    # a whole installation in one directory
    """
    from slurmguard.install import plan as planmod
    from slurmguard.install.steps import ActionStep, FileStep, apply

    exe = planmod.slurmguard_executable()
    config_file, content, cfg = _config(ctx, prefix)
    content, cfg = _serve_user(role, config_file, content, cfg)
    if role == "controller" and not dry_run and prefix in ("", "/"):
        from slurmguard.install.serveuser import create_step

        # serve's user first: the files planned below are its own.
        made = create_step(str(cfg["serve.user"]))  # type: ignore[index]
        if made is not None:
            click.echo(f"  {'ran':<13} {made.run()}")
    plan = planmod.build(role, prefix, cfg, config_file, content, exe, _docs())
    outcomes = apply(plan.steps, dry_run=dry_run)
    verb = {"created": "would create", "updated": "would update", "ran": "would run",
            "unchanged": "unchanged"} if dry_run else {"created": "created", "updated": "updated",
                                                       "ran": "ran", "unchanged": "unchanged"}
    click.echo(f"slurmguard setup {role}{' --dry-run' if dry_run else ''}: slurmguard {exe}, "
               f"config {config_file}")
    for o in outcomes:
        step = o.step
        if isinstance(step, ActionStep):
            click.echo(f"  {verb[o.status]:<13} {o.detail or step.what}")
            continue
        why = f"  ({', '.join(o.diff)})" if o.diff else ""
        click.echo(f"  {verb[o.status]:<13} {step.path}  [{_mode(step)}]{why}")
        if dry_run and o.changed and isinstance(step, FileStep):
            _show_content(step)
    changed = sum(o.changed for o in outcomes)
    click.echo(f"{changed} change{'s' if changed != 1 else ''}"
               f"{' would be made' if dry_run else ''}; nothing else was touched.")
    click.echo("\nslurm.conf (the same file on every host; setup never edits it): add or set,"
               " then restart slurmctld and slurmd:")
    for line in plan.conf_lines:
        click.echo(f"    {line}")
    if plan.plugstack_lines:
        click.echo(f"\n{plan.plugstack_file} (PlugStackConfig; on every node and login host):")
        for line in plan.plugstack_lines:
            click.echo(f"    {line}")
    if plan.enable:
        click.echo("\nStart the services:")
        for line in plan.enable:
            click.echo(f"    {line}")
    if plan.notes:
        click.echo("\nStill to do by hand:")
        for note in plan.notes:
            click.echo(f"  - {note}")
    cfg_flag = f" -c {config_file}" if config_file != CONFIG_FILE else ""
    click.echo(f"\nThen check everything with: {exe}{cfg_flag} doctor {role}")
    return 0


def _show_content(step: object) -> None:
    data: bytes = getattr(step, "content", b"")
    if getattr(step, "keep_existing", False) and "token" in getattr(step, "what", ""):
        click.echo("      | <a new random token>")
        return
    try:
        text = data.decode()
    except UnicodeDecodeError:
        click.echo(f"      | <binary, {len(data)} bytes>")
        return
    if "\0" in text:
        click.echo(f"      | <binary, {len(data)} bytes>")
        return
    for line in text.splitlines():
        click.echo(f"      | {line}")


def _docs() -> Docs:
    """The man page and bash completion script that setup installs (from this CLI)."""
    from click.shell_completion import BashComplete

    from slurmguard.cli import cli, mangen
    comp = BashComplete(cli, {}, "slurmguard", "_SLURMGUARD_COMPLETE")
    # source() would also run bash to check the script; the template alone is the script
    return Docs(manpage=mangen.render(), completion=comp.source_template % comp.source_vars())
