"""A fleet-sized slurmguard on one host: one real slurmctld, N `slurmd -N` (up to ~1,024),
wired by `slurmguard setup` exactly as a site is, two `serve` replicas on one PostgreSQL, the
stand-in NVML per node, the resident agent on a sample of nodes and the fallback path (the
compiled client running `slurmguard HOOK` itself) on the rest. docs/scale.md.

A library first (``ScaleHarness.start(spec)``; scenarios in support/scale_scenarios.py are
functions given the running harness), the CLI second (tests/scale/run.py).

Each node has its own config (nodes/NODE.toml: what its own /etc would hold: its kernel log,
boot id, state and spool directories); the entry scripts reach it through a site line of the
defaults file `setup` wrote (setup keeps the site section), so the scripts slurmd runs are the
installed ones, unchanged.

Teardown is by pid, never by name; every pid started is also written under ROOT/pids, and
:meth:`ScaleHarness.start` first kills what a previous run on the same ROOT left there (a
cleanup cut short leaves a thousand slurmd holding ports).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fakehw.kmsg import write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config
from fakehw.sysfs import write_ib_fabric

from support import footprint, scale_repair_conf
from support.helpers import REPO, require, sg_env
from support.pgserver import PgServer, _pg_bin
from support.sgserve import TOKEN, Serve, new_port
from support.slurmcluster import Cluster, free_port_block, kill_pidfiles, missing_components

if TYPE_CHECKING:
    from support.nodetraffic import NodeTraffic
    from support.slurmdbd import SlurmDBD

CHECKS = ("gpu-count", "gpu-lost", "gpu-ecc", "gpu-xid", "fs-mount", "host-cpus")


def require_harness() -> None:
    """What every harness needs on this host: a real Slurm, root (slurmctld/slurmd run as
    root) and PostgreSQL's binaries; under CI=true a missing one fails (helpers.require)."""
    missing = missing_components()
    require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
    require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
    require(_pg_bin() is not None, "PostgreSQL binaries (/usr/lib/postgresql/*/bin)")


def require_accounting() -> None:
    """What ``ScaleSpec.accounting`` needs besides: slurmdbd and MariaDB (support/slurmdbd.py)."""
    from support.slurmdbd import missing_components as dbd_missing

    missing = dbd_missing()
    require(not missing, f"Slurm accounting needs {', '.join(missing)} "
                         "(Debian: slurmdbd mariadb-server)")


@dataclass
class ScaleSpec:
    nodes: int = 128
    agents: int = 32             # nodes with the resident agent (the first ones)
    replicas: int = 2            # serve replicas on the one PostgreSQL
    hc_interval: int = 300       # HealthCheckInterval (CYCLE: spread over the interval)
    cap_percent: float = 20.0    # policy.blast_max_percent
    fallback_slots: int = 10
    start_timeout: float = 600.0
    # Jobs' `slurmguard run` reads the node's config, as a site's /etc/slurmguard on every
    # node gives it (so its drain watch asks serve). False: the wrapper runs with none, as the
    # harness's first runs did (it then polls Slurm itself every notice.interval).
    job_config: bool = True
    # False: Slurm alone (the fleet day's baseline): no Prolog, Epilog, HealthCheckProgram or
    # PrologSlurmctld in slurm.conf; slurmguard is still installed (serve, the store) unused.
    slurmguard: bool = True
    checks: tuple[str, ...] = CHECKS
    ib_ports: int = 0            # stand-in IB HCAs per node (sysfs fixture) for ib-link
    extra_config: str = ""       # more sections, appended to every config (e.g. [notice])
    slurm_extra: tuple[str, ...] = ()  # more slurm.conf lines (later lines win)
    policy_interval: float = 60.0  # serve.policy_interval: the fleet policy's and repair's pass
    # Set: repair in act mode with these limits on every serve replica, a RebootProgram in
    # slurm.conf (support/scale_repair.py; the scenario runs the BMC that answers it).
    repair: scale_repair_conf.RepairLimits | None = None
    # policy.mode of every config: "observe" runs every hook and check and changes nothing in
    # Slurm (docs/policy.md "Observe mode"; the fleet day's shadow arm).
    policy_mode: str = "act"
    # Slurm accounting: the harness starts a slurmdbd of its own (support/slurmdbd.py, on a
    # private MariaDB) and gives every node GPUS_PER_NODE GPUs as a GRES, so sacct answers
    # with each job's GPUs and end (what `shadow report` counts GPU-hours from).
    accounting: bool = False
    # Node entries in slurm.conf beyond the real ones (n{nodes+1}...), in the same partition,
    # with no slurmd: support/nodetraffic.py sends what their hooks would send to serve.
    # Slurm 22.05 keeps them UNKNOWN+NOT_RESPONDING (docs/scale.md "Emulated nodes").
    emulated: int = 0
    start_wave: int = 0  # slurmd started this many at a time (Cluster.start's wave); 0: all
    emulated_own_state: bool = True  # each emulated health check takes its node's state as a hook


