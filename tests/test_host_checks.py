"""host-* checks over procfs/sysfs fixture trees, the real /proc, and a real munged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakehw.sysfs import write_config, write_cpus, write_edac, write_meminfo, write_proc
from support.helpers import require
from support.wait import wait_for

from slurmguard import config
from slurmguard.adapters import host
from slurmguard.checks import host as checks
from slurmguard.checks.base import CheckContext
from slurmguard.contract import Health
from slurmguard.errors import Unsupported
from slurmguard.sources import GatherContext

GIB = 1024 * 1024


def cfg_for(tmp: Path, **params: Any) -> config.Config:
    return config.load(str(write_config(tmp / "host.toml", {f"checks.host.{k}": v
                                                            for k, v in params.items()})))


def run(check: Any, source: str, cfg: config.Config, previous: dict | None = None,
        job_uid: int | None = None, job_id: str | None = None):
    gather = {"host": host.gather, "procs": host.gather_procs, "munge": host.gather_munge}[source]
    data = gather(cfg, GatherContext("n1", "epilog", time.monotonic() + 10, job_id, job_uid))
    ctx = CheckContext(cfg.section("checks.host"), {source: data}, previous or {}, time.time())
    return check.run(ctx), ctx.new_state


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    write_meminfo(proc, 2063 * GIB)  # a "2 TiB" node: MemTotal a little under 2048 GiB
    write_cpus(sys, "0-223")
    return proc, sys


def test_parse_cpu_list() -> None:
    assert host.parse_cpu_list("0-3,8-11,16\n") == 9
    assert host.parse_cpu_list("0") == 1


MEM_TABLE = [
    (0, 2063, Health.HEALTHY, ""),
    (2048, 2010, Health.HEALTHY, ""),  # 1.9% under: kernel reservations
    (2048, 1920, Health.UNHEALTHY, "1920.0 GiB of memory, expected 2048 GiB"),  # one DIMM short
]


@pytest.mark.parametrize("expected,have,health,reason", MEM_TABLE)
def test_host_memory(roots: tuple[Path, Path], tmp_path: Path, expected: int, have: int,
                     health: Health, reason: str) -> None:
    proc, sys = roots
    write_meminfo(proc, have * GIB)
    cfg = cfg_for(tmp_path, proc_root=str(proc), sys_root=str(sys), expected_memory_gib=expected)
    r, _ = run(checks.host_memory, "host", cfg)
    assert (r.health, r.reason) == (health, reason)


CPU_TABLE = [
    ("0-223", 224, Health.HEALTHY, ""),
    ("0-111,113-223", 224, Health.UNHEALTHY, "223 of 224 CPUs online"),
    ("0-111", 0, Health.HEALTHY, ""),
]


@pytest.mark.parametrize("online,expected,health,reason", CPU_TABLE)
def test_host_cpus(roots: tuple[Path, Path], tmp_path: Path, online: str, expected: int,
                   health: Health, reason: str) -> None:
    proc, sys = roots
    write_cpus(sys, online, "0-223")
    cfg = cfg_for(tmp_path, proc_root=str(proc), sys_root=str(sys), expected_cpus=expected)
    r, _ = run(checks.host_cpus, "host", cfg)
    assert (r.health, r.reason) == (health, reason)


def test_host_edac_sequence(roots: tuple[Path, Path], tmp_path: Path) -> None:
    proc, sys = roots
    cfg = cfg_for(tmp_path, proc_root=str(proc), sys_root=str(sys), edac_ce_rise=100)
    r, _ = run(checks.host_edac, "host", cfg)
    assert r.health is Health.UNSUPPORTED  # no EDAC tree
    write_edac(sys, {"mc0": (5, 0), "mc1": (0, 0)})
    r, state = run(checks.host_edac, "host", cfg)
    assert r.health is Health.HEALTHY
    write_edac(sys, {"mc0": (205, 0), "mc1": (0, 0)})
    r, state = run(checks.host_edac, "host", cfg, state)
    assert (r.health, r.reason) == (Health.DEGRADED, "mc0: 200 corrected memory errors since last run")
    write_edac(sys, {"mc0": (205, 0), "mc1": (0, 2)})
    r, state = run(checks.host_edac, "host", cfg, state)
    assert (r.health, r.reason) == (Health.UNHEALTHY, "mc1: 2 new uncorrectable memory errors")
    r, state = run(checks.host_edac, "host", cfg, state)
    assert (r.health, r.reason) == (Health.DEGRADED, "mc1: 2 uncorrectable memory errors since boot")


def test_host_daemons_fixture(roots: tuple[Path, Path], tmp_path: Path) -> None:
    proc, sys = roots
    write_proc(proc, 1, 0, "systemd")
    write_proc(proc, 812, 0, "slurmd")
    write_proc(proc, 813, 0, "munged", state="Z")
    cfg = cfg_for(tmp_path, proc_root=str(proc), daemons=["slurmd", "munged"])
    r, _ = run(checks.host_daemons, "procs", cfg)
    assert (r.health, r.reason) == (Health.UNHEALTHY, "not running: munged")


def test_host_daemons_real_proc(tmp_path: Path) -> None:
    me = Path("/proc/self/comm").read_text().strip()  # this test's own process
    r, _ = run(checks.host_daemons, "procs", cfg_for(tmp_path, daemons=[me]))
    assert r.health is Health.HEALTHY
    r, _ = run(checks.host_daemons, "procs", cfg_for(tmp_path, daemons=["no-such-daemon-x"]))
    assert r.reason == "not running: no-such-daemon-x"


LEFTOVER_TABLE: list[tuple[list[tuple[int, int, str, str, str | None]], str, Health, str]] = [
    ([], "", Health.HEALTHY, ""),
    ([(100, 1001, "python3", "S", "42")], "", Health.UNHEALTHY,
     "1 processes of uid 1001 still running after job 42: python3 (100)"),
    ([(100, 1001, "python3", "D", None)], "", Health.UNHEALTHY,
     "1 processes of uid 1001 still running after job 42: python3 (100, D state)"),
    ([(100, 1001, "python3", "S", "43")], "", Health.HEALTHY, ""),  # another job of the user
    ([(100, 1001, "python3", "Z", "42"), (101, 1001, "systemd", "S", None),
      (102, 1002, "python3", "S", "42"), (103, 0, "sshd", "S", None)], "", Health.HEALTHY, ""),
    ([(100, 1001, "a", "S", "42"), (101, 1001, "b", "S", "42"), (102, 1001, "c", "R", "42"),
      (103, 1001, "d", "S", "42")], "degraded", Health.DEGRADED,
     "4 processes of uid 1001 still running after job 42: a (100), b (101), c (102) +1 more"),
]


@pytest.mark.parametrize("procs,mode,health,reason", LEFTOVER_TABLE)
def test_leftover_procs_table(tmp_path: Path, procs: list, mode: str, health: Health,
                              reason: str) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    for pid, uid, comm, state, job in procs:
        write_proc(proc, pid, uid, comm, state=state, job_id=job)
    params: dict[str, Any] = {"proc_root": str(proc), "leftover_grace": 0.0}
    if mode:
        params["leftover_health"] = mode
    r, _ = run(checks.host_leftover_procs, "procs", cfg_for(tmp_path, **params),
               job_uid=1001, job_id="42")
    assert (r.health, r.reason) == (health, reason)


def test_leftover_no_job_uid(tmp_path: Path) -> None:
    r, _ = run(checks.host_leftover_procs, "procs", cfg_for(tmp_path))
    assert r.health is Health.UNSUPPORTED


def _runs_sleep(pid: int) -> bool:
    """The child has exec'd (its /proc entry shows sleep, not the forked python)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"/bin/sleep")
    except FileNotFoundError:
        return False


