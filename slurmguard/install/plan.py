"""The steps of `slurmguard setup node|controller`, computed from the package data, the
config and this host; nothing here writes (slurmguard.install.steps does).

Where things go (below ``prefix``, ``/`` by default; docs/install.md):

| what | path | mode |
|---|---|---|
| entry scripts, slurm.conf snippets | /usr/lib/slurmguard/{prolog,epilog}/ | 0755 / 0644 |
| what the entry scripts read | /etc/default/slurmguard | 0644 |
| config (only when absent) | /etc/slurmguard/slurmguard.toml | 0644 |
| state, spool | hooks.state_dir (group SlurmUser), hooks.spool_dir | 0770 / 0700 |
| SPANK plugin | PluginDir/slurmguard_spank.so | 0755 |
| man page | /usr/local/share/man/man1/slurmguard.1 | 0644 |
| bash completion | /usr/share/bash-completion/completions/slurmguard | 0644 |
| agent hook client (built with gcc) | /usr/lib/slurmguard/prolog/slurmguard-agent-client | 0755 |
| gate client (built with gcc) | /usr/lib/slurmguard/prolog/slurmguard-gate-client | 0755 |
| service units of the role | /etc/systemd/system/slurmguard-*.{service,timer} | 0644 |
| controller: serve token (only when absent) | serve.token_file | 0600 |
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from slurmguard.install.paths import data_dir, under
from slurmguard.install.steps import ROOT, ActionStep, DirStep, FileStep, Owner, Step

if TYPE_CHECKING:
    from slurmguard.config import Config

__all__ = ["Plan", "build", "data_dir", "under"]

ROLES = ("node", "controller")
LIB_DIR = "/usr/lib/slurmguard"
DEFAULTS_FILE = "/etc/default/slurmguard"
CONFIG_FILE = "/etc/slurmguard/slurmguard.toml"
UNIT_DIR = "/etc/systemd/system"
MAN_FILE = "/usr/local/share/man/man1/slurmguard.1"
COMPLETION_FILE = "/usr/share/bash-completion/completions/slurmguard"
HOOK_SCRIPTS = {"prolog": ("slurmguard-prolog", "slurmguard-healthcheck", "slurmguard-gate",
                           "slurmguard-healthcheck-chain"),
                "epilog": ("slurmguard-epilog",)}
# The line of every entry script that names the defaults file; setup --prefix points it below
# the prefix so that a whole installation can live (and be tested) in one directory.
_DEFAULTS_LINE = re.compile(rb"^SLURMGUARD_DEFAULTS=.*$", re.M)
_ROLE_LINE = re.compile(r"^#\s*slurmguard-role:\s*(\w+)", re.M)


def slurmguard_executable() -> str:
    """The absolute path of the slurmguard that runs now (what the hooks must run too).

    The console script as invoked (argv[0]), else the one beside this interpreter (a venv's
    bin/), else the first on PATH. Symlinks are kept: /usr/local/bin/slurmguard -> a venv is
    a stable name an admin chose.
    """
    from slurmguard.errors import SlurmguardError

    argv0 = sys.argv[0] if sys.argv else ""
    candidates = []
    if os.path.basename(argv0) == "slurmguard":
        candidates.append(os.path.abspath(argv0))
    candidates.append(os.path.join(os.path.dirname(sys.executable), "slurmguard"))
    import shutil

    which = shutil.which("slurmguard")
    if which:
        candidates.append(os.path.abspath(which))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SlurmguardError("setup: cannot find the slurmguard executable of this installation "
                          f"(tried {', '.join(candidates)}); run setup as that executable, "
                          "e.g. /opt/slurmguard/.venv/bin/slurmguard setup node")


def entry_script(name: str, defaults_file: str) -> bytes:
    """An entry script from the package data, reading ``defaults_file``."""
    sub = "epilog" if name == "slurmguard-epilog" else "prolog"
    raw = (data_dir() / "hooks" / sub / name).read_bytes()
    return _DEFAULTS_LINE.sub(b"SLURMGUARD_DEFAULTS=" + defaults_file.encode(), raw, count=1)


def unit_role(text: str) -> str:
    """`# slurmguard-role: node|controller` in a unit file (default controller)."""
    m = _ROLE_LINE.search(text)
    return m.group(1) if m else "controller"


def unit_files(role: str, exe: str, serve_user: str = "root") -> list[tuple[str, bytes]]:
    """(name, content) of each packaged unit for ``role``, @SLURMGUARD@ and @SERVE_USER@
    substituted."""
    out = []
    for p in sorted((data_dir() / "systemd").iterdir()):
        if p.suffix not in (".service", ".timer") or p.name.startswith("."):
            continue
        text = p.read_text()
        if unit_role(text) == role:
            out.append((p.name, text.replace("@SLURMGUARD@", exe)
                        .replace("@SERVE_USER@", serve_user or "root").encode()))
    return out


def owner_of(user: str) -> Owner:
    """root:<user's primary group> for a directory ``user`` must read (root when unknown)."""
    if not user or user == "root":
        return ROOT
    try:
        pw = pwd.getpwnam(user)
        return Owner(0, pw.pw_gid, "root", grp.getgrgid(pw.pw_gid).gr_name)
    except KeyError:
        return ROOT


