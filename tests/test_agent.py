"""The resident agent and the thin hook client, as real processes.

One agent (a real `slurmguard agent` subprocess holding the stand-in NVML open, following the
kernel-log fixture) and the real compiled client from prolog/, built here with its Makefile.
For every fault the stand-in NVML and the fixtures can inject, the client-through-agent path
and the in-process `slurmguard prolog` give the same verdict, reason, results and applied
action. The client's fallback is shown against the faults it exists for: agent killed
mid-answer, socket removed, agent SIGSTOPped, an agent answering for another boot, garbage.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from fakehw.kmsg import inject_xid, write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config, with_fault, write_config
from fakehw.sysfs import write_cpus, write_ib_fabric, write_ib_port, write_meminfo
from support.acceptloop import AcceptLoop
from support.helpers import REPO, require, sg_argv, sg_env, standin_slurm
from support.wait import counter_advanced, wait_for

from slurmguard.node import agent as agent_mod

GPU2 = "0000:3a:00.0"
BUDGET = 8.0
# The client's timeout: generous where the agent must answer (a loaded CI machine), short
# where a test makes the agent hang on purpose (the in-process run then gets what is left).
ASK_TIMEOUT = "6"
HUNG_TIMEOUT = "1.5"


def build_clients(dest: Path) -> Path:
    require(shutil.which("gcc") is not None and shutil.which("make") is not None,
            "gcc and make build the agent client")
    build = dest / "prolog"
    shutil.copytree(REPO / "prolog", build, ignore=shutil.ignore_patterns("slurmguard-*-client"))
    r = subprocess.run(["make", "-C", str(build), "slurmguard-agent-client"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return build / "slurmguard-agent-client"


class Node:
    """One simulated GPU node: NVML json, kernel log, sysfs/procfs fixtures, config."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.libdir = build_fake_nvml(root / "fakenvml")
        self.nvml = root / "nvml.json"
        write_config(self.nvml, default_config(8))
        self.gpus = write_gpu_tree(root / "gpus")
        self.kmsg = root / "kmsg"
        self.kmsg.write_text("")
        self.boot = root / "boot_id"
        self.boot.write_text("5b1c0a7e-0000-4000-8000-000000000001\n")
        self.ib = write_ib_fabric(root / "ib", 2)
        self.proc = root / "proc"
        self.sys = root / "sys"
        write_meminfo(self.proc, 2 * 1024 * 1024 * 1024)  # 2 TiB in KiB
        write_cpus(self.sys, "0-127")
        self.state = root / "state"
        self.sock = root / "run" / "agent.sock"
        self.config = root / "sg.toml"
        self.write_config()

    def write_config(self, mounts: tuple[str, ...] = ("/",)) -> None:
        # Atomically: the running agent notices the change and reloads it.
        tmp = self.config.with_name(".sg.toml.tmp")
        tmp.write_text(f"""
[slurm]
{standin_slurm(self.root, "n7")}
[hooks]
state_dir = "{self.state}"
budget = {BUDGET}
check_timeout = 3.0
log_file = "{self.root}/hooks.log"
[agent]
socket = "{self.sock}"
max_age = 0.0
refresh = 1.0
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
file = "{self.kmsg}"
nvidia_proc_root = "{self.gpus}"
boot_id_path = "{self.boot}"
[checks.ib]
sysfs_root = "{self.ib}"
expected_count = 2
[checks.host]
proc_root = "{self.proc}"
sys_root = "{self.sys}"
expected_memory_gib = 2048.0
expected_cpus = 128
[checks.fs]
mounts = {json.dumps(list(mounts))}
dirs = ["/tmp"]
""")
        os.replace(tmp, self.config)

    def env(self, **extra: str) -> dict[str, str]:
        return sg_env(SLURMGUARD_CONFIG=str(self.config), SLURMD_NODENAME="n7",
                      LD_LIBRARY_PATH=str(self.libdir), FAKE_NVML_CONFIG=str(self.nvml),
                      SLURMGUARD_AGENT_SOCKET=str(self.sock),
                      SLURMGUARD_BOOT_ID_PATH=str(self.boot),
                      **{"SLURMGUARD_AGENT_TIMEOUT": ASK_TIMEOUT, **extra})

    def reset_state(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)


