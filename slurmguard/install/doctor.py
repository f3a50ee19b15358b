"""`slurmguard doctor`: is this host's installation wired in end to end? One item per thing
that must hold, each with the exact fix when it does not (docs/install.md "doctor").

Slurm's view comes from ``scontrol show config`` (the running slurmctld's config, through the
Slurm adapter), else from the slurm.conf file when no controller answers.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from slurmguard import __version__
from slurmguard.contract import REASON_PREFIX
from slurmguard.errors import SlurmguardError

if TYPE_CHECKING:
    from slurmguard.config import Config

PASS, FAIL, SKIP, WARN = "pass", "FAIL", "skip", "WARN"  # WARN: works, but fix it
MARKER = "hook-unrunnable.log"
COMMENT_PREFIX = f"{REASON_PREFIX} hook-unrunnable"  # the Slurm node Comment the scripts set
HOOK_KEYS = {"node": (("Prolog", "slurmguard-prolog"), ("Epilog", "slurmguard-epilog"),
                      ("HealthCheckProgram", "slurmguard-healthcheck")),
             "controller": (("PrologSlurmctld", "slurmguard-gate"),)}
_DEFAULTS_RE = re.compile(r"^SLURMGUARD_DEFAULTS=(.*)$", re.M)


@dataclass
class Item:
    name: str
    status: str  # pass, FAIL, skip, WARN (holds now, will not for long: a certificate)
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class Doctor:
    """Collects the items for one role; every check is a method returning Items."""

    def __init__(self, role: str, cfg: Config, env: dict[str, str] | None = None) -> None:
        self.role = role
        self.cfg = cfg
        self.env = env
        self.items: list[Item] = []
        self.conf: dict[str, str] = {}
        self.conf_source = ""
        self.hook_env: dict[str, str] | None = None  # what the entry scripts give slurmguard
        self.node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]

    # -- helpers -------------------------------------------------------------------------------
    def add(self, name: str, ok: bool | None, detail: str, fix: str = "") -> None:
        status = SKIP if ok is None else PASS if ok else FAIL
        self.items.append(Item(name, status, detail, fix if status == FAIL else ""))

    def add_warning(self, name: str, detail: str, fix: str = "") -> None:
        """An item that passes today but needs an admin soon (doctor still exits 0)."""
        self.items.append(Item(name, WARN, detail, fix))

    def guarded(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except SlurmguardError as exc:
            self.add(name, False, exc.message, "see the message")

    def run(self) -> list[Item]:
        self.add("config", True, ", ".join(self.cfg.sources) or "built-in defaults (no file)")
        self.add("policy.mode", True, _modes(self.cfg))
        self.guarded("slurm.conf", self.read_slurm)
        self.guarded("hook scripts", self.check_hooks)
        if self.role == "node":
            self.guarded("hook time limits", self.check_timeout)
        self.guarded("nohold_on_prolog_fail", self.check_nohold)
        self.guarded("slurmguard runnable", self.check_runnable)
        self.guarded("hooks' environment", self.check_hook_env)
        self.guarded("scontrol ping (hooks)", self.check_hook_ping)
        self.guarded("state dir", self.check_state_dir)
        self.guarded("hook-unrunnable marker", self.check_marker)
        self.guarded("service units", self.check_units)
        if self.role == "node":
            self.guarded("NVML", self.check_nvml)
            self.guarded("per-node state", self.check_node_state)
            self.guarded("SPANK plugin", self.check_spank)
            self.guarded("hook token", self.check_hook_token)
        else:
            self.guarded("store", self.check_store)
            self.guarded("serve token", self.check_serve_token)
            self.guarded("serve user", self.check_serve_user)
        self.guarded("serve.auth", self.check_auth)
        self.guarded("TLS", self.check_tls)
        return self.items

    def check_serve_user(self) -> None:
        from slurmguard.install.serveuser import doctor_item

        doctor_item(self)

    def check_tls(self) -> None:
        from slurmguard.install import doctor_tls

        doctor_tls.plain_http(self)
        (doctor_tls.controller if self.role == "controller" else doctor_tls.node)(self)

    # -- Slurm's configuration -----------------------------------------------------------------
    def read_slurm(self) -> None:
        from slurmguard.adapters.slurm.commands import SlurmCLI
        from slurmguard.adapters.slurm.conf import read_slurm_conf, slurm_conf_path

        try:
            self.conf = SlurmCLI.from_config(self.cfg, self.env).show_config()
            self.conf_source = "scontrol show config"
            self.add("slurm.conf", True, "read the running config with `scontrol show config`")
            return
        except SlurmguardError as exc:
            why = exc.message
        path = slurm_conf_path(self.env)
        try:
            self.conf = read_slurm_conf(path)
        except SlurmguardError as exc:
            self.add("slurm.conf", False, f"scontrol show config failed ({why}) and {exc.message}",
                     "start slurmctld, or point SLURM_CONF at the cluster's slurm.conf")
            return
        self.conf_source = path
        self.add("slurm.conf", True, f"read {path} (scontrol show config failed: {why})")

    def check_hooks(self) -> None:
        from slurmguard.install.plan import entry_script

        if not self.conf:
            self.add("hook scripts", None, "slurm.conf unreadable")
            return
        for key, script in HOOK_KEYS[self.role]:
            value = self.conf.get(key.lower(), "")
            paths = [p.strip() for p in value.split(",") if p.strip()]
            ours = [p for p in paths if os.path.basename(p) == script]
            name = f"{key}"
            if not ours:
                self.add(name, False, f"{key} is {value or 'unset'} in {self.conf_source}",
                         f"add {key}=/usr/lib/slurmguard/{'epilog' if 'epilog' in script else 'prolog'}/"
                         f"{script} to slurm.conf (see `slurmguard setup {self.role} --dry-run`), "
                         "restart slurmctld and slurmd")
                continue
            path = ours[0]
            if not os.access(path, os.X_OK):
                self.add(name, False, f"{key}={path}: no such executable on this host",
                         f"run: slurmguard setup {self.role}")
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            m = _DEFAULTS_RE.search(text)
            defaults = m.group(1).strip() if m else ""
            if text.encode() != entry_script(script, defaults):
                self.add(name, False, f"{path} differs from this slurmguard's {script}",
                         f"run: slurmguard setup {self.role} (reinstalls the entry scripts)")
                continue
            self.add(name, True, f"{key}={path}")

    def check_timeout(self) -> None:
        from slurmguard.install.slurm_timeouts import hook_limits

        if not self.conf:
            self.add("PrologEpilogTimeout", None, "slurm.conf unreadable")
            return
        for f in hook_limits(self.conf, float(self.cfg["hooks.budget"])):
            self.add(f.name, f.ok, f.detail, f.fix)

    def check_nohold(self) -> None:
        from slurmguard.adapters.slurm.conf import scheduler_parameters

        if not self.conf:
            self.add("nohold_on_prolog_fail", None, "slurm.conf unreadable")
            return
        params = scheduler_parameters(self.conf)
        self.add("nohold_on_prolog_fail", "nohold_on_prolog_fail" in params,
                 f"SchedulerParameters={','.join(params) or 'unset'}",
                 "add nohold_on_prolog_fail to SchedulerParameters in slurm.conf: a job whose "
                 "prolog drained a bad node is requeued instead of held")

    # -- this host's installation --------------------------------------------------------------
    def _defaults_file(self) -> str:
        """The defaults file our installed entry script reads (from the script itself)."""
        for key, script in HOOK_KEYS[self.role]:
            for p in self.conf.get(key.lower(), "").split(","):
                p = p.strip()
                if os.path.basename(p) == script and os.path.isfile(p):
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        m = _DEFAULTS_RE.search(fh.read())
                    if m:
                        return m.group(1).strip()
        from slurmguard.install.plan import DEFAULTS_FILE

        return DEFAULTS_FILE

    def check_runnable(self) -> None:
        from slurmguard.proc import run_command

        defaults = self._defaults_file()
        exe = _sourced_slurmguard(defaults)
        fix = (f"reinstall slurmguard or run `slurmguard setup {self.role}` with the slurmguard "
               f"the hooks should run (it writes {defaults})")
        if not os.path.exists(defaults):
            self.add("slurmguard runnable", False, f"{defaults} is missing: the entry scripts "
                     f"fall back to {exe}", fix)
            return
        if not os.access(exe, os.X_OK):
            self.add("slurmguard runnable", False, f"{defaults} names {exe}, which is not an "
                     "executable: every hook skips its checks", fix)
            return
        r = run_command([exe, "--version"], timeout=30, check=False,
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if r.rc != 0 or __version__ not in r.stdout:
            last = (r.stderr.strip().splitlines() or [r.stdout.strip() or "no output"])[-1]
            self.add("slurmguard runnable", False, f"{exe} --version (with the hooks' empty "
                     f"environment) exited {r.rc}: {last}", fix)
            return
        self.add("slurmguard runnable", True, f"the entry scripts run {exe} ({r.stdout.strip()})")

    def check_hook_env(self) -> None:
        """The environment slurmd's hooks give slurmguard: the defaults file and nothing else."""
        from slurmguard.install.hookenv import HOOK_PATH, hook_environment

        defaults = self._defaults_file()
        if not os.path.exists(defaults):
            self.add("hooks' environment", None, f"{defaults} is missing (see slurmguard runnable)")
            return
        self.hook_env = hook_environment(defaults, os.environ.get("SLURMD_NODENAME") or None)
        shown = [f"{k}={v}" for k, v in sorted(self.hook_env.items())
                 if k not in ("PATH", "SLURMD_NODENAME")]
        self.add("hooks' environment", True, f"from {defaults} only (PATH={HOOK_PATH}): "
                 + (", ".join(shown) or "nothing set"))

    def check_hook_ping(self) -> None:
        """slurmctld must answer the hooks' scontrol: else no drain or return of theirs works."""
        from slurmguard.adapters.slurm.conf import DEFAULT_SLURM_CONF
        from slurmguard.install.hookenv import scontrol_ping

        if self.hook_env is None:
            self.add("scontrol ping (hooks)", None, "no hooks' environment to ping from")
            return
        scontrol = str(self.cfg["slurm.scontrol"])
        ok, said = scontrol_ping(scontrol, self.hook_env, float(self.cfg["slurm.timeout"]))
        where = self.hook_env.get("SLURM_CONF") or f"{DEFAULT_SLURM_CONF} (compiled-in default)"
        conf = (self.env or os.environ).get("SLURM_CONF") or self.conf.get("slurm_conf", "")
        fix = (f"Slurm starts HealthCheckProgram without SLURM_CONF: run `SLURM_CONF={conf} "
               f"slurmguard setup {self.role}` (writes SLURM_CONF={conf} into "
               f"{self._defaults_file()})" if conf and conf != where else
               "start slurmctld, or set SLURM_CONF in " + self._defaults_file())
        self.add("scontrol ping (hooks)", ok, f"{scontrol} ping with SLURM_CONF={where}: {said}",
                 fix)

    def check_node_state(self) -> None:
        """Several slurmd on this host (``slurmd -N``) keep their check state apart."""
        from slurmguard.adapters.slurm.commands import SlurmCLI
        from slurmguard.node.runner import STATE_FILE

        host = os.uname().nodename.split(".")[0]
        try:
            nodes = SlurmCLI.from_config(self.cfg, self.env).nodes()
        except SlurmguardError as exc:
            self.add("per-node state", None, f"Slurm's node list unavailable ({exc.message})")
            return
        mine = sorted(n.name for n in nodes
                      if str(n.raw.get("NodeHostName", "")).split(".")[0] in (host, "localhost"))
        state_dir = str(self.cfg["hooks.state_dir"])
        legacy = os.path.join(state_dir, STATE_FILE)
        if len(mine) < 2:
            self.add("per-node state", True, f"{len(mine) or 'no'} Slurm node(s) on this host "
                     f"({', '.join(mine) or host}); check state in {state_dir}/state.<node>.json")
            return
        shared = os.path.exists(legacy)
        self.add("per-node state", not shared,
                 f"{len(mine)} slurmd on this host ({', '.join(mine)}): check state kept per "
                 f"node ({state_dir}/state.<node>.json)"
                 + (f"; {legacy} (one host file from before) still lies there" if shared else ""),
                 f"each node has read it once; remove {legacy} so that no new node inherits "
                 "another's latched Xid")

    def check_units(self) -> None:
        """Installed units of this role must be what this slurmguard's setup writes: a venv
        that moved leaves units starting a slurmguard that no longer exists."""
        from slurmguard.install.plan import DEFAULTS_FILE, UNIT_DIR, unit_files

        defaults = self._defaults_file()
        prefix = defaults[: -len(DEFAULTS_FILE)] if defaults.endswith(DEFAULTS_FILE) else ""
        unit_dir = f"{prefix}{UNIT_DIR}"
        exe = _sourced_slurmguard(defaults)
        stale, ok, missing = [], [], []
        for name, content in unit_files(self.role, exe, str(self.cfg["serve.user"])):
            path = os.path.join(unit_dir, name)
            try:
                with open(path, "rb") as fh:
                    (ok if fh.read() == content else stale).append(name)
            except FileNotFoundError:
                missing.append(name)
        if not ok and not stale:
            self.add("service units", None, f"none installed in {unit_dir}"
                     + (f" ({', '.join(missing)} available)" if missing else ""))
            return
        self.add("service units", not stale,
                 f"{unit_dir}: " + ", ".join([f"{n} current" for n in ok]
                                             + [f"{n} differs" for n in stale]),
                 f"run: slurmguard setup {self.role}, then systemctl daemon-reload and restart "
                 + " ".join(stale))

    def check_state_dir(self) -> None:
        d = str(self.cfg["hooks.state_dir"])
        ok = os.path.isdir(d) and os.access(d, os.W_OK)
        self.add("state dir", ok, f"{d} {'is writable' if ok else 'is missing or not writable'}",
                 f"run: slurmguard setup {self.role}")

    def check_marker(self) -> None:
        path = os.path.join(str(self.cfg["hooks.state_dir"]), MARKER)
        lines = read_marker(path)
        if not lines:
            self.add("hook-unrunnable marker", True, f"no entry script failed to run slurmguard ({path})")
            return
        self.add("hook-unrunnable marker", False,
                 f"{len(lines)} hook run(s) could not run slurmguard; last: {lines[-1]}",
                 "fix the cause it names (see `slurmguard runnable`), then: slurmguard doctor --ack "
                 f"(moves {path} to {path}.1)")

    def check_nvml(self) -> None:
        from slurmguard.adapters import nvml
        from slurmguard.errors import Unsupported

        cfg = self.cfg.for_node(os.environ.get("SLURMD_NODENAME") or None)
        expected = int(cfg["checks.gpu.expected_count"])
        if self.hook_env is not None:
            self._nvml_as_hooks(expected)
            return
        try:
            snap = nvml.gather(cfg, None)
        except Unsupported as exc:
            devices = [e for e in _listdir("/dev") if re.fullmatch(r"nvidia\d+", e)]
            ok = expected <= 0 and not devices
            self.add("NVML", ok, f"{exc.message}; checks.gpu.expected_count={expected}; "
                     f"/dev/nvidia*: {len(devices)}",
                     "install the NVIDIA driver (libnvidia-ml.so.1) or set "
                     "checks.gpu.nvml_library" if expected > 0 or devices else "")
            return
        ok = expected < 0 or snap.count == expected
        self.add("NVML", ok, f"driver {snap.driver_version}, {snap.count} GPU(s)"
                 + (f", expected {expected}" if expected >= 0 else ""),
                 "a GPU is missing: run `slurmguard check` for details")

    def _nvml_as_hooks(self, expected: int) -> None:
        """NVML as the hooks load it: their slurmguard, their config, their environment."""
        from slurmguard.install.hookenv import nvml_as_hooks

        assert self.hook_env is not None
        exe = _sourced_slurmguard(self._defaults_file())
        got = nvml_as_hooks(exe, self.hook_env, float(self.cfg["hooks.budget"]) + 30)
        health, reason, details = got.get("health"), got.get("reason") or "", got.get("details") or {}
        devices = [e for e in _listdir("/dev") if re.fullmatch(r"nvidia\d+", e)]
        where = "in the hooks' environment"
        if health == "unsupported":
            ok = expected <= 0 and not devices
            self.add("NVML", ok, f"{where}: {reason}; checks.gpu.expected_count={expected}; "
                     f"/dev/nvidia*: {len(devices)}",
                     "the hooks cannot load NVML: install the driver (libnvidia-ml.so.1), or "
                     "set checks.gpu.nvml_library in the hooks' config "
                     f"({self.hook_env.get('SLURMGUARD_CONFIG', 'SLURMGUARD_CONFIG')})")
            return
        count = details.get("count")
        self.add("NVML", health == "healthy", f"{where}: {count} GPU(s)"
                 + (f", expected {expected}" if expected >= 0 else "")
                 + (f": {reason}" if reason else ""),
                 "a GPU is missing or NVML fails for the hooks: run `slurmguard check` "
                 "for details")

    def check_spank(self) -> None:
        from slurmguard.adapters.slurm.conf import plugstack_path, slurm_conf_path

        path = plugstack_path(self.conf, slurm_conf_path(self.env))
        lines = _plugstack_lines(path)
        ours = [ln for ln in lines if "slurmguard_spank.so" in ln]
        fix = (f"run: slurmguard setup node (builds the plugin), then add its printed line "
               f"`optional .../slurmguard_spank.so` to {path}")
        if not ours:
            self.add("SPANK plugin", False, f"{path} does not list slurmguard_spank.so", fix)
            return
        so = ours[0].split()[1] if len(ours[0].split()) > 1 else ""
        self.add("SPANK plugin", os.path.isfile(so), f"{path}: {ours[0]}"
                 + ("" if os.path.isfile(so) else f" ({so} is missing)"), fix)

    def check_auth(self) -> None:
        """munge (the default): munged answers here; token: a warning (docs/security.md)."""
        if str(self.cfg["serve.auth"]) == "token":
            self.items.append(Item(
                "serve.auth", WARN, "token: every node writes with one shared token, so root on "
                "any node can write records for every other node (test clusters only)",
                'set serve.auth = "munge" (docs/security.md, "Node identity")'))
            return
        if str(self.cfg["serve.auth"]) == "node-key":
            key = "hooks.node_key_file" if self.role == "node" else "serve.site_key_file"
            self._token("serve.auth", str(self.cfg[key]), "slurmguard serve node-keys --out DIR "
                        "on the controller; install DIR/NODE.key as hooks.node_key_file (root, "
                        "0600)" if self.role == "node" else "create it: 32 random bytes, mode 0600")
            if self.role == "node" and self.items[-1].status != FAIL:
                from slurmguard.install import doctor_nodekey

                doctor_nodekey.check(self, self.node)
            return
        from slurmguard.adapters import munge

        key = "hooks.munge_socket" if self.role == "node" else "serve.munge_socket"
        try:
            munge.encode(b"slurmguard doctor", sock=str(self.cfg[key]))
        except munge.MungeError as exc:
            self.add("serve.auth", False, f"munge: munged does not answer here: {exc.message}",
                     "start munged (systemctl enable --now munge) with the site's munge.key")
            return
        how = "libmunge" if munge.library_available() else "the munge tool (libmunge2 missing)"
        if self.role == "node":
            self._munge_origin(how)
            return
        self.add("serve.auth", True, f"munge: munged answers ({how})")

    def _munge_origin(self, how: str) -> None:
        """serve takes a node's records only when its munged's origin address is the NodeAddr
        of this host's nodes: a multi-homed host's munged may pick another interface."""
        from slurmguard.adapters import munge
        from slurmguard.adapters.slurm.commands import SlurmCLI
        from slurmguard.serve.auth import resolve4

        sock = str(self.cfg["hooks.munge_socket"])
        try:
            origin = munge.decode(munge.encode(b"slurmguard doctor", sock=sock), sock=sock).origin
            nodes = SlurmCLI.from_config(self.cfg, self.env).nodes()
        except SlurmguardError as exc:
            self.add("serve.auth", True, f"munge: munged answers ({how}); its origin address not "
                     f"checked against Slurm ({exc.message})")
            return
        host = os.uname().nodename.split(".")[0]
        mine = {n.name: str(n.raw.get("NodeAddr", "")) for n in nodes
                if str(n.raw.get("NodeHostName", "")).split(".")[0] in (host, "localhost")}
        if not mine:
            self.add("serve.auth", None, f"munge: munged answers ({how}); no Slurm node of this "
                     f"host ({host}) to check its origin address {origin} against")
            return
        ok = sorted(n for n, addr in mine.items() if origin in resolve4(addr))
        self.add("serve.auth", bool(ok), f"munge: munged answers ({how}), origin {origin}: "
                 + (f"the NodeAddr of {', '.join(ok)}" if ok else "the NodeAddr of none of "
                    f"{', '.join(sorted(mine))} (serve would refuse their records: unknown-origin)"),
                 "start munged with --origin=<this node's NodeAddr> (docs/security.md)")

    def check_hook_token(self) -> None:
        if not (self.cfg["hooks.report_url"] or self.cfg["hooks.report_urls"]):
            self.add("hook token", None, "hooks.report_url and report_urls are empty: results "
                     "are not sent to serve")
            return
        if str(self.cfg["serve.auth"]) == "munge":
            self.add("hook token", None, "serve.auth = munge: nodes sign with MUNGE, no token")
            return
        self._token("hook token", str(self.cfg["hooks.token_file"]),
                    "copy the controller's serve.token_file here (root, chmod 0600)")

    def check_serve_token(self) -> None:
        if str(self.cfg["serve.auth"]) == "munge" and not os.path.exists(str(self.cfg["serve.token_file"])):
            self.add("serve token", None, "serve.auth = munge: no token needed (it would only "
                     "show /healthz's figures)")
            return
        self._token("serve token", str(self.cfg["serve.token_file"]),
                    "run: slurmguard setup controller (creates it, mode 0600)")

    def _token(self, name: str, path: str, fix: str) -> None:
        try:
            st = os.stat(path)
        except OSError as exc:
            self.add(name, False, f"{path}: {exc.strerror}", fix)
            return
        if st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            self.add(name, False, f"{path} is world-accessible (mode {stat.S_IMODE(st.st_mode):04o})",
                     f"chmod 0600 {path}")
            return
        # The hooks run as SlurmdUser (root unless slurm.conf says otherwise).
        user = (self.conf.get("slurmduser") or "root").split("(", 1)[0]
        readable = user == "root" or _readable_by(st, user)
        self.add(name, readable, f"{path} mode {stat.S_IMODE(st.st_mode):04o}"
                 + ("" if readable else f", not readable by SlurmdUser {user}"),
                 f"chown {user} {path}")

    def check_store(self) -> None:
        try:
            from slurmguard.store.api import Store
        except ImportError:
            self.add("store", False, "SQLAlchemy is not installed",
                     "pip install 'slurmguard[server]' into this slurmguard's environment")
            return
        st = Store.status(self.cfg.section("store"))
        self.add("store", st.problem is None, st.problem or f"{st.where} at schema {st.head}",
                 "run: slurmguard setup controller (or: slurmguard db upgrade)")