_SITE_HEADER = ("# Site settings: setup keeps everything below this line as it is; a variable "
                "set here overrides setup's above.")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def site_lines(existing: str, ours: set[str]) -> list[str]:
    """What an existing defaults file holds that is not setup's: every line of its site
    section, and (from a file written by hand before setup) assignments to other variables."""
    before, sep, after = existing.partition(_SITE_HEADER + "\n")
    kept = [ln.rstrip() for ln in before.splitlines()
            if (m := _ASSIGN.match(ln)) and m.group(1) not in ours]
    if sep:
        kept += [ln.rstrip() for ln in after.rstrip("\n").splitlines()]
    return kept


def defaults_text(exe: str, config_file: str, state_dir: str, textfile_dir: str,
                  agent_client: str = "", extra: dict[str, str] | None = None,
                  existing: str = "") -> bytes:
    lines = [
        "# Read by the slurmguard entry scripts (Prolog, Epilog, HealthCheckProgram,",
        "# PrologSlurmctld) and by the slurmguard systemd units. Written by `slurmguard setup`,",
        "# which rewrites the variables above the site section below (docs/install.md).",
        f"SLURMGUARD={shlex.quote(exe)}",
        f"SLURMGUARD_CONFIG={shlex.quote(config_file)}",
        f"SLURMGUARD_STATE_DIR={shlex.quote(state_dir)}",
    ]
    if textfile_dir:
        lines.append(f"SLURMGUARD_TEXTFILE_DIR={shlex.quote(textfile_dir)}")
    if agent_client:
        lines.append(f"SLURMGUARD_AGENT_CLIENT={shlex.quote(agent_client)}")
    for key, value in (extra or {}).items():
        lines.append(f"{key}={shlex.quote(value)}")
    ours = {m.group(1) for ln in lines if (m := _ASSIGN.match(ln))}
    site = site_lines(existing, ours)
    if site:
        lines += [_SITE_HEADER, *site]
    return ("\n".join(lines) + "\n").encode()


# What a first config says about policy.mode: a new installation observes first
# (docs/install.md, "Rollout: observe, compare, act"); a config that exists is never touched,
# so an upgrade keeps acting (the key's default).
OBSERVE_FIRST = """# A new installation observes: every check runs and every record is stored, and what
# slurmguard would have done goes to the ledger (`slurmguard shadow report`, `slurmguard
# events --kind would_drain`); nothing changes in Slurm or Kubernetes. To act, set
# mode = "act" here, or per [[group]] (policy.mode = "act") to act group by group.
mode = "observe"
"""


def observing_first(content: bytes) -> bytes:
    """The config setup writes for a host without one, observing: ``policy.mode`` set to
    observe with the comment above (in place of the rendered example's commented default,
    or as a ``[policy]`` table of its own)."""
    text = content.decode()
    marker = '[policy]\n'
    if marker in text:
        head, rest = text.split(marker, 1)
        rest = rest.replace('#mode = "act"\n', OBSERVE_FIRST, 1)
        return (head + marker + rest).encode()
    return (text.rstrip("\n") + "\n\n[policy]\n" + OBSERVE_FIRST).encode()