def test_leftover_real_process(tmp_path: Path) -> None:
    """A real process of another uid, found in the real /proc, then gone once killed."""
    require(os.geteuid() == 0, "needs root to start a process as another uid")
    uid = 54321
    child = subprocess.Popen(["/bin/sleep", "60"], user=uid, group=uid,
                             env={"SLURM_JOB_ID": "77"})
    try:
        wait_for(lambda: _runs_sleep(child.pid), 10, interval=0.02, what="the child exec'ing sleep")
        cfg = cfg_for(tmp_path, leftover_grace=0.3)
        t0 = time.monotonic()
        r, _ = run(checks.host_leftover_procs, "procs", cfg, job_uid=uid, job_id="77")
        assert 0.3 <= time.monotonic() - t0 < 3  # waited out the grace, then counted it
        assert r.health is Health.UNHEALTHY
        assert r.details["pids"] == [child.pid] and "sleep" in r.reason
        r, _ = run(checks.host_leftover_procs, "procs", cfg, job_uid=uid, job_id="78")
        assert r.health is Health.HEALTHY  # its environ says job 77: another job's process
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    r, _ = run(checks.host_leftover_procs, "procs", cfg, job_uid=uid, job_id="77")
    assert r.health is Health.HEALTHY


def test_munge_unsupported_without_munge(tmp_path: Path) -> None:
    with pytest.raises(Unsupported):
        run(checks.host_munge, "munge", cfg_for(tmp_path, munge=str(tmp_path / "nope")))