def _modes(cfg: Config) -> str:
    """Which nodes observe (policy.mode), in words, for doctor's item."""
    from slurmguard.observe import observing_groups, repair_overridden

    watching = observing_groups(cfg)
    if not watching:
        return "act (every node)"
    over = " (repair.mode = act does not apply there: repair observes)" \
        if repair_overridden(cfg) else ""
    return ("observe: " + "; ".join(watching) + " (nothing changes in Slurm or Kubernetes "
            "there)" + over)


def _sourced_slurmguard(defaults: str) -> str:
    """SLURMGUARD as the entry scripts see it after sourcing ``defaults``."""
    from slurmguard.proc import run_command

    probe = run_command(["/bin/sh", "-c", 'SLURMGUARD=/usr/local/bin/slurmguard; '
                         '[ -r "$1" ] && . "$1" >/dev/null 2>&1; printf %s "$SLURMGUARD"',
                         "sh", defaults], timeout=10, check=False,
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    return probe.stdout.strip()


def read_marker(path: str) -> list[str]:
    """The lines of a hook-unrunnable marker (empty when there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [ln.strip() for ln in fh if ln.strip()]
    except OSError:
        return []


def ack_marker(state_dir: str) -> str | None:
    """Move the marker aside (to .1) once its cause is fixed; returns the new path."""
    path = os.path.join(state_dir, MARKER)
    if not os.path.exists(path):
        return None
    os.replace(path, path + ".1")
    return path + ".1"


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _plugstack_lines(path: str, depth: int = 0) -> list[str]:
    import glob

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            raw = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in raw:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include ") and depth < 4:
            for f in sorted(glob.glob(line.split(None, 1)[1])):
                out.extend(_plugstack_lines(f, depth + 1))
            continue
        out.append(line)
    return out


def _readable_by(st: os.stat_result, user: str) -> bool:
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return False
    if st.st_uid == pw.pw_uid:
        return bool(st.st_mode & stat.S_IRUSR)
    import grp

    groups = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return st.st_gid in groups and bool(st.st_mode & stat.S_IRGRP)