def prefixed_config(prefix: str, serve_user: str = "root") -> bytes:
    """The config `setup --prefix DIR` writes when there is none: every path below DIR;
    serve runs as ``serve_user`` (root, or SlurmUser: users that exist already)."""
    p = os.path.abspath(prefix)
    return (f"""# Written by `slurmguard setup --prefix {p}`: every path of the installation lives below
# {p}. All other keys keep their defaults (see slurmguard.toml.example beside this file).
[hooks]
state_dir = "{p}/var/lib/slurmguard"
spool_dir = "{p}/var/spool/slurmguard"
token_file = "{p}/etc/slurmguard/token"

[store]
path = "{p}/var/lib/slurmguard/slurmguard.db"

[serve]
token_file = "{p}/etc/slurmguard/token"
# --prefix never creates host users (serve.user's default, slurmguard, is created by a setup
# of the whole host): an installation below a directory runs serve as SlurmUser (Slurm lets
# it drain and reboot) when this host has it, else as root.
user = "{serve_user}"

[requeue]
state_file = "{p}/var/lib/slurmguard/requeue-watch.json"
""").encode()


@dataclass
class Plan:
    role: str
    prefix: str
    exe: str
    config_file: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what setup cannot do: the admin must
    conf_lines: list[str] = field(default_factory=list)  # slurm.conf lines to add
    plugstack_lines: list[str] = field(default_factory=list)
    plugstack_file: str = ""
    enable: list[str] = field(default_factory=list)  # systemctl commands to run


def slurm_settings() -> tuple[dict[str, str], str]:
    """This host's slurm.conf settings (empty when it cannot be read) and its path."""
    from slurmguard.adapters.slurm.conf import read_slurm_conf, slurm_conf_path
    from slurmguard.errors import ParseError

    path = slurm_conf_path()
    try:
        return read_slurm_conf(path), path
    except ParseError:
        return {}, path


class Docs(NamedTuple):
    """What setup installs from the CLI's help: rendered by the caller, since install/ never
    imports cli/ (tests/test_import_graph.py)."""

    manpage: str
    completion: str


def build(role: str, prefix: str, cfg: Config, config_file: str, config_content: bytes | None,
          exe: str, docs: Docs) -> Plan:
    """Every step of `setup ROLE` (``config_content``: the config to create, or None)."""
    from slurmguard.adapters.slurm.conf import slurm_user
    from slurmguard.install import spank

    plan = Plan(role, prefix, exe, config_file)
    conf, conf_path = slurm_settings()
    slurm_owner = owner_of(slurm_user(conf))
    hooks = cfg.section("hooks")
    lib = under(prefix, LIB_DIR)
    textfile_dir = str(_get(cfg, "metrics.textfile_dir", ""))

    # The config first: everything else reads its paths from it.
    if config_content is not None:
        plan.steps.append(DirStep(os.path.dirname(config_file), 0o755, what="config directory"))
        plan.steps.append(FileStep(config_file, config_content, 0o644, keep_existing=True,
                                   what="config (created once, never rewritten)"))
    _entry_script_steps(plan, lib)
    _defaults_steps(plan, cfg, lib, textfile_dir, conf_path)
    # On the controller the state dir also holds the SQLite store that the gate
    # (PrologSlurmctld, run as SlurmUser) reads: group SlurmUser, group-writable for SQLite's
    # -shm/-wal files. The same mode on nodes, so that one host can run both setups.
    # serve's user (when it exists on this host) owns it: the store may live there.
    from slurmguard.install.serveuser import owner as serve_owner

    state_owner = serve_owner(str(cfg["serve.user"]), slurm_owner)
    plan.steps.append(DirStep(hooks["state_dir"], 0o770, state_owner, what="hook state"))
    plan.steps.append(DirStep(hooks["spool_dir"], 0o700, what="results waiting for serve"))
    if textfile_dir:
        plan.steps.append(DirStep(textfile_dir, 0o755, what="node-exporter textfile directory"))
    # The man page and completion script come from the CLI, which install/ never imports:
    # the caller (cli/setup.py) renders them.
    plan.steps.append(FileStep(under(prefix, MAN_FILE), docs.manpage.encode(), 0o644,
                               what="man page"))
    plan.steps.append(FileStep(under(prefix, COMPLETION_FILE), docs.completion.encode(), 0o644,
                               what="bash completion"))
    plan.conf_lines = conf_lines(lib, float(hooks["budget"]), role)
    if role == "node":
        spank.add_steps(plan, conf, conf_path)
        if (hooks["report_url"] or hooks["report_urls"]) and not os.path.exists(hooks["token_file"]):
            plan.notes.append(f"hooks.report_url is set but {hooks['token_file']} is missing: copy "
                              "the controller's serve token there (root, mode 0600)")
    else:
        _controller_steps(plan, cfg, slurm_owner)
    _unit_steps(plan, str(cfg["serve.user"]))
    plan.steps = _unique(plan.steps)
    return plan


