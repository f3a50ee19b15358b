"""A real Slurm cluster on this machine for tests: munge, one slurmctld, N slurmd (`slurmd -N`).

Follows /work/shared/design/testbed.md section 1. Everything the cluster writes (slurm.conf,
state, spool, logs) lives under one temp dir; ports are picked free at start; every daemon
runs in the foreground (``-D``) as our own child in its own session, so teardown kills
exactly the process groups we started (never by name: other test sessions on the same
machine run their own clusters).

munge is the one shared piece: a working system munged is used as is; if none answers
``munge -n | unmunge`` we create the key if absent and start ``munged`` (as the munge user).
That munged is left running at teardown on purpose: other clusters on this machine may be
authenticating through it by then, and killing it would break them mid-test.

Example::

    c = Cluster.start(tmp_path, nodes=2)
    try:
        jid = c.sbatch("#!/bin/sh\\nhostname\\n")
        c.wait_job(jid)
    finally:
        c.stop()
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from support.ports import free_port_block  # noqa: F401  (re-exported: callers import it here)
from support.wait import WaitTimeout, wait_for

SBIN = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "munged": "/usr/sbin/munged"}
BIN = {t: f"/usr/bin/{t}" for t in ("scontrol", "sbatch", "squeue", "sinfo", "sacct", "scancel",
                                     "srun", "sdiag", "munge", "unmunge")}
MUNGE_KEY = Path("/etc/munge/munge.key")
# munged's threads (Debian's default is 2): a fleet-sized cluster's registration storm, a
# thousand slurmd signing at once, saturated 2 ("Munge encode failed: Resource temporarily
# unavailable"). .ci/run starts munged with the same.
MUNGED_ARGS = ("--num-threads=8",)
CPUS_PER_NODE = 2


# sbatch's words for a slurmctld too busy to answer in MessageTimeout.
_BUSY = ("Socket timed out on send/recv operation", "Unable to contact slurm controller")


class ClusterError(RuntimeError):
    """The test cluster did not reach the state a test needs (with the logs' tails attached)."""


def missing_components() -> list[str]:
    """Absolute paths of the daemons/clients the cluster needs that are not installed."""
    need = [SBIN["slurmctld"], SBIN["slurmd"], SBIN["munged"], BIN["scontrol"], BIN["sbatch"],
            BIN["munge"], BIN["unmunge"]]
    return [p for p in need if not os.access(p, os.X_OK)]


def munge_works() -> bool:
    """True when some munged answers on the default socket (`munge -n | unmunge`)."""
    try:
        cred = subprocess.run([BIN["munge"], "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        back = subprocess.run([BIN["unmunge"]], input=cred.stdout, capture_output=True, timeout=10)
        return back.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_munge(timeout: float = 15.0) -> None:
    """Make `munge -n | unmunge` work: create the key if absent, start munged if none answers."""
    if munge_works():
        return
    if os.geteuid() != 0:
        raise ClusterError("munged is not answering and we are not root to start it")
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
        os.makedirs(d, exist_ok=True)
        shutil.chown(d, "munge", "munge")
    # munged daemonizes; its starter exits at once. Another test session may start one at the
    # same moment: the loser fails on the socket lock, which is fine as long as one answers.
    subprocess.run(["/usr/sbin/runuser", "-u", "munge", "--", SBIN["munged"], *MUNGED_ARGS],
                   capture_output=True, timeout=timeout)
    wait_for(munge_works, timeout, interval=0.2, what="munged to answer `munge -n | unmunge`",
             error=ClusterError)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free right now on loopback (the kernel picks them)."""
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def kill_pidfiles(run_dir: str | os.PathLike[str], marker: str) -> list[int]:
    """Kill (SIGKILL) every process named by a ``*.pid`` file in ``run_dir`` whose command
    line holds ``marker`` (the conf path of the run that wrote it: a pid the kernel has given
    to another process since is left alone); remove the files. Returns the pids killed. A
    file's second line, when present, is its own marker (a daemon started elsewhere).

    What a harness calls at start on its fixed directory: a previous run cut short (a killed
    terminal, a timeout) left daemons holding its ports and memory."""
    killed = []
    for pidfile in sorted(Path(run_dir).glob("*.pid")):
        try:
            lines = pidfile.read_text().splitlines()
            pid = int(lines[0].split()[0])
            want = lines[1].strip() if len(lines) > 1 and lines[1].strip() else marker
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except (OSError, ValueError, IndexError):
            cmdline = ""
        if cmdline and want in cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        pidfile.unlink(missing_ok=True)
    return killed


def write_hook_script(path: str | os.PathLike[str], argv: Sequence[str],
                      env: Mapping[str, str] | None = None) -> str:
    """Write an executable /bin/sh wrapper that exports ``env`` and execs ``argv``.

    Slurm runs Prolog/Epilog/HealthCheckProgram with a minimal environment (no PYTHONPATH,
    no config path), so a test hook must carry what it needs. Returns the absolute path.
    """
    path = Path(path).resolve()
    lines = ["#!/bin/sh"]
    for key, value in (env or {}).items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def write_shell_hook(path: str | os.PathLike[str], body: str) -> str:
    """Write an executable /bin/sh script with ``body``; returns its absolute path."""
    path = Path(path).resolve()
    path.write_text("#!/bin/sh\n" + body.strip("\n") + "\n")
    path.chmod(0o755)
    return str(path)


class Cluster:
    """A running test cluster. Build with :meth:`start`; always :meth:`stop` it."""

    def __init__(self, root: Path, names: list[str], ctld_port: int, node_ports: dict[str, int],
                 node_env: Mapping[str, str] | None) -> None:
        self.root = root
        self.nodes = names
        self.ctld_port = ctld_port
        self.node_ports = node_ports
        self.conf_path = root / "etc" / "slurm.conf"
        self.logdir = root / "log"
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(self.conf_path)
        for k in list(self.env):
            # An outer job's variables would leak into sbatch/squeue defaults.
            if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_")) and k != "SLURM_CONF":
                del self.env[k]
        self._node_env = dict(node_env or {})
        self._ctld: subprocess.Popen[bytes] | None = None
        self._slurmd: dict[str, subprocess.Popen[bytes]] = {}
        self.slurm_section = {**{t: BIN[t] for t in ("scontrol", "sinfo", "squeue", "sacct",
                                                       "sbatch")}, "timeout": 20.0}
        self.startup_seconds = 0.0
        self.node_addrs: dict[str, str] = {}
        self.cluster_name = f"sg{ctld_port}"
        self.gpus_per_node = 0
        self.emulated: list[str] = []  # node entries without a slurmd (``start(emulated=)``)
        self.emulated_port = 0

    # -- life cycle ----------------------------------------------------------------------------
    @classmethod
    def start(cls, tmpdir: str | os.PathLike[str], nodes: int = 4, *, prolog: str | None = None,
              epilog: str | None = None, prolog_slurmctld: str | None = None,
              health_check_program: str | None = None, health_check_interval: int = 0,
              slurmd_timeout: int = 10, extra_conf: Iterable[str] = (), gpu_partition: str = "",
              node_env: Mapping[str, str] | None = None, wait: bool = True,
              timeout: float = 60.0, accounting: Any = None,
              node_addrs: Mapping[str, str] | None = None,
              port_base: int | None = None, gpus_per_node: int = 0,
              emulated: int = 0, wave: int = 0) -> Cluster:
        """Write slurm.conf under ``tmpdir``, start slurmctld and ``nodes`` slurmd, wait idle.

        Hooks are absolute paths of executables (see :func:`write_hook_script`).
        ``extra_conf`` lines are appended to slurm.conf (later lines win in Slurm).
        ``accounting``: a running :class:`slurmdbd.SlurmDBD` to record jobs in (``sacct``
        then answers); by default accounting is off, which costs the other tests nothing.
        ``node_addrs``: a NodeAddr per node (127.0.0.2, 127.0.0.3, ...: every slurmd listens
        on all of loopback), so nodes of this one machine have distinct addresses, as the
        node-identity tests need; by default every node is at localhost.
        ``wave``: start the slurmd this many at a time, each wave once the ones before have
        registered (a fleet-sized start on one host: every slurmd registering at once, with its
        first health check, saturates munged and the CPUs); 0: all at once.
        ``port_base``: slurmctld on that port, node i on port_base + i (a fleet-sized cluster:
        a block below the kernel's ephemeral range, see :func:`free_port_block`); by default
        such a block handed out here.
        ``emulated``: that many more node entries (n{nodes+1}...) in slurm.conf and the
        partition, with no slurmd (support/nodetraffic.py answers for them toward serve): at
        localhost like the others, on the block's last port, where nothing listens, so
        slurmctld's pings are refused at once. Slurm marks them NOT_RESPONDING, then DOWN
        (docs/scale.md "Emulated nodes"); the waits here wait for the real ones only.
        """
        t0 = time.monotonic()
        ensure_munge()
        root = Path(tmpdir).resolve() / "slurm"
        for sub in ("etc", "state", "spool", "log", "run"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        names = [f"n{i}" for i in range(1, nodes + 1)]
        # Handed out host-wide, below the kernel's ephemeral range (support/ports.py): ports
        # the kernel picked collided with other sessions' outgoing connections (bind failed
        # with EADDRINUSE beside 28,500 sockets in TIME_WAIT).
        base = free_port_block(nodes + 1 + bool(emulated)) if port_base is None else port_base
        ports = list(range(base, base + nodes + 1))
        c = cls(root, names, ports[0], dict(zip(names, ports[1:], strict=True)), node_env)
        c.emulated = [f"n{i}" for i in range(nodes + 1, nodes + emulated + 1)]
        c.emulated_port = base + nodes + 1
        c.node_addrs = dict(node_addrs or {})
        c.gpus_per_node = gpus_per_node
        if gpus_per_node:  # slurmd counts a GPU per file (a count alone reads as 0 here)
            (root / "dev").mkdir(exist_ok=True)
            for i in range(gpus_per_node):
                (root / "dev" / f"nvidia{i}").touch()
            (root / "etc" / "gres.conf").write_text(
                f"Name=gpu File={root}/dev/nvidia[0-{gpus_per_node - 1}]\n")
        acct = list(accounting.slurm_conf_lines()) if accounting is not None else []
        if accounting is not None and gpus_per_node:  # slurmctld refuses it without slurmdbd
            acct.append("AccountingStorageTRES=gres/gpu")
        if accounting is not None:  # one slurmdbd, many clusters: a name of its own
            c.cluster_name = accounting.cluster_name(c.cluster_name)
        c.conf_path.write_text(c._conf(prolog=prolog, epilog=epilog,
                                       prolog_slurmctld=prolog_slurmctld,
                                       health_check_program=health_check_program,
                                       health_check_interval=health_check_interval,
                                       slurmd_timeout=slurmd_timeout,
                                       extra=[*acct, *extra_conf], gpu_partition=gpu_partition))
        try:
            c._start_ctld()
            for k in range(0, len(names), wave or len(names) or 1):
                for n in names[k:k + (wave or len(names))]:
                    c.start_slurmd(n)
                if wave and k + wave < len(names):
                    c._wait_registered(names[:k + wave], timeout)
            if wait:
                c.wait_nodes_idle(timeout)
        except BaseException:
            c.stop()
            raise
        c.startup_seconds = time.monotonic() - t0
        return c

    def _conf(self, *, prolog: str | None, epilog: str | None, prolog_slurmctld: str | None,
              health_check_program: str | None, health_check_interval: int, slurmd_timeout: int,
              extra: list[str], gpu_partition: str = "") -> str:
        r = self.root
        lines = [
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge",
            "CryptoType=crypto/munge",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            # The config is the truth for CPUs/memory: no "Low RealMemory" drains on CI boxes.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "JobRequeue=1",
            "SchedulerParameters=nohold_on_prolog_fail",
            f"SlurmdTimeout={slurmd_timeout}",
            "SlurmctldTimeout=30",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=600",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
        ]
        if prolog:
            lines.append(f"Prolog={prolog}")
        if epilog:
            lines.append(f"Epilog={epilog}")
        if prolog_slurmctld:
            lines.append(f"PrologSlurmctld={prolog_slurmctld}")
        if health_check_program:
            lines.append(f"HealthCheckProgram={health_check_program}")
            lines.append(f"HealthCheckInterval={health_check_interval}")
            lines.append("HealthCheckNodeState=ANY")
        gres = f"Gres=gpu:{self.gpus_per_node} " if self.gpus_per_node else ""
        if gres:
            lines.append("GresTypes=gpu")
        for n in self.nodes:
            addr = f"NodeAddr={self.node_addrs[n]} " if n in self.node_addrs else ""
            lines.append(f"NodeName={n} NodeHostname=localhost {addr}Port={self.node_ports[n]} "
                         f"CPUs={CPUS_PER_NODE} RealMemory=1000 {gres}Feature=sgtest "
                         "State=UNKNOWN")
        if self.emulated:  # one line for all: n[1025-10000]
            from slurmguard.nodeset import fold

            lines.append(f"NodeName={fold(self.emulated)} NodeHostname=localhost "
                         f"Port={self.emulated_port} CPUs={CPUS_PER_NODE} RealMemory=1000 "
                         f"{gres}Feature=sgtest State=UNKNOWN")
        # gpu_partition: more options of the default partition (e.g. "PriorityTier=10").
        lines.append(f"PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP {gpu_partition}".rstrip())
        lines.extend(extra)
        return "\n".join(lines) + "\n"

    def _daemon_env(self) -> dict[str, str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(self.conf_path)}
        env.update(self._node_env)
        return env

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=self._daemon_env(),
                                    start_new_session=True, cwd=self.root)

    def _start_ctld(self) -> None:
        self._ctld = self._spawn([SBIN["slurmctld"], "-D", "-i", "-f", str(self.conf_path)],
                                 self.logdir / "slurmctld.stdout")
        ctld = self._ctld

        def answers_ping() -> bool:
            if ctld.poll() is not None:
                raise ClusterError("slurmctld exited at start:\n" + self.log_tail("slurmctld.log"))
            return "UP" in self.run("scontrol", "ping", check=False, timeout=10).stdout

        wait_for(answers_ping, 30, interval=0.2, what="slurmctld to answer ping",
                 error=lambda msg: ClusterError(f"{msg}\n" + self.log_tail("slurmctld.log")))

    def start_slurmd(self, node: str, *, fresh_boot: bool = False) -> None:
        """Start (or restart) the slurmd of ``node``. ``fresh_boot``: in a new time namespace
        whose boot time is now (``unshare --time --boottime``), so slurmctld sees the node
        rebooted: what a test RebootProgram needs for Slurm's reboot to complete."""
        (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        old = self._slurmd.get(node)
        if old is not None and old.poll() is None:
            raise ClusterError(f"slurmd of {node} is already running (pid {old.pid})")
        wrap: list[str] = []
        if fresh_boot:
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            wrap = ["/usr/bin/unshare", "--time", f"--boottime=-{int(uptime)}"]
        self._slurmd[node] = self._spawn(
            [*wrap, SBIN["slurmd"], "-D", "-N", node, "-f", str(self.conf_path)],
            self.logdir / f"slurmd-{node}.stdout")

    def kill_slurmd(self, node: str, sig: int = signal.SIGKILL) -> None:
        """Kill ``node``'s slurmd (process group) as a crashed node would die."""
        proc = self._slurmd.get(node)
        if proc is None or proc.poll() is not None:
            return
        _killpg(proc, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _killpg(proc, signal.SIGKILL)
            proc.wait(timeout=10)

    def slurmd_pid(self, node: str) -> int | None:
        proc = self._slurmd.get(node)
        return proc.pid if proc is not None and proc.poll() is None else None

    def stop(self) -> None:
        """Cancel jobs, `scontrol shutdown`, then kill the process groups we started."""
        if self._ctld is not None and self._ctld.poll() is None:
            for args in (("scancel", "--full", "--quiet", "--user=root"), ("scontrol", "shutdown")):
                try:
                    self.run(*args, check=False, timeout=10)
                except subprocess.TimeoutExpired:
                    # A slurmctld too busy to answer (512 nodes under load left a cluster
                    # running when this raised): the kills below stop it all the same.
                    pass
        procs = [p for p in [self._ctld, *self._slurmd.values()] if p is not None]
        deadline = time.monotonic() + 3  # state is thrown away: no need for a clean exit
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            # The group also holds slurmstepd and job processes forked by our slurmd.
            _killpg(p, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # slurmstepd detaches into its own session, and it or its job can outlive a killed
        # slurmd; they inherit SLURM_CONF=<our conf>, which names them as ours exactly.
        def no_strays() -> bool:
            strays = self._stray_pids()
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return not strays

        try:
            wait_for(no_strays, 5, interval=0.1, what="stray job processes to die")
        except WaitTimeout:
            pass  # teardown does its best; the next cluster uses its own ports and dirs
        self._ctld = None
        self._slurmd.clear()

    def _stray_pids(self) -> list[int]:
        marker = f"SLURM_CONF={self.conf_path}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if marker in fh.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
        return pids

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------------
    def run(self, tool: str, *args: str, check: bool = True, timeout: float = 30,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (scontrol, sbatch, ...) by absolute path against this cluster."""
        r = subprocess.run([BIN[tool], *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise ClusterError(f"{tool} {' '.join(args)}: rc={r.returncode}: {r.stderr.strip()}")
        return r

    def sbatch(self, script_text: str, *args: str, timeout: float = 30, retries: int = 3) -> str:
        """Submit a batch script (text); returns the job id as a string. A submission that
        slurmctld was too busy to answer (sbatch's "Socket timed out", "Unable to contact")
        is tried again up to ``retries`` times, 5 s apart: the scale harness's 512 submissions
        at 1,024 nodes met it. (If the lost answer's job was made, it runs unnamed.)"""
        script = self.root / f"job-{time.monotonic_ns()}.sh"
        script.write_text(script_text if script_text.startswith("#!") else
                          "#!/bin/sh\n" + script_text)
        for attempt in range(retries + 1):
            try:
                r = self.run("sbatch", "--parsable", f"--chdir={self.root}",
                             f"--output={self.root}/log/job-%j.out", *args, str(script),
                             timeout=timeout)
                return r.stdout.strip().split(";")[0]
            except ClusterError as exc:
                busy = any(m in str(exc) for m in _BUSY)
                if not busy or attempt == retries:
                    raise
                time.sleep(5)
        raise AssertionError("unreachable")

    def job(self, job_id: str | int) -> dict[str, str]:
        """`scontrol show job -o` of one job as a dict (through the adapter's parser)."""
        from slurmguard.adapters.slurm.commands import parse_show_job_oneliner

        r = self.run("scontrol", "show", "job", "-o", str(job_id))
        jobs = parse_show_job_oneliner(r.stdout)
        if not jobs:
            raise ClusterError(f"no job {job_id}")
        return jobs[0]

    def wait_job(self, job_id: str | int, states: Iterable[str] = ("COMPLETED",),
                 timeout: float = 60, check: bool = True) -> dict[str, str]:
        """Wait until the job's JobState is one of ``states``; returns its fields."""
        want = {s.upper() for s in states}
        last: dict[str, str] = {}

        def in_state() -> dict[str, str] | None:
            nonlocal last
            try:
                last = self.job(job_id)
            except ClusterError:
                last = {}
            return last if last.get("JobState") in want else None

        try:
            return wait_for(in_state, timeout, interval=0.3, what=f"job {job_id} in {sorted(want)}")
        except WaitTimeout:
            if not check:
                return last
        raise ClusterError(f"job {job_id} not in {sorted(want)} after {timeout}s: "
                           f"JobState={last.get('JobState')} Reason={last.get('Reason')}\n"
                           + self.log_tail("slurmctld.log"))

    def node(self, name: str) -> Any:
        """The node with every field Slurm has (``SlurmCLI.node_record``: Comment, BootTime,
        ...; the adapter's own one-node read, ``node``, carries only what it acts on)."""
        return self.cli().node_record(name)

    def cli(self) -> Any:
        """A :class:`SlurmCLI` bound to this cluster (env carries SLURM_CONF)."""
        from slurmguard.adapters.slurm.commands import SlurmCLI

        return SlurmCLI(self.slurm_section, env=self.env)

    def wait_node(self, name: str, pred: Any, timeout: float = 60, what: str = "") -> Any:
        """Poll ``self.node(name)`` until ``pred(info)`` holds; returns the NodeInfo."""
        info = None

        def matches() -> Any:
            nonlocal info
            info = self.node(name)
            return info if pred(info) else None

        return wait_for(matches, timeout, interval=0.3, what=f"node {name} {what}".rstrip(),
                        error=lambda _: ClusterError(
                            f"node {name} not {what or 'as expected'} after {timeout}s: {info}"))

    @property
    def _poll_s(self) -> float:
        """How often a wait reads the node table: every 0.2 s on a test-sized cluster, every
        2 s on a fleet-sized one (a full read of 10,000 entries is 5.7 MB of text)."""
        return 0.2 if len(self.nodes) + len(self.emulated) <= 256 else 2.0

    def _wait_registered(self, names: list[str], timeout: float) -> None:
        """Until at most a tenth of ``names`` is still unregistered, UNKNOWN or not responding
        (the start's waves); past ``timeout`` the start goes on, and wait_nodes_idle judges
        the whole fleet."""
        want = set(names)

        def registered() -> bool:
            try:
                late = [n for n in self.cli().nodes() if n.name in want
                        and ("NOT_RESPONDING" in n.flags or n.state == "unknown")]
            except Exception:  # slurmctld busy: try again
                return False
            return len(late) <= len(want) // 10

        try:
            wait_for(registered, timeout, interval=self._poll_s, what="a wave registered",
                     error=ClusterError)
        except ClusterError:
            pass

    def wait_nodes_idle(self, timeout: float = 60) -> None:
        """Wait until every node is idle with no flags at all (also not NOT_RESPONDING, which
        a fresh slurmctld sets on every node until its first ping answer); the real nodes
        only (the emulated ones never answer)."""
        nodes: list[Any] = []
        real = set(self.nodes)

        def all_idle() -> bool:
            nonlocal nodes
            try:
                nodes = [n for n in self.cli().nodes() if n.name in real]
            except Exception:  # slurmctld still coming up: retry until the deadline
                nodes = []
            return len(nodes) == len(self.nodes) and all(
                n.state == "idle" and not n.flags for n in nodes)

        wait_for(all_idle, timeout, interval=self._poll_s, what="every node idle",
                 error=lambda _: ClusterError(f"nodes not idle after {timeout}s: {nodes}\n"
                                              + self.log_tail("slurmctld.log")))

    def log(self, path: str) -> str:
        """Text of a log file under the cluster's log dir (e.g. "slurmctld.log")."""
        p = self.logdir / path
        return p.read_text(errors="replace") if p.exists() else ""

    def log_tail(self, path: str, lines: int = 30) -> str:
        return "\n".join(self.log(path).splitlines()[-lines:])


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # pgid == pid: we started it with start_new_session
    except (ProcessLookupError, PermissionError):
        pass