class AgentProc:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.log = node.root / "agent.log"
        self.proc = subprocess.Popen(sg_argv("agent", "--node", "n7"), env=node.env(),
                                     stdout=subprocess.PIPE, stderr=open(self.log, "ab"),
                                     text=True, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("ready"):
            self.stop()
            raise RuntimeError(f"agent did not start: {line!r} {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:
    return build_clients(tmp_path_factory.mktemp("clients"))


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    return Node(tmp_path_factory.mktemp("node"))


@pytest.fixture(scope="module")
def agent(node):
    a = AgentProc(node)
    yield a
    a.stop()


def in_process(node: Node, hook: str = "prolog") -> subprocess.CompletedProcess[str]:
    return subprocess.run(sg_argv(hook, "--json"), env=node.env(), capture_output=True,
                          text=True, timeout=60)


def via_client(client: Path, node: Node, hook: str = "prolog", **env: str) -> subprocess.CompletedProcess[str]:
    argv = [str(client), hook, "--json", "--", *sg_argv(hook, "--json")]
    return subprocess.run(argv, env=node.env(**env), capture_output=True, text=True, timeout=60)


def agent_status(node: Node) -> dict:
    """The agent's `SGA1 status` answer (no hook runs)."""
    raw = agent_mod.ask(str(node.sock), f"{agent_mod.PROTO} status", 5.0).decode()
    head, _, rest = raw.partition("\n")
    return json.loads(rest[:int(head.split()[3])])


def background_passes(node: Node) -> int:
    return int(agent_status(node)["passes"]["background"])


def summary(p: subprocess.CompletedProcess[str]) -> dict:
    rec = json.loads(p.stdout)
    return {"exit": p.returncode, "decision": rec["decision"], "applied": rec["applied"],
            "results": [(r["name"], r["health"], r["reason"]) for r in rec["results"]]}


def both(client: Path, node: Node, hook: str = "prolog") -> tuple[dict, dict, subprocess.CompletedProcess[str]]:
    node.reset_state()
    ours = in_process(node, hook)
    node.reset_state()
    theirs = via_client(client, node, hook)
    assert "agent not used" not in theirs.stderr, theirs.stderr
    assert "agent" in json.loads(theirs.stdout), "answer did not come from the agent"
    return summary(ours), summary(theirs), theirs


def _nvml(**gpu2: object):
    return lambda n: write_config(n.nvml, with_fault(default_config(8), 2, **gpu2))


def _whole_nvml(**top: object):
    def apply(n: Node) -> None:
        cfg = default_config(8)
        cfg.update(top)
        write_config(n.nvml, cfg)
    return apply


def _xid(code: int, msg: str, times: int = 1):
    def apply(n: Node) -> None:
        for _ in range(times):
            inject_xid(n.kmsg, GPU2, code, msg)
    return apply


def _ib_down(n: Node) -> None:
    write_ib_port(n.ib, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")


def _mem_low(n: Node) -> None:
    write_meminfo(n.proc, 1024 * 1024 * 1024)


def _cpus_off(n: Node) -> None:
    write_cpus(n.sys, "0-63", "0-127")


def _missing_mount(n: Node) -> None:
    n.write_config(("/", "/nonexistent-scratch"))


def _healthy(n: Node) -> None:
    pass


FAULTS = {
    "healthy": _healthy,
    "gpu-off-bus": _nvml(off_bus=True),
    "gpu-lost": _nvml(lost=True),
    "gpu-handle-unknown-error": _nvml(errors={"handle": "UNKNOWN"}),
    "ecc-uncorrected": _nvml(ecc={"volatile_uncorrected": 3}),
    "ecc-disabled": _nvml(ecc_mode=False),
    "remap-pending": _nvml(remapped_rows={"pending": True}),
    "remap-failure": _nvml(remapped_rows={"failure": True, "uncorrectable": 9}),
    "too-hot": _nvml(temperature=95),
    "hw-slowdown": _nvml(clocks_event_reasons=0x40),
    "nvlink-down": _nvml(nvlink=[True] * 17 + [False]),
    "pcie-narrow": _nvml(pcie={"width": 8}),
    "field-error": _nvml(errors={"temperature": "UNKNOWN"}),
    "nvml-init-error": _whole_nvml(init_error="UNKNOWN"),
    "driver-not-loaded": _whole_nvml(init_error="DRIVER_NOT_LOADED"),
    "xid-79": _xid(79, "GPU has fallen off the bus."),
    "xid-13-app-error-x3": _xid(13, "Graphics SM Warp Exception on (GPC 0, TPC 0)", 3),
    "xid-48-dbe": _xid(48, "An uncorrectable double bit error (DBE) has been detected."),
    "ib-port-down": _ib_down,
    "memory-missing": _mem_low,
    "cpus-offline": _cpus_off,
    "mount-missing": _missing_mount,
}


@pytest.mark.parametrize("hook", ["prolog", "epilog", "healthcheck"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_agent_and_in_process_agree(client, node, agent, fault, hook):
    """The equivalence table: same exit, verdict, reason, results and applied action."""
    FAULTS[fault](node)
    try:
        ours, theirs, _ = both(client, node, hook)
        assert theirs == ours
        if fault != "healthy" and hook == "healthcheck":  # the fault was really seen
            assert ours["decision"]["action"] != "pass" or any(
                h != "healthy" for _, h, _ in ours["results"]), ours
    finally:
        write_config(node.nvml, default_config(8))
        node.kmsg.write_text("")
        write_ib_fabric(node.ib, 2)
        write_meminfo(node.proc, 2 * 1024 * 1024 * 1024)
        write_cpus(node.sys, "0-127")
        node.write_config()


def test_epilog_sees_the_jobs_leftover_process_live(client, node, agent):
    """The request carries SLURM_JOB_ID/UID: the epilog's /proc scan is live in the agent (a
    cached one would miss, or invent, the finished job's processes), same verdict as in-process."""
    from fakehw.sysfs import write_proc

    write_proc(node.proc, 4242, 5001, "python3", state="D", job_id="77")
    try:
        env = {"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "5001"}
        node.reset_state()
        ours = summary(subprocess.run(sg_argv("epilog", "--json"), env=node.env(**env),
                                      capture_output=True, text=True, timeout=60))
        node.reset_state()
        p = via_client(client, node, "epilog", **env)
        assert "agent not used" not in p.stderr, p.stderr
        theirs = summary(p)
        assert theirs == ours
        assert ours["decision"]["action"] == "drain"
        assert ours["decision"]["reason"].startswith("slurmguard: host-leftover-procs"), ours
        assert json.loads(p.stdout)["agent"]["ages"]["procs"] == 0.0
    finally:
        shutil.rmtree(node.proc / "4242", ignore_errors=True)


def test_answer_carries_source_ages_and_boot_id(client, node, agent):
    p = via_client(client, node)
    rec = json.loads(p.stdout)
    info = rec["agent"]
    assert info["boot_id"] == node.boot.read_text().strip()
    assert set(info["ages"]) >= {"nvml", "kmsg", "fs", "host", "ib"}
    assert info["ages"]["nvml"] == 0.0 and info["ages"]["kmsg"] == 0.0
    assert all(age <= 0.0 + 1e-9 or age <= 10 for age in info["ages"].values())


def test_xid_injected_1ms_before_the_ask_is_seen(client, node, agent):
    node.reset_state()
    try:
        inject_xid(node.kmsg, GPU2, 79, "GPU has fallen off the bus.")
        time.sleep(0.001)  # the scenario: the line is 1 ms old when the prolog asks
        p = via_client(client, node)
        assert "agent not used" not in p.stderr, p.stderr
        assert p.returncode == 1
        reason = json.loads(p.stdout)["decision"]["reason"]
        assert reason.startswith("slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79"), reason
    finally:
        node.kmsg.write_text("")
        node.reset_state()


def test_nvml_xid_event_reaches_the_answer(client, node, agent):
    write_config(node.nvml, with_fault(default_config(8), 2, xid_events=[79]))
    try:
        events = wait_for(lambda: json.loads(via_client(client, node).stdout)["agent"]["xid_events"],
                          timeout=20, what="an NVML Xid event in the agent's answer")
        assert events and events[-1]["gpu"] == 2 and events[-1]["xid"] == 79, events
    finally:
        write_config(node.nvml, default_config(8))


def test_background_values_are_reused_within_max_age(client, tmp_path):
    n = Node(tmp_path / "n")
    text = n.config.read_text().replace("max_age = 0.0", "max_age = 30.0")
    (n.root / "new.toml").write_text(text)
    os.replace(n.root / "new.toml", n.config)
    a = AgentProc(n)
    try:
        def cached_ages() -> dict | None:
            ages = json.loads(via_client(client, n).stdout)["agent"]["ages"]
            return ages if ages.get("fs", 0) > 0 and ages.get("ib", 0) > 0 else None

        ages = wait_for(cached_ages, timeout=20, what="fs and ib served from the agent's cache")
        assert 0 < ages["fs"] <= 30 and 0 < ages["ib"] <= 30, ages
        assert ages["nvml"] == 0.0
    finally:
        a.stop()


def test_status_reports_rounds_and_runs_no_hook(node, agent):
    """`SGA1 status` answers who the agent is and its loop rounds, without running a hook."""
    log = node.root / "hooks.log"
    before = log.read_text() if log.exists() else ""
    status = agent_status(node)
    assert status["node"] == "n7" and status["boot_id"] == node.boot.read_text().strip()
    assert status["passes"]["healthcheck"] == 0  # healthcheck_interval is 0 here
    now = counter_advanced(lambda: background_passes(node), timeout=30, what="background round")
    assert now > status["passes"]["background"]
    assert (log.read_text() if log.exists() else "") == before


def test_agent_runs_no_hook_on_its_own_schedule(node, agent):
    """Between asks the agent reads, but never runs a hook (so never drains): no log line."""
    before = (node.root / "hooks.log").read_text() if (node.root / "hooks.log").exists() else ""
    write_config(node.nvml, with_fault(default_config(8), 2, off_bus=True))
    try:
        # Three background rounds (agent.refresh = 1 s), counted by the agent itself.
        counter_advanced(lambda: background_passes(node), by=3, timeout=30,
                         what="background rounds")
        after = (node.root / "hooks.log").read_text() if (node.root / "hooks.log").exists() else ""
        assert after == before
    finally:
        write_config(node.nvml, default_config(8))


def test_healthcheck_interval_makes_the_agent_the_healthcheck(tmp_path):
    n = Node(tmp_path / "n")
    text = n.config.read_text().replace("refresh = 1.0", "refresh = 1.0\nhealthcheck_interval = 0.5")
    (n.root / "new.toml").write_text(text)
    os.replace(n.root / "new.toml", n.config)
    write_config(n.nvml, with_fault(default_config(8), 2, off_bus=True))
    a = AgentProc(n)
    try:
        log = n.root / "hooks.log"
        wait_for(lambda: log.exists() and "healthcheck node=n7 drain:" in log.read_text(),
                 timeout=30, what="a scheduled healthcheck's drain in hooks.log")
        assert "healthcheck node=n7 drain: slurmguard: gpu-count" in log.read_text()
        assert "scheduled " in a.log.read_text()
    finally:
        a.stop()


def test_config_change_is_seen_at_once_despite_the_cache(client, tmp_path):
    """max_age 30 s, fs cached: a new mount in the config is checked by the very next hook
    (values gathered under an older config are never used)."""
    n = Node(tmp_path / "n")
    text = n.config.read_text().replace("max_age = 0.0", "max_age = 30.0")
    (n.root / "new.toml").write_text(text)
    os.replace(n.root / "new.toml", n.config)
    a = AgentProc(n)
    try:
        wait_for(lambda: json.loads(via_client(client, n).stdout)["agent"]["ages"].get("fs", 0),
                 timeout=20, what="fs served from the cache")
        text = n.config.read_text().replace('mounts = ["/"]', 'mounts = ["/", "/nonexistent-scratch"]')
        (n.root / "new.toml").write_text(text)
        os.replace(n.root / "new.toml", n.config)
        p = via_client(client, n)
        assert "agent not used" not in p.stderr
        assert json.loads(p.stdout)["decision"]["reason"].startswith(
            "slurmguard: fs-mount: /nonexistent-scratch is not mounted"), p.stdout[-500:]
    finally:
        a.stop()


# -- faults of the agent itself: the hook still ends in budget with the right verdict ----------

class FakeAgent:
    """A unix-socket server that answers with ``reply(request)`` (bytes), then closes."""

    def __init__(self, path: Path, reply) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(8)
        self.reply = reply
        self.loop = AcceptLoop(sock, self._one)

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            try:
                conn.sendall(self.reply(data.decode()))
            except OSError:
                pass

    def close(self) -> None:
        self.loop.close()
        self.path.unlink(missing_ok=True)


def _boot(node: Node) -> str:
    return node.boot.read_text().strip()


def fallback_ok(p: subprocess.CompletedProcess[str], elapsed: float, why: str) -> dict:
    assert "agent not used" in p.stderr and why in p.stderr, p.stderr
    # hooks.budget, plus the watchdog's 0.5 s backstop and the process exit
    assert elapsed < BUDGET + 1.0, f"hook took {elapsed:.2f}s, budget {BUDGET}s"
    rec = json.loads(p.stdout)
    assert "agent" not in rec  # the in-process run answered
    return rec


@pytest.mark.parametrize("case", ["killed-mid-answer", "stale-boot-id", "garbage", "bad-exit-code"])
def test_misbehaving_agent_falls_back_without_drain(client, tmp_path, case):
    n = Node(tmp_path / "n")
    boot = _boot(n)
    replies = {
        "killed-mid-answer": lambda req: f"SGA1 1 {boot} 500 0\n{{\"decision\": ".encode(),
        "stale-boot-id": lambda req: (b"SGA1 1 0ther-b00t 2 0\n{}" + b"SGA1 END\n"),
        "garbage": lambda req: b"HTTP/1.1 200 OK\r\n\r\n",
        "bad-exit-code": lambda req: f"SGA1 7 {boot} 0 0\nSGA1 END\n".encode(),
    }
    why = {"killed-mid-answer": "cut short", "stale-boot-id": "answered for boot 0ther-b00t",
           "garbage": "malformed answer header", "bad-exit-code": "exit code 7"}[case]
    fake = FakeAgent(n.sock, replies[case])
    try:
        t0 = time.monotonic()
        p = via_client(client, n)
        rec = fallback_ok(p, time.monotonic() - t0, why)
        assert p.returncode == 0 and rec["decision"]["action"] == "pass"
        assert rec["applied"] == "none"  # healthy node: nothing drained
    finally:
        fake.close()


def test_agent_sigkilled_socket_removed_and_sigstopped(client, tmp_path):
    n = Node(tmp_path / "n")
    # Node fault present all along: every fallback must still find it (exit 1, same reason).
    write_config(n.nvml, with_fault(default_config(8), 2, off_bus=True))
    a = AgentProc(n)
    try:
        good = via_client(client, n)
        assert good.returncode == 1 and "agent not used" not in good.stderr
        reason = json.loads(good.stdout)["decision"]["reason"]

        os.killpg(a.proc.pid, signal.SIGSTOP)  # hung agent: the client's timeout, then in-process
        t0 = time.monotonic()
        p = via_client(client, n, SLURMGUARD_AGENT_TIMEOUT=HUNG_TIMEOUT)
        rec = fallback_ok(p, time.monotonic() - t0, "no whole answer within 1.50s")
        assert p.returncode == 1 and rec["decision"]["reason"] == reason
        os.killpg(a.proc.pid, signal.SIGCONT)

        os.killpg(a.proc.pid, signal.SIGKILL)  # dead agent, its socket file left behind
        a.proc.wait(10)
        t0 = time.monotonic()
        p = via_client(client, n)
        rec = fallback_ok(p, time.monotonic() - t0, "Connection refused")
        assert p.returncode == 1 and rec["decision"]["reason"] == reason

        n.sock.unlink()  # socket removed
        t0 = time.monotonic()
        p = via_client(client, n)
        rec = fallback_ok(p, time.monotonic() - t0, "No such file or directory")
        assert p.returncode == 1 and rec["decision"]["reason"] == reason
    finally:
        a.stop()


def test_second_agent_on_the_same_socket_is_refused(node, agent):
    p = subprocess.run(sg_argv("agent", "--node", "n7"), env=node.env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip().endswith("another agent is answering there"), p.stderr
    assert node.sock.exists()  # the running agent keeps its socket


def test_reboot_under_the_agent_is_refused(client, tmp_path):
    n = Node(tmp_path / "n")
    a = AgentProc(n)
    try:
        n.boot.write_text("5b1c0a7e-0000-4000-8000-000000000002\n")  # "rebooted"
        p = via_client(client, n)
        rec = fallback_ok(p, 0.0, "stale boot id")
        assert p.returncode == 0 and rec["applied"] == "none"
    finally:
        a.stop()


def test_other_users_are_refused(tmp_path):
    """The socket is mode 0600; even if an admin opens it up, the agent checks the peer's uid."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="sg-agent-perm-"))  # traversable by others, unlike tmp_path
    try:
        root.chmod(0o755)
        n = Node(root / "n")
        n.root.chmod(0o755)
        (n.root / "run").mkdir(mode=0o755)
        a = AgentProc(n)
        try:
            assert (n.sock.stat().st_mode & 0o777) == 0o600
            require(os.geteuid() == 0, "needs root to ask as another user")
            # The agent answers a stranger at once, before reading anything.
            ask = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
                   "print(s.recv(4096).decode())")
            argv = ["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", ask, str(n.sock)]
            denied = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            assert denied.returncode != 0 and "PermissionError" in denied.stderr, denied.stderr
            n.sock.chmod(0o666)  # an admin's mistake: the uid check still refuses
            refused = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            assert refused.stdout.startswith("SGA1 unavailable uid "), refused
        finally:
            a.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_agent_path_reports_to_serve_like_the_hook(client, tmp_path):
    """Same record delivery (and, on a drain, the same permit call): the record reaches serve."""
    from support.sgserve import TOKEN, Serve, new_port, new_store

    n = Node(tmp_path / "n")
    port = new_port()
    url = new_store(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    text = n.config.read_text().replace("[hooks]\n", f"""[hooks]
report_url = "http://127.0.0.1:{port}/ingest"
token_file = "{token}"
spool_dir = "{tmp_path}/spool"
""", 1) + f"""
[store]
url = "{url}"
[serve]
host = "127.0.0.1"
port = {port}
auth = "token"
token_file = "{token}"
policy = false
"""
    (n.root / "new.toml").write_text(text)
    os.replace(n.root / "new.toml", n.config)
    srv = Serve(n.config, port).start()
    a = AgentProc(n)
    try:
        p = via_client(client, n)
        rec = json.loads(p.stdout)
        assert "agent" in rec and rec["delivery"] == "sent", rec.get("delivery")
        assert srv.healthz()["runs"] >= 1
    finally:
        a.stop()
        srv.stop()


def test_real_dev_kmsg_followed_by_the_agent_agrees(client, tmp_path):
    """checks.xid.source = "kmsg" on this machine's real /dev/kmsg: the agent keeps it open
    and follows it; its verdict and gpu-xid result equal a hook reading the ring buffer."""
    if not os.access("/dev/kmsg", os.R_OK):  # a container without the kernel log: nothing to follow
        pytest.skip("/dev/kmsg is not readable here")
    n = Node(tmp_path / "n")
    text = n.config.read_text().replace('source = "file"', 'source = "kmsg"\nkmsg_path = "/dev/kmsg"')
    (n.root / "new.toml").write_text(text)
    os.replace(n.root / "new.toml", n.config)
    a = AgentProc(n)
    try:
        ours, theirs, p = both(client, n)
        assert theirs == ours
        xid = [r for r in ours["results"] if r[0] == "gpu-xid"]
        assert xid and xid[0][1] in ("healthy", "degraded", "unhealthy"), ours
        assert json.loads(p.stdout)["agent"]["ages"]["kmsg"] == 0.0
    finally:
        a.stop()