def _entry_script_steps(plan: Plan, lib: str) -> None:
    defaults_file = under(plan.prefix, DEFAULTS_FILE)
    for sub, names in HOOK_SCRIPTS.items():
        plan.steps.append(DirStep(f"{lib}/{sub}", 0o755, what="entry scripts"))
        for name in names:
            plan.steps.append(FileStep(f"{lib}/{sub}/{name}", entry_script(name, defaults_file),
                                       0o755, what="entry script"))
        snippet = (data_dir() / "hooks" / sub / "slurm.conf.snippet").read_text()
        plan.steps.append(FileStep(f"{lib}/{sub}/slurm.conf.snippet",
                                   snippet.replace(LIB_DIR, lib).encode(), 0o644,
                                   what="slurm.conf lines"))


def _defaults_steps(plan: Plan, cfg: Config, lib: str, textfile_dir: str,
                    conf_path: str) -> None:
    """The C clients and the defaults file the entry scripts and units read."""
    from slurmguard.adapters.slurm.conf import DEFAULT_SLURM_CONF
    from slurmguard.install import spank

    # The agent's hook client (docs/agent.md), built on both roles so that the defaults file
    # is the same whichever setup ran last on a host.
    client = spank.agent_client()
    client_path = f"{lib}/prolog/slurmguard-agent-client" if client is not None else ""
    if client is not None:
        plan.steps.append(FileStep(client_path, client, 0o755, what="agent hook client"))
    # The gate's compiled client (docs/serve.md "Gate fast path"), and the sockets the two
    # clients ask ([agent] socket, [serve] gate_socket), so the C clients need no TOML.
    extra = {"SLURMGUARD_AGENT_SOCKET": str(cfg["agent.socket"]),
             "SLURMGUARD_SCONTROL": str(cfg["slurm.scontrol"])}  # the fail-open's Slurm mark
    if conf_path != DEFAULT_SLURM_CONF:  # slurmd starts HealthCheckProgram without SLURM_CONF
        extra["SLURM_CONF"] = conf_path
    gclient = spank.gate_client()
    if gclient is not None:
        gpath = f"{lib}/prolog/slurmguard-gate-client"
        plan.steps.append(FileStep(gpath, gclient, 0o755, what="gate client"))
        extra["SLURMGUARD_GATE_CLIENT"] = gpath
    if cfg["serve.gate_socket"]:
        extra["SLURMGUARD_GATE_SOCKET"] = str(cfg["serve.gate_socket"])
    defaults_file = under(plan.prefix, DEFAULTS_FILE)
    plan.steps.append(DirStep(os.path.dirname(defaults_file), 0o755))
    try:
        with open(defaults_file, encoding="utf-8", errors="replace") as fh:
            existing = fh.read()
    except OSError:
        existing = ""
    text = defaults_text(plan.exe, plan.config_file, cfg["hooks.state_dir"], textfile_dir,
                         client_path, extra, existing)
    plan.steps.append(FileStep(defaults_file, text, 0o644, what="what the entry scripts run"))


def _unit_steps(plan: Plan, serve_user: str) -> None:
    unit_dir = under(plan.prefix, UNIT_DIR)
    names = []
    for name, content in unit_files(plan.role, plan.exe, serve_user):
        plan.steps.append(FileStep(f"{unit_dir}/{name}", content, 0o644, what="systemd unit"))
        names.append(name)
    if names:
        plan.enable = ["systemctl daemon-reload", "systemctl enable --now " + " ".join(names)]


