"""serve's own user (``serve.user``, default ``slurmguard``): created by `setup controller`,
named in the unit's ``User=``, owner of what serve writes (the token, the store directory).

What still needs more than that user, and how (docs/install.md "Least privilege"): Slurm lets
only SlurmUser, root and accounting Admins (``AdminLevel=Admin``) drain, undrain and reboot a
node (``scontrol update``/``reboot``); maintenance reservations need an Operator. So
``serve.user`` is either that user made a Slurm Admin (``sacctmgr -i modify user slurmguard
set adminlevel=Admin``, needs slurmdbd), or SlurmUser itself (``serve.user = "slurm"``) on a
cluster without accounting. ``root`` keeps the old unit (a root serve with a narrow set of
capabilities).
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping
from typing import Any

from slurmguard.install.steps import ROOT, ActionStep, Owner

SYSTEM_HOME = "/var/lib/slurmguard"


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def owner(user: str, group_of: Owner) -> Owner:
    """``user`` with ``group_of``'s group (SlurmUser's, so the gate can read the store); root
    when ``user`` is root or does not exist (yet)."""
    if not user or user == "root":
        return group_of
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return group_of
    return Owner(pw.pw_uid, group_of.gid, user, group_of.group)


def file_owner(user: str) -> Owner:
    """``user``:its own group, for a file only serve reads (the token)."""
    if not user or user == "root" or not exists(user):
        return ROOT
    pw = pwd.getpwnam(user)
    return Owner(pw.pw_uid, pw.pw_gid, user, grp.getgrgid(pw.pw_gid).gr_name)


def create_step(user: str) -> ActionStep | None:
    """An ActionStep creating ``user`` as a system user with a group of its own, or None when
    root or present. `setup controller` runs it before it plans the files (their owner is
    that user); never under --prefix (a user is the host's, not the prefix's)."""
    if not user or user == "root" or exists(user):
        return None

    def probe() -> str | None:
        if exists(user):
            return None
        return f"create system user {user} (serve.user)"

    def run() -> str:
        from slurmguard.errors import SlurmguardError
        from slurmguard.proc import run_command

        res = run_command(["/usr/sbin/useradd", "--system", "--user-group", "--no-create-home",
                           "--home-dir", SYSTEM_HOME, "--shell", "/usr/sbin/nologin", user],
                          timeout=30, check=False)
        if res.rc != 0:
            raise SlurmguardError(f"setup controller: useradd {user} exited {res.rc}: "
                                  f"{res.stderr.strip()[:200]}")
        return f"created system user {user} (serve.user)"

    return ActionStep("serve user", probe, run)


def store_file_step(path: str, own: Owner) -> ActionStep:
    """The SQLite store file (and its -wal/-shm) owned by serve's user, group-readable and
    -writable by SlurmUser's group (the gate reads it; SQLite's readers write -shm), 0660:
    `db upgrade` run by setup as root creates it root's."""

    def wrong() -> list[str]:
        out = []
        for p in (path, f"{path}-wal", f"{path}-shm"):
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            if (st.st_uid, st.st_gid, st.st_mode & 0o777) != (own.uid, own.gid, 0o660):
                out.append(p)
        return out

    def probe() -> str | None:
        bad = wrong()
        return f"store file owner {own}, mode 0660: {', '.join(bad)}" if bad else None

    def run() -> str:
        bad = wrong()
        for p in bad:
            os.chown(p, own.uid, own.gid)
            os.chmod(p, 0o660)
        return f"store file owner {own}, mode 0660: {', '.join(bad)}"

    return ActionStep("store file owner", probe, run)


def has_accounting(conf: Mapping[str, str]) -> bool:
    """Whether slurm.conf records to an accounting storage (slurmdbd): only then can a user
    be made a Slurm Admin (``sacctmgr ... adminlevel=Admin``)."""
    kind = conf.get("accountingstoragetype", "").strip().lower()
    return kind not in ("", "none", "accounting_storage/none")