def test_munge_round_trip_real_daemon(tmp_path: Path) -> None:
    """Our own munged on a private socket: healthy while it runs, unhealthy once stopped."""
    munged = shutil.which("munged") or "/usr/sbin/munged"
    require(os.path.exists(munged) and os.path.exists("/usr/bin/munge"), "munge not installed")
    require(os.geteuid() == 0, "munged key/socket checks need root here")
    d = tmp_path / "munge"
    d.mkdir(mode=0o700)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = d / "munge.socket"
    proc = subprocess.Popen(
        [munged, "-F", "--force", f"--socket={sock}", f"--key-file={key}",
         f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
         f"--seed-file={d / 'seed'}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            wait_for(lambda: sock.exists() or proc.poll() is not None, 10, interval=0.05,
                     what="munged's socket")
        except AssertionError:
            pass  # require() below skips (or fails under CI) with munged's own words
        require(sock.exists(), f"munged did not start: {proc.stderr.read1(2000) if proc.poll() is not None else 'no socket'}")
        cfg = cfg_for(tmp_path, munge_socket=str(sock))
        r, _ = run(checks.host_munge, "munge", cfg)
        assert r.health is Health.HEALTHY, r.reason
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    r, _ = run(checks.host_munge, "munge", cfg)
    assert r.health is Health.UNHEALTHY and r.reason.startswith("munge round trip failed: ")


def test_leftover_exiting_within_grace_is_not_counted(tmp_path: Path) -> None:
    """A job process still exiting when the epilog starts (gone 0.5 s later) is no fault."""
    require(os.geteuid() == 0, "needs root to start a process as another uid")
    uid = 54322
    child = subprocess.Popen(["/bin/sleep", "0.5"], user=uid, group=uid)
    try:
        wait_for(lambda: _runs_sleep(child.pid), 10, interval=0.02, what="the child exec'ing sleep")
        cfg = cfg_for(tmp_path, leftover_grace=5.0)
        t0 = time.monotonic()
        # the reaper thread stands in for slurmstepd collecting its killed child
        threading.Thread(target=child.wait, daemon=True).start()
        r, _ = run(checks.host_leftover_procs, "procs", cfg, job_uid=uid, job_id="9")
        took = time.monotonic() - t0
        assert r.health is Health.HEALTHY, r.reason
        assert took < 4.0  # returned as soon as the process was gone, not after the grace
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_unreadable_meminfo_and_cpu_list_are_checker_errors(tmp_path: Path) -> None:
    """What the checker cannot read says nothing about the node: `error`, never a drain."""
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    (proc / "meminfo").write_text("MemFree: 1 kB\n")  # no MemTotal line
    (sys / "devices/system/cpu").mkdir(parents=True)  # no online file
    cfg = cfg_for(tmp_path, proc_root=str(proc), sys_root=str(sys), expected_memory_gib=64,
                  expected_cpus=8)
    mem, _ = run(checks.host_memory, "host", cfg)
    cpus, _ = run(checks.host_cpus, "host", cfg)
    assert (mem.health, mem.reason) == (Health.ERROR, "MemTotal missing from meminfo")
    assert (cpus.health, cpus.reason) == (Health.ERROR, "cannot read the online CPU list")