def _unique(steps: list[Step]) -> list[Step]:
    """One step per path: one directory may serve several purposes (state = store dir)."""
    seen: set[str] = set()
    unique: list[Step] = []
    for step in steps:
        key = getattr(step, "path", None) or id(step)
        if key not in seen:
            seen.add(key)
            unique.append(step)
    return unique


def _get(cfg: Config, dotted: str, default: Any) -> Any:
    try:
        return cfg[dotted]
    except KeyError:
        return default


def conf_lines(lib: str, budget: float, role: str) -> list[str]:
    """The slurm.conf lines that wire slurmguard in (the same file on every host)."""
    timeout = max(60, int(budget) + 30)
    return [
        f"Prolog={lib}/prolog/slurmguard-prolog",
        f"Epilog={lib}/epilog/slurmguard-epilog",
        f"HealthCheckProgram={lib}/prolog/slurmguard-healthcheck",
        "HealthCheckInterval=300",
        "HealthCheckNodeState=ANY,CYCLE",
        f"PrologEpilogTimeout={timeout}",
        "SchedulerParameters=nohold_on_prolog_fail   # add to your existing list, comma-separated",
        "JobRequeue=1",
        f"PrologSlurmctld={lib}/prolog/slurmguard-gate",
    ]


def _controller_steps(plan: Plan, cfg: Config, slurm_owner: Owner) -> None:
    import secrets

    from slurmguard.install import serveuser

    serve = cfg.section("serve")
    store = cfg.section("store")
    token = serve["token_file"]
    user = str(serve["user"])
    if user not in ("", "root") and not serveuser.exists(user):
        step = serveuser.create_step(user)
        if plan.prefix in ("", "/") and step is not None:
            plan.steps.append(step)  # (cli/setup.py runs it first, so the owners below hold)
        else:
            plan.notes.append(f"serve.user {user} does not exist on this host: --prefix never "
                              "creates users; its files stay root's")
    # The token only serve reads (the hooks on this host run as root); the store directory
    # serve writes and the gate (SlurmUser's group) reads.
    plan.steps.append(DirStep(os.path.dirname(token), 0o755))
    plan.steps.append(FileStep(token, (secrets.token_urlsafe(32) + "\n").encode(), 0o600,
                               serveuser.file_owner(user), keep_existing=True,
                               what="serve token (created once)"))
    if not store["url"]:
        plan.steps.append(DirStep(os.path.dirname(store["path"]), 0o770,
                                  serveuser.owner(user, slurm_owner), what="store directory"))
    state_file = cfg["requeue.state_file"]
    if state_file:
        plan.steps.append(DirStep(os.path.dirname(state_file), 0o770, slurm_owner))
    plan.steps.append(_db_upgrade_step(store))
    if not store["url"]:
        plan.steps.append(serveuser.store_file_step(store["path"],
                                                    serveuser.owner(user, slurm_owner)))


def _db_upgrade_step(section: dict[str, Any]) -> ActionStep:
    """`db upgrade` of the configured store, only when it is not at this slurmguard's head."""

    def probe() -> str | None:
        try:
            from slurmguard.store.api import Store, describe_section
            from slurmguard.store.version import HEAD
        except ImportError:
            return "db upgrade: not possible: SQLAlchemy is missing; install slurmguard[server]"
        where = describe_section(section)
        if not section["url"] and not os.path.exists(section["path"]):
            return f"db upgrade: create the store {where} at schema {HEAD}"
        st = Store.status(section)
        return None if st.revision == HEAD else \
            f"db upgrade: {where} schema {st.revision or '(empty)'} -> {HEAD}"

    def run() -> str:
        from slurmguard.errors import SlurmguardError

        try:
            from slurmguard.store.api import Store, describe_section
        except ImportError:
            raise SlurmguardError("setup controller: the store needs the server extra: "
                                  "pip install 'slurmguard[server]'") from None
        before, after = Store.upgrade(section)
        return f"db upgrade: {describe_section(section)} schema {before or '(empty)'} -> {after}"

    return ActionStep("store schema", probe, run)