def day_one_user(user: str, conf: Mapping[str, str]) -> tuple[str, str]:
    """(the user serve should run as, why it differs from ``user``; "" when it does not).

    Slurm lets only SlurmUser, root and accounting Admins drain, undrain and reboot. On a
    cluster without accounting no user can be made an Admin, so a ``serve.user`` that is
    neither SlurmUser nor root could not act on its first day: SlurmUser is the choice there.
    With accounting (or slurm.conf unreadable) ``user`` stands: `doctor controller` checks its
    AdminLevel."""
    from slurmguard.adapters.slurm.conf import slurm_user

    if not conf or user in ("", "root") or has_accounting(conf):
        return user, ""
    slurm = slurm_user(conf)
    if user == slurm:
        return user, ""
    kind = conf.get("accountingstoragetype", "") or "unset"
    return slurm, (f"this cluster has no accounting (AccountingStorageType {kind}), so Slurm "
                   f"lets only SlurmUser ({slurm}) and root drain and reboot, and "
                   f"{user} cannot be made a Slurm Admin")


def with_serve_user(content: bytes, user: str) -> bytes:
    """The example config (install/config_example.render) with ``[serve] user`` set."""
    text = content.decode()
    head = text.index("\n[serve]\n")
    at = text.index('\n#user = "', head)
    return (text[:at] + f'\nuser = "{user}"' + text[text.index("\n", at + 1):]).encode()


def fix_command(config_file: str, user: str) -> str:
    """The one command that makes serve run as ``user`` (a conf.d drop-in beside the config,
    which overrides it key by key)."""
    confd = os.path.join(os.path.dirname(config_file), "conf.d", "serve-user.toml")
    return (f"printf '[serve]\\nuser = \"{user}\"\\n' | install -D -m 0644 /dev/stdin {confd}")


def doctor_item(doc: Any) -> None:
    """doctor controller: may serve.user drain? SlurmUser and root may; anyone else must be a
    Slurm Admin in accounting (asked with sacctmgr beside the configured sacct)."""
    from slurmguard.adapters.slurm.conf import slurm_user

    user = str(doc.cfg["serve.user"])
    if user in ("", "root"):
        doc.add("serve user", True, "root (serve.user): the root unit")
        return
    if not exists(user):
        doc.add("serve user", False, f"serve.user {user} does not exist on this host",
                "run: slurmguard setup controller (creates it)")
        return
    slurm = slurm_user(doc.conf) if doc.conf else ""
    if user == slurm:
        doc.add("serve user", True, f"{user} is SlurmUser: Slurm lets it drain and reboot")
        return
    chosen, why = day_one_user(user, doc.conf or {})
    if chosen != user:  # no accounting: no AdminLevel to give; only SlurmUser or root act
        doc.add("serve user", False, f"{user}: {why}",
                f"run: {fix_command(_config_file(doc.cfg), chosen)}")
        return
    level = _admin_level(user, str(doc.cfg["slurm.sacct"]))
    detail = f"{user}: SlurmUser is {slurm or '(unknown)'}; AdminLevel {level}"
    fix = (f"serve cannot drain or reboot as {user} unless it is a Slurm Admin: sacctmgr -i "
           f"modify user name={user} set adminlevel=Admin, or serve.user = "
           f"\"{slurm or 'slurm'}\" (docs/install.md \"Least privilege\")")
    if level.startswith("unknown"):  # no accounting to ask: say it, but it may hold
        doc.add_warning("serve user", detail, fix)
    else:
        doc.add("serve user", level == "Administrator", detail, fix)


def _config_file(cfg: Any) -> str:
    sources = [s for s in getattr(cfg, "sources", []) if "conf.d" not in s]
    return sources[0] if sources else "/etc/slurmguard/slurmguard.toml"


def _admin_level(user: str, sacct: str) -> str:
    from slurmguard.errors import SlurmguardError
    from slurmguard.proc import run_command

    sacctmgr = os.path.join(os.path.dirname(sacct), "sacctmgr")
    try:
        res = run_command([sacctmgr, "-n", "-P", "show", "user", user, "format=adminlevel"],
                          timeout=10, check=False)
    except (SlurmguardError, OSError) as exc:
        return f"unknown ({exc})"
    if res.rc != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return f"unknown (sacctmgr exited {res.rc}: {last[:120]})"
    return res.stdout.strip().splitlines()[0] if res.stdout.strip() else "none (not in accounting)"