GPUS_PER_NODE = 8  # the stand-in NVML's GPUs (checks.gpu.expected_count), and the GRES's


# The [agent] default the harness keeps (refresh 0: no answer uses a slow-source value older).
AGENT_MAX_AGE = 10.0

SETUP_KEYS = frozenset({"Prolog", "Epilog", "HealthCheckProgram", "HealthCheckNodeState",
                        "PrologEpilogTimeout", "PrologSlurmctld"})


class ScaleHarness:
    def __init__(self, root: Path, spec: ScaleSpec) -> None:
        self.root = root
        self.spec = spec
        self.prefix = root / "install"
        self.pids = root / "pids"
        self.shared = root / "shared"  # the mount every node requires (fs-mount)
        self.gate_socket = root / "run" / "gate.sock"  # serve0's, for PrologSlurmctld
        self.nodes = [f"n{i}" for i in range(1, spec.nodes + 1)]
        self.agent_nodes = self.nodes[:spec.agents]
        self.emulated_nodes = [f"n{i}" for i in range(spec.nodes + 1, spec.nodes + spec.emulated + 1)]
        self.emulated_dir = root / "emulated"  # the emulated nodes' state and spool
        self.traffic: NodeTraffic | None = None
        self.pg: PgServer | None = None
        self.store_url = ""
        self.serves: list[Serve] = []
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.cluster: Cluster | None = None
        self.dbd: SlurmDBD | None = None
        self.timings: dict[str, float] = {}
        self.sg = str(Path(sys.executable).parent / "slurmguard")
        self.calls_log = root / "slurm-calls.log"

    # -- life cycle ----------------------------------------------------------------------------
    @classmethod
    def start(cls, root: str | os.PathLike[str], spec: ScaleSpec) -> ScaleHarness:
        root = Path(root).resolve()
        cleanup_previous(root)
        root.mkdir(parents=True)
        h = cls(root, spec)
        try:
            h._start()
        except BaseException:
            h.stop()
            raise
        return h

    def _start(self) -> None:
        t0 = time.monotonic()
        # slurmguard's bytecode, as a site's pip install leaves it: with PYTHONDONTWRITEBYTECODE
        # set (as on these machines) every job's `slurmguard run` and every hook started by
        # this shell's environment compiled its modules again, and the fleet day counted that
        # compile (0.1-0.2 s a job start) as slurmguard's overhead.
        import compileall

        compileall.compile_dir(str(REPO / "slurmguard"), quiet=1)
        self.pids.mkdir()
        self.shared.mkdir()
        self.restore_shared_mount()
        self._start_store()
        self.ports = [new_port() for _ in range(self.spec.replicas)]
        self._write_configs()
        conf = self._setup()
        self.timings["setup_s"] = time.monotonic() - t0
        for i, port in enumerate(self.ports):
            # The first replica runs on the controller's own config, as serve on the slurmctld
            # host does: its gate socket answers PrologSlurmctld's compiled client, which
            # serve accepts only for its own config file (docs/serve.md "Gate fast path").
            cfg = self.prefix / ("etc/slurmguard/slurmguard.toml" if i == 0
                                 else f"etc/slurmguard/serve{i}.toml")
            if i:
                cfg.write_text(self.common_config(serve_port=port))
            s = Serve(cfg, port, env={"SLURM_CONF": str(self.conf_path)})
            self.serves.append(s.start(timeout=60))
            self._pidfile(f"serve{i}", s.proc.pid, str(cfg))  # type: ignore[union-attr]
        t1 = time.monotonic()
        # setup's slurm.conf lines as printed; HealthCheckInterval is the scenario's (setup
        # recommends 300 s, the harness's default too). RequeueExit=75: `slurmguard run`'s
        # verdict "requeue me" (docs/requeue.md).
        sg = self.spec.slurmguard
        reboot = scale_repair_conf.install(self) if self.spec.repair else []
        if self.spec.accounting:
            self._start_accounting()
        self.cluster = Cluster.start(
            self.root / "slurm", nodes=self.spec.nodes, prolog=conf["Prolog"] if sg else None,
            epilog=conf["Epilog"] if sg else None,
            prolog_slurmctld=conf["PrologSlurmctld"] if sg else None,
            health_check_program=conf["HealthCheckProgram"] if sg else None,
            health_check_interval=self.spec.hc_interval if sg else 0, slurmd_timeout=120,
            extra_conf=[*([f"HealthCheckNodeState={conf['HealthCheckNodeState']}",
                           f"PrologEpilogTimeout={conf['PrologEpilogTimeout']}"] if sg else []),
                        "TreeWidth=64", "AuthInfo=cred_expire=10", "MaxJobCount=20000",
                        "RequeueExit=75", *reboot, *self.spec.slurm_extra],
            port_base=free_port_block(self.spec.nodes + 1 + bool(self.spec.emulated)),
            timeout=self.spec.start_timeout, emulated=self.spec.emulated,
            wave=self.spec.start_wave,
            accounting=self.dbd, gpus_per_node=GPUS_PER_NODE if self.spec.accounting else 0)
        assert self.cluster.conf_path == self.conf_path, self.cluster.conf_path
        self._pidfile("slurmctld", self.cluster._ctld.pid, str(self.conf_path))  # type: ignore[union-attr]
        self.timings["cluster_start_s"] = time.monotonic() - t1
        for n in self.agent_nodes:
            self.start_agent(n)
        if self.emulated_nodes:
            self.traffic = self._start_traffic()
        self.timings["start_s"] = time.monotonic() - t0

    @property
    def all_nodes(self) -> list[str]:
        """Every node entry of slurm.conf: the real ones, then the emulated ones."""
        return self.nodes + self.emulated_nodes

    def _start_traffic(self) -> NodeTraffic:
        """The emulated nodes' generator, on their config, the gate's installed entry script
        and a Slurm adapter on the harness's recorded tools."""
        from slurmguard import config
        from slurmguard.adapters.slurm.commands import SlurmCLI
        from slurmguard.proc import run_command
        from support.nodetraffic import NodeTraffic, TrafficSpec, prolog_slurmctld_env

        assert self.cluster is not None
        cfg = config.load(str(self.prefix / "etc/slurmguard/emulated.toml"))
        gate = self.entry("prolog/slurmguard-gate")

        def run_gate(job: int, node: str) -> int:
            return run_command([gate], env=prolog_slurmctld_env(job, node), timeout=60,
                               check=False).rc

        spec = TrafficSpec(nodes=self.emulated_nodes, fleet_nodes=len(self.all_nodes),
                           hc_interval=self.spec.hc_interval,
                           gate_entry=gate if self.spec.slurmguard else "",
                           own_state=self.spec.emulated_own_state)
        slurm = SlurmCLI.from_config(cfg, env=self.cluster.env)
        return NodeTraffic(cfg, spec, slurm=slurm,
                           run_gate=run_gate if self.spec.slurmguard else None).start()

    @property
    def conf_path(self) -> Path:
        return self.root / "slurm" / "slurm" / "etc" / "slurm.conf"

    def entry(self, name: str) -> str:
        return str(self.prefix / "usr/lib/slurmguard" / name)

    def _pidfile(self, name: str, pid: int, marker: str) -> None:
        (self.pids / f"{name}.pid").write_text(f"{pid}\n{marker}\n")

    def _start_store(self) -> None:
        bindir = _pg_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
        self.pg = PgServer(bindir, options=("max_connections=200",))
        self.pg.start()
        pid = int(Path(self.pg.data, "postmaster.pid").read_text().split()[0])
        self._pidfile("postgres", pid, self.pg.data)
        from support.replicas import pg_store

        # Alembic's migration context is process-global: harnesses started from threads at
        # once (the fleet day's arms) migrate their stores one at a time.
        with _MIGRATE:
            self.store_url = pg_store(self.pg)

    def _start_accounting(self) -> None:
        from support.slurmdbd import SlurmDBD

        t = time.monotonic()
        self.dbd = SlurmDBD.start(self.root)
        # Its two daemons by pid, each with a marker its command line holds (slurmdbd's is
        # only its name: `slurmdbd -D`, its config found beside SLURM_CONF).
        mariadbd, slurmdbd = self.dbd._procs
        self._pidfile("mariadbd", mariadbd.pid, str(self.dbd.root))
        self._pidfile("slurmdbd", slurmdbd.pid, "slurmdbd")
        self.timings["accounting_start_s"] = time.monotonic() - t

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.stop()
        for p in self.agents.values():
            _stop(p)
        self.agents.clear()
        for s in self.serves:
            s.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.dbd is not None:
            self.dbd.stop()
        if self.pg is not None:
            self.pg.stop()
        kill_pidfiles(self.pids, str(self.root))

    # -- configuration -------------------------------------------------------------------------
    def common_config(self, serve_port: int = 0, node: str = "", node_dir: Path | None = None) -> str:
        """The config of serve (``serve_port``), of the controller, or of ``node``: the same
        file but for what a node keeps on its own disk (kernel log, boot id, state, spool),
        under ``node_dir`` when given (the emulated nodes' one directory)."""
        p, s = self.prefix, self.spec
        d = node_dir or (self.node_dir(node) if node else None)
        xid = f'file = "{d}/kmsg"\nboot_id_path = "{d}/boot_id"' if d else ""
        ib = f'[checks.ib]\nsysfs_root = "{d}/ib"\n' if d and s.ib_ports else ""
        checks = json.dumps(list(s.checks))
        state = f"{d}/state" if d else f"{p}/var/lib/slurmguard"
        spool = f"{d}/spool" if d else f"{p}/var/spool/slurmguard"
        urls = [f"http://127.0.0.1:{port}/ingest" for port in self.ports]
        # Only the controller's file (serve0's) has the gate socket: one serve answers there.
        gate = f'gate_socket = "{self.gate_socket}"' if not node and not serve_port else ""
        # Only serve repairs: the nodes' own files have no [repair].
        repair = scale_repair_conf.config_section(self, s.repair) if s.repair and not node else ""
        return f"""
[store]
url = "{self.store_url}"
[serve]
host = "127.0.0.1"
port = {serve_port or self.ports[0]}
token_file = "{p}/etc/slurmguard/token"
policy_interval = {s.policy_interval}
{gate}
[agent]
socket = "{self.root}/run/%n.sock"
[policy]
blast_max_percent = {s.cap_percent}
{f'mode = "{s.policy_mode}"' if s.policy_mode != "act" else ""}
[slurm]
scontrol = "{self.root}/bin/scontrol"
sinfo = "{self.root}/bin/sinfo"
squeue = "{self.root}/bin/squeue"
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
nvidia_proc_root = "{self.root}/gpus"
{xid}
[checks.fs]
mounts = ["/", "{self.shared}"]
mountinfo = "{self.root}/mountinfo"
[requeue]
state_file = "{p}/var/lib/slurmguard/requeue-watch.json"
[hooks]
budget = 30.0
report_url = "{urls[0]}"
report_urls = {json.dumps(urls[1:])}
report_timeout = 2.0
token_file = "{p}/etc/slurmguard/token"
state_dir = "{state}"
spool_dir = "{spool}"
fallback_slots = {s.fallback_slots}
prolog = {checks}
epilog = {json.dumps([c for c in s.checks if c not in ("gpu-ecc", "host-cpus")])}
healthcheck = {checks}
{ib}{repair}{s.extra_config}
"""

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def _write_configs(self) -> None:
        """The controller's config (what setup reads) and one per node (its own /etc)."""
        cfgdir = self.prefix / "etc/slurmguard"
        (cfgdir / "nodes").mkdir(parents=True)
        (self.root / "run").mkdir(mode=0o700)
        token = cfgdir / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        self._write_recorders()
        common = self.common_config()
        (cfgdir / "slurmguard.toml").write_text(common)
        self.libdir = build_fake_nvml(self.root.parent / "fakenvml")
        write_gpu_tree(self.root / "gpus")
        nvml = json.dumps(default_config(8))
        for n in self.nodes:
            d = self.node_dir(n)
            (d / "state").mkdir(parents=True)
            (d / "spool").mkdir()
            (d / "nvml.json").write_text(nvml)
            (d / "kmsg").write_text("")
            (d / "boot_id").write_text(str(uuid.uuid4()) + "\n")
            if self.spec.ib_ports:
                write_ib_fabric(d / "ib", self.spec.ib_ports)
            (cfgdir / "nodes" / f"{n}.toml").write_text(self.common_config(node=n))
        if self.emulated_nodes:  # one config for all: one host sends for them
            d = self.emulated_dir
            (d / "state").mkdir(parents=True)
            (d / "spool").mkdir()
            (cfgdir / "emulated.toml").write_text(self.common_config(node="emulated", node_dir=d))

    def _write_recorders(self) -> None:
        """The Slurm tools every slurmguard config of the harness names: each appends one line
        (time, the calling process's command line, the call) to ROOT/slurm-calls.log, then
        execs the real tool; sdiag counts what slurmctld received, this says who asked. Short
        appends (O_APPEND, under PIPE_BUF) from concurrent callers do not interleave."""
        bindir = self.root / "bin"
        bindir.mkdir()
        for tool in ("scontrol", "sinfo", "squeue"):
            path = bindir / tool
            path.write_text(
                "#!/bin/sh\n"
                f'caller=$(tr "\\0" " " < /proc/$PPID/cmdline | cut -c1-200)\n'
                f'printf "%s\\t%s\\t%s\\n" "$(date +%s.%N)" "$caller" "{tool} $*" '
                f'>> {self.calls_log}\n'
                f'exec /usr/bin/{tool} "$@"\n')
            path.chmod(0o755)

    def slurm_calls(self, since: float = 0.0) -> list[tuple[float, str, str]]:
        """(time, caller's command line, call) of each slurmguard Slurm call since ``since``."""
        if not self.calls_log.exists():
            return []
        out = []
        for ln in self.calls_log.read_text(errors="replace").splitlines():
            t, _, rest = ln.partition("\t")
            caller, _, call = rest.partition("\t")
            try:
                at = float(t)
            except ValueError:
                continue
            if at >= since:
                out.append((at, caller, call))
        return out

    def job_script(self, command: str) -> str:
        """A batch script running ``command`` under `slurmguard run`, with the node's config
        when ``spec.job_config`` (a site's nodes have it in /etc)."""
        cfg = (f"SLURMGUARD_CONFIG={self.prefix}/etc/slurmguard/nodes/$SLURMD_NODENAME.toml"
               "; export SLURMGUARD_CONFIG\n" if self.spec.job_config else "")
        return f"#!/bin/sh\n{cfg}exec {self.sg} run -- {command}\n"

    def _setup(self) -> list[str]:
        """`slurmguard setup controller` then `setup node` into the prefix, as an admin runs
        them; the node-specific site lines into the defaults file; setup's slurm.conf lines."""
        env = sg_env(SLURMGUARD_CONFIG=str(self.prefix / "etc/slurmguard/slurmguard.toml"),
                     SLURM_CONF=str(self.conf_path))
        printed = ""
        for role in ("controller", "node"):
            r = subprocess.run([self.sg, "setup", role, "--prefix", str(self.prefix)], env=env,
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"setup {role}: rc={r.returncode}: {r.stderr}{r.stdout}")
            printed += r.stdout
        defaults = self.prefix / "etc/default/slurmguard"
        cfgdir = self.prefix / "etc/slurmguard"
        site = [
            "# Site settings: the scale harness's nodes share one host; each has its own config.",
            f'[ -n "$SLURMD_NODENAME" ] && SLURMGUARD_CONFIG={cfgdir}/nodes/$SLURMD_NODENAME.toml',
            f"LD_LIBRARY_PATH={self.libdir}",
            f"FAKE_NVML_CONFIG={self.root}/nodes/$SLURMD_NODENAME/nvml.json",
            # The agent's client checks the agent's boot against the node's (its kernel log's).
            f"SLURMGUARD_BOOT_ID_PATH={self.root}/nodes/%n/boot_id",
            # This checkout's slurmguard, not whichever tree the venv's editable install names.
            f"PYTHONPATH={REPO}",
            "export LD_LIBRARY_PATH FAKE_NVML_CONFIG PYTHONPATH",
        ]
        text = defaults.read_text()
        from slurmguard.install.plan import _SITE_HEADER

        if _SITE_HEADER not in text:
            text += _SITE_HEADER + "\n"
        defaults.write_text(text + "\n".join(site) + "\n")
        conf = {}
        for ln in printed.splitlines():
            key, eq, value = ln.split("#")[0].strip().partition("=")
            if eq and key in SETUP_KEYS:
                conf[key] = value.strip()
        missing = SETUP_KEYS - set(conf)
        if missing:
            raise RuntimeError(f"setup printed no {sorted(missing)}:\n{printed}")
        return conf

    # -- node agents -----------------------------------------------------------------------------
    def node_env(self, node: str) -> dict[str, str]:
        return sg_env(SLURMGUARD_CONFIG=str(self.prefix / f"etc/slurmguard/nodes/{node}.toml"),
                      SLURMD_NODENAME=node, SLURM_CONF=str(self.conf_path),
                      LD_LIBRARY_PATH=str(self.libdir),
                      FAKE_NVML_CONFIG=str(self.node_dir(node) / "nvml.json"))

    def start_agent(self, node: str) -> None:
        log = open(self.node_dir(node) / "agent.log", "ab")
        p = subprocess.Popen([self.sg, "agent"], env=self.node_env(node), stdout=subprocess.PIPE,
                             stderr=log, start_new_session=True)
        log.close()
        line = p.stdout.readline() if p.stdout else b""
        if not line.startswith(b"ready"):
            _stop(p)
            raise RuntimeError(f"agent {node}: {(self.node_dir(node) / 'agent.log').read_text()[-2000:]}")
        self.agents[node] = p
        self._pidfile(f"agent-{node}", p.pid, "slurmguard")

    def restart_agent(self, node: str) -> None:
        _stop(self.agents.pop(node))
        self.start_agent(node)

    # -- faults --------------------------------------------------------------------------------
    def inject_xid(self, node: str, xid: int = 79) -> None:
        from fakehw.kmsg import inject_xid

        inject_xid(self.node_dir(node) / "kmsg", "0000:3a:00.0", xid, "GPU has fallen off the bus.")

    # The mount table the nodes' fs-mount reads (checks.fs.mountinfo): this host's, plus the
    # shared filesystem every node requires. Losing it on every node at once is one rewrite.
    def lose_shared_mount(self) -> None:
        _write_atomic(self.root / "mountinfo", Path("/proc/self/mountinfo").read_text())

    def restore_shared_mount(self, settle: bool = False) -> None:
        """The mount back; ``settle``: wait until no agent can answer from a view of the mount
        table read before (agent.max_age: until then an agent may, by design, and a check it
        answers fails again)."""
        line = f"9999 1 0:999 / {self.shared} rw,relatime shared:999 - nfs4 filer:/export rw\n"
        _write_atomic(self.root / "mountinfo", Path("/proc/self/mountinfo").read_text() + line)
        if settle and self.agents:
            time.sleep(AGENT_MAX_AGE + 1)

    def run_entry(self, hook: str, node: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The installed entry script of ``hook``, as slurmd runs it for ``node`` (its
        minimal environment: SLURMD_NODENAME only; the defaults file does the rest)."""
        name = {"healthcheck": "prolog/slurmguard-healthcheck", "prolog": "prolog/slurmguard-prolog",
                "epilog": "epilog/slurmguard-epilog"}[hook]
        return subprocess.run([self.entry(name)], env={"SLURMD_NODENAME": node, "SLURM_JOB_ID": "1"},
                              capture_output=True, text=True, timeout=timeout)

    # -- what it costs -------------------------------------------------------------------------
    def sdiag_reset(self) -> None:
        assert self.cluster is not None
        self.cluster.run("sdiag", "--reset", timeout=60)

    def sdiag(self) -> dict[str, footprint.RpcCount]:
        assert self.cluster is not None
        return footprint.parse_sdiag(self.cluster.run("sdiag", timeout=60).stdout)

    def slurmd_pids(self) -> list[int]:
        assert self.cluster is not None
        return [p for p in (self.cluster.slurmd_pid(n) for n in self.nodes) if p]

    def ctld_pid(self) -> int:
        assert self.cluster is not None and self.cluster._ctld is not None
        return self.cluster._ctld.pid

    def store_size_mb(self) -> float:
        import psycopg

        assert self.pg is not None
        db = self.store_url.rsplit("/", 1)[1]
        with psycopg.connect(f"host=127.0.0.1 port={self.pg.port} user=postgres dbname={db}") as c:
            return c.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20

    def drained(self) -> dict[str, str]:
        """Drained nodes -> reason, from one `sinfo` (cheap at 1,000 nodes)."""
        assert self.cluster is not None
        return {n.name: n.reason for n in self.cluster.cli().nodes() if n.drained}

    def undrain_all(self) -> None:
        assert self.cluster is not None
        from slurmguard.nodeset import fold

        drained = self.drained()
        real = sorted(n for n in drained if n not in set(self.emulated_nodes))
        if real:
            self.cluster.run("scontrol", "update", f"nodename={fold(real)}", "state=undrain",
                             timeout=120)
        emulated = sorted(set(drained) - set(real))
        if emulated:
            # Slurm 22.05 clears the DRAIN of an UNKNOWN+NOT_RESPONDING node but answers
            # "Invalid node state specified" (rc 1): checked by reading the nodes back.
            self.cluster.run("scontrol", "update", f"nodename={fold(emulated)}", "state=undrain",
                             timeout=120, check=False)
            left = sorted(set(self.drained()) & set(emulated))
            if left:
                raise RuntimeError(f"emulated nodes still drained after UNDRAIN: {fold(left)}")


_MIGRATE = threading.Lock()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def cleanup_previous(root: Path) -> list[int]:
    """Kill what an earlier harness on ``root`` left running (its pid files), remove it."""
    killed = []
    if root.exists():
        conf = str(root / "slurm" / "slurm" / "etc" / "slurm.conf")
        killed += kill_pidfiles(root / "slurm" / "slurm" / "run", conf)
        killed += kill_pidfiles(root / "pids", str(root))
        for pidfile in glob.glob(str(root / "slurm/slurm/run/*.pid")):
            os.unlink(pidfile)
        shutil.rmtree(root, ignore_errors=True)
    return killed
