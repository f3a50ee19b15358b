"""`slurmguard doctor` on a real Slurm cluster wired in by `slurmguard setup` (one cluster for
the module), passing and failing; and against a slurm.conf file when no slurmctld answers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import require, sg_env

pytestmark = pytest.mark.slurm
VENV_SG = str(Path(sys.executable).parent / "slurmguard")
QUICK = ["host-cpus"]  # checks that pass on any test machine; the point here is the wiring


def sg(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VENV_SG, *args], capture_output=True, text=True, timeout=180,
                          env=env or sg_env())


def write_config(prefix: Path) -> Path:
    cfg = prefix / "etc/slurmguard/slurmguard.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"""[hooks]
state_dir = "{prefix}/var/lib/slurmguard"
spool_dir = "{prefix}/var/spool/slurmguard"
log_file = "{prefix}/hooks.log"
prolog = {json.dumps(QUICK)}
epilog = {json.dumps(QUICK)}
healthcheck = {json.dumps(QUICK)}
[store]
path = "{prefix}/var/lib/slurmguard/slurmguard.db"
[serve]
token_file = "{prefix}/etc/slurmguard/token"
[requeue]
state_file = "{prefix}/var/lib/slurmguard/requeue-watch.json"
[slurm]
timeout = 20.0
""")
    return cfg


@pytest.fixture(scope="module")
def site(tmp_path_factory):  # type: ignore[no-untyped-def]
    """setup node + controller into a prefix, then a 2-node cluster running those scripts."""
    from support import slurmcluster

    missing = slurmcluster.missing_components()
    require(not missing, f"real Slurm cluster needs {', '.join(missing)}")
    require(os.geteuid() == 0, "the Slurm test cluster runs slurmctld/slurmd as root")
    require(os.access(VENV_SG, os.X_OK), f"{VENV_SG}: slurmguard is not installed in this venv")
    prefix = tmp_path_factory.mktemp("site")
    cfg = write_config(prefix)
    # The cluster's slurm.conf is not at Slurm's compiled-in default: setup, run as scontrol
    # is run (with SLURM_CONF), writes it for the hooks (slurmd gives HealthCheckProgram none).
    slurm_dir = tmp_path_factory.mktemp("slurm")
    conf = slurm_dir.resolve() / "slurm" / "etc" / "slurm.conf"
    for role in ("node", "controller"):
        r = sg("setup", role, "--prefix", str(prefix), env=sg_env(SLURM_CONF=str(conf)))
        assert r.returncode == 0, r.stdout + r.stderr
    lib = prefix / "usr/lib/slurmguard"
    extra = ["PrologEpilogTimeout=60"]
    so = next(prefix.rglob("slurmguard_spank.so"), None)
    if so is not None:  # built when gcc and libslurm-dev are present (CI has both)
        plug = prefix / "etc/slurm/plugstack.conf"
        plug.parent.mkdir(parents=True, exist_ok=True)
        plug.write_text(f"optional {so}\n")
        extra.append(f"PlugStackConfig={plug}")
    c = slurmcluster.Cluster.start(slurm_dir, nodes=2,
                                   prolog=str(lib / "prolog/slurmguard-prolog"),
                                   epilog=str(lib / "epilog/slurmguard-epilog"),
                                   prolog_slurmctld=str(lib / "prolog/slurmguard-gate"),
                                   health_check_program=str(lib / "prolog/slurmguard-healthcheck"),
                                   extra_conf=extra)
    assert c.conf_path == conf
    try:
        yield prefix, cfg, c
    finally:
        c.stop()


def doctor(cfg: Path, c, role: str, *extra: str) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    r = sg("-c", str(cfg), "doctor", role, "--json", *extra, env=sg_env(SLURM_CONF=str(c.conf_path)))
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def by_name(data: dict) -> dict[str, dict]:
    return {i["name"]: i for i in data["items"]}


@pytest.mark.parametrize("role", ["node", "controller"])
def test_doctor_passes_on_a_site_wired_by_setup(site, role: str) -> None:  # type: ignore[no-untyped-def]
    prefix, cfg, c = site
    rc, data = doctor(cfg, c, role)
    failed = [i for i in data["items"] if i["status"] == "FAIL"]
    assert rc == 0 and data["ok"] and not failed, failed
    items = by_name(data)
    assert items["slurm.conf"]["detail"].startswith("read the running config")  # via slurmctld
    if role == "node":
        assert items["Prolog"]["status"] == "pass" and items["HealthCheckProgram"]["status"] == "pass"
        assert items["PrologEpilogTimeout"]["detail"] == "PrologEpilogTimeout=60 s, hooks.budget=20 s"
        if shutil.which("gcc") and Path("/usr/include/slurm/spank.h").exists():
            assert items["SPANK plugin"]["status"] == "pass"
    else:
        assert items["PrologSlurmctld"]["status"] == "pass"
        assert items["store"]["status"] == "pass" and items["serve token"]["status"] == "pass"
    assert f"the entry scripts run {VENV_SG}" in items["slurmguard runnable"]["detail"]
    assert f"SLURM_CONF={c.conf_path}" in items["hooks' environment"]["detail"]
    assert items["scontrol ping (hooks)"]["status"] == "pass"
    assert "is UP" in items["scontrol ping (hooks)"]["detail"]
    if role == "node":  # two slurmd on this host (slurmd -N n1, -N n2)
        assert items["per-node state"]["detail"].startswith("2 slurmd on this host (n1, n2)")
        assert items["NVML"]["detail"].startswith("in the hooks' environment")
    units = items["service units"]
    assert units["status"] == "pass" and "current" in units["detail"], units


def test_doctor_fails_until_setup_writes_slurm_conf_for_the_hooks(site) -> None:  # type: ignore[no-untyped-def]
    # The admin's shell has SLURM_CONF; slurmd's HealthCheckProgram has none. A setup run
    # without it leaves the hooks unable to reach slurmctld: doctor says so, and how to fix.
    prefix, cfg, c = site
    bare = {k: v for k, v in sg_env().items() if k != "SLURM_CONF"}
    try:
        # (A later setup without SLURM_CONF keeps the one written before: start afresh.)
        (prefix / "etc/default/slurmguard").unlink()
        r = sg("setup", "node", "--prefix", str(prefix), env=bare)
        assert r.returncode == 0, r.stdout + r.stderr
        defaults = (prefix / "etc/default/slurmguard").read_text()
        assert "SLURM_CONF" not in defaults
        rc, data = doctor(cfg, c, "node")  # doctor itself runs with SLURM_CONF set
        item = by_name(data)["scontrol ping (hooks)"]
        assert rc == 1 and item["status"] == "FAIL", item
        assert "SLURM_CONF=/etc/slurm/slurm.conf (compiled-in default)" in item["detail"]
        assert item["fix"].startswith(f"Slurm starts HealthCheckProgram without SLURM_CONF: "
                                      f"run `SLURM_CONF={c.conf_path} slurmguard setup node`")
    finally:
        r = sg("setup", "node", "--prefix", str(prefix), env=sg_env(SLURM_CONF=str(c.conf_path)))
        assert r.returncode == 0, r.stdout + r.stderr
    assert f"SLURM_CONF={c.conf_path}" in (prefix / "etc/default/slurmguard").read_text()
    rc, data = doctor(cfg, c, "node")
    assert rc == 0 and by_name(data)["scontrol ping (hooks)"]["status"] == "pass", data


def test_doctor_names_a_shared_state_file_on_a_host_of_several_slurmd(site) -> None:  # type: ignore[no-untyped-def]
    prefix, cfg, c = site
    legacy = prefix / "var/lib/slurmguard/state.json"
    legacy.write_text("{}")
    try:
        rc, data = doctor(cfg, c, "node")
        item = by_name(data)["per-node state"]
        assert rc == 1 and item["status"] == "FAIL" and f"remove {legacy}" in item["fix"], item
    finally:
        legacy.unlink()
    assert by_name(doctor(cfg, c, "node")[1])["per-node state"]["status"] == "pass"


def test_jobs_run_through_the_installed_prolog(site) -> None:  # type: ignore[no-untyped-def]
    prefix, cfg, c = site
    jid = c.sbatch("#!/bin/sh\ntrue\n", "-N2")
    c.wait_job(jid, timeout=90)
    log = (prefix / "hooks.log").read_text()
    assert "prolog" in log and "epilog" in log, log  # the real slurmguard ran from the scripts


def test_removed_slurmguard_fails_open_loudly_and_doctor_names_it(site) -> None:  # type: ignore[no-untyped-def]
    prefix, cfg, c = site
    defaults = prefix / "etc/default/slurmguard"
    original = defaults.read_text()
    exe = prefix / "bin/slurmguard"
    exe.parent.mkdir(exist_ok=True)
    shutil.copy2(VENV_SG, exe)  # the console script, at a path we may delete
    sock_path = str(prefix / "syslog.sock")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(sock_path)
    sink.settimeout(60)
    textfile = prefix / "textfile"
    textfile.mkdir()
    try:
        # Install as that copy (setup records the slurmguard it runs as, in defaults and units).
        r = subprocess.run([str(exe), "setup", "node", "--prefix", str(prefix)],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        defaults.write_text(defaults.read_text()
                            + f"SLURMGUARD_LOGGER_SOCKET={sock_path}\n"
                            f"SLURMGUARD_TEXTFILE_DIR={textfile}\n"
                            f"SLURM_CONF={c.conf_path}\n")  # the test cluster's, for scontrol
        rc, data = doctor(cfg, c, "node")
        assert rc == 0, [i for i in data["items"] if i["status"] == "FAIL"]
        exe.unlink()  # "remove the slurmguard binary"
        jid = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n1")
        c.wait_job(jid, timeout=90)  # the prolog exited 0: the job ran
        msgs = [sink.recv(65536).decode()]
        while "prolog:" not in msgs[-1]:  # the gate (PrologSlurmctld) failed open first
            msgs.append(sink.recv(65536).decode())
        assert f"prolog: cannot run slurmguard: {exe} is not executable" in msgs[-1], msgs
        assert any(f"gate: cannot run slurmguard: {exe}" in m for m in msgs), msgs
        marker = (prefix / "var/lib/slurmguard/hook-unrunnable.log").read_text()
        assert f" prolog {exe} is not executable" in marker and f" gate {exe} " in marker
        prom = (textfile / "slurmguard_hook_unrunnable.prom").read_text()
        assert 'slurmguard_hook_unrunnable_total{hook="prolog"} 1' in prom
        rc, data = doctor(cfg, c, "node")
        items = by_name(data)
        assert rc == 1 and not data["ok"]
        assert items["slurmguard runnable"]["status"] == "FAIL"
        assert str(exe) in items["slurmguard runnable"]["detail"]
        assert items["hook-unrunnable marker"]["status"] == "FAIL"
        assert "doctor --ack" in items["hook-unrunnable marker"]["fix"]
        text = sg("-c", str(cfg), "doctor", "node", env=sg_env(SLURM_CONF=str(c.conf_path)))
        assert text.returncode == 1 and "FAILED: slurmguard runnable, hook-unrunnable marker" in text.stdout
        assert "service units" not in text.stdout.split("FAILED:")[1]  # they name the copy too
        nodes = sg("-c", str(cfg), "nodes", env=sg_env(SLURM_CONF=str(c.conf_path)))
        assert nodes.returncode == 0, nodes.stderr
        assert "HOOK UNRUNNABLE on this host" in nodes.stdout and "jobs ran unchecked" in nodes.stdout
        # Fleet-wide: the prolog marked n1 (and only n1) in Slurm, which `nodes` flags.
        listed = json.loads(sg("-c", str(cfg), "nodes", "--json",
                               env=sg_env(SLURM_CONF=str(c.conf_path))).stdout)
        flags = {n["name"]: n["flags"] for n in listed["nodes"]}
        assert "hook-unrunnable" in flags["n1"] and "hook-unrunnable" not in flags["n2"], flags
        only = json.loads(sg("-c", str(cfg), "nodes", "--state", "hook-unrunnable", "--json",
                             env=sg_env(SLURM_CONF=str(c.conf_path))).stdout)
        assert [n["name"] for n in only["nodes"]] == ["n1"]
        show = sg("-c", str(cfg), "node", "show", "n1", env=sg_env(SLURM_CONF=str(c.conf_path)))
        # (the epilog's failure after the job may have replaced the prolog's: both are ours)
        assert "HOOK UNRUNNABLE: slurmguard: hook-unrunnable: " in show.stdout
        assert f"{exe} is not executable" in show.stdout.split("HOOK UNRUNNABLE: ")[1]
        show = sg("-c", str(cfg), "node", "show", "n1", "--json", env=sg_env(SLURM_CONF=str(c.conf_path)))
        shown = json.loads(show.stdout)
        assert shown["this_host_marker"]["count"] >= 1
        assert shown["node"]["hook_unrunnable"].startswith("slurmguard: hook-unrunnable: ")
    finally:
        sink.close()
        r = sg("setup", "node", "--prefix", str(prefix))  # back to this venv's slurmguard
        assert r.returncode == 0, r.stderr
        defaults.write_text(original)
    rc, data = doctor(cfg, c, "node", "--ack", "--node", "n1")  # fixed: acknowledge the marker
    assert rc == 0, [i for i in data["items"] if i["status"] == "FAIL"]
    assert (prefix / "var/lib/slurmguard/hook-unrunnable.log.1").exists()
    assert "Comment" not in c.node("n1").raw  # the Slurm mark is gone too


def test_doctor_reads_the_file_when_no_slurmctld_answers(tmp_path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"
                    "Epilog=/nonexistent/slurmguard-epilog\nSchedulerParameters=bf_continue\n"
                    "PrologEpilogTimeout=10\nNodeName=n1 CPUs=1\n")
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[hooks]\nstate_dir = "{tmp_path}"\n[slurm]\ntimeout = 5.0\n')
    r = sg("-c", str(cfg), "doctor", "node", "--json", env=sg_env(SLURM_CONF=str(conf)))
    assert r.returncode == 1, r.stderr
    items = by_name(json.loads(r.stdout))
    assert items["slurm.conf"]["detail"].startswith(f"read {conf} (scontrol show config failed")
    assert items["Prolog"]["status"] == "FAIL" and "add Prolog=/usr/lib/slurmguard/prolog/slurmguard-prolog" in items["Prolog"]["fix"]
    assert items["Epilog"]["fix"] == "run: slurmguard setup node"
    assert "set PrologEpilogTimeout=60" in items["PrologEpilogTimeout"]["fix"]
    assert items["nohold_on_prolog_fail"]["status"] == "FAIL"
    if not os.path.exists("/etc/default/slurmguard"):
        assert items["slurmguard runnable"]["status"] == "FAIL"
        assert "/etc/default/slurmguard is missing" in items["slurmguard runnable"]["detail"]


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    from fakehw.nvml import build_fake_nvml

    require(shutil.which("gcc") is not None, "gcc is needed to build the stand-in NVML")
    return build_fake_nvml(tmp_path_factory.mktemp("nvml")) / "libnvidia-ml.so.1"


@pytest.mark.parametrize("expected,status", [(8, "pass"), (4, "FAIL"), (-1, "pass")])
def test_doctor_nvml_item_with_the_stand_in_library(tmp_path, fake_nvml: Path, expected: int,
                                                    status: str) -> None:
    from fakehw.nvml import default_config, write_config

    lib = fake_nvml
    state = write_config(tmp_path / "fake-nvml.json", default_config(8))
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[hooks]\nstate_dir = "{tmp_path}"\n[slurm]\ntimeout = 5.0\n'
                   f'[checks.gpu]\nnvml_library = "{lib}"\nexpected_count = {expected}\n')
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")
    r = sg("-c", str(cfg), "doctor", "node", "--json",
           env=sg_env(SLURM_CONF=str(conf), FAKE_NVML_CONFIG=str(state)))
    item = by_name(json.loads(r.stdout))["NVML"]
    assert item["status"] == status, item
    assert "8 GPU(s)" in item["detail"]


def test_doctor_token_item_refuses_a_world_readable_token(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 40 + "\n")
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[hooks]\nstate_dir = "{tmp_path}"\nreport_url = "http://127.0.0.1:1/ingest"\n'
                   f'token_file = "{token}"\n[serve]\nauth = "token"\n[slurm]\ntimeout = 5.0\n')
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")
    env = sg_env(SLURM_CONF=str(conf))
    for mode, status in ((0o644, "FAIL"), (0o600, "pass")):
        token.chmod(mode)
        item = by_name(json.loads(sg("-c", str(cfg), "doctor", "node", "--json", env=env).stdout))["hook token"]
        assert item["status"] == status, item
        if status == "FAIL":
            assert "world-accessible (mode 0644)" in item["detail"] and item["fix"] == f"chmod 0600 {token}"
    token.unlink()
    item = by_name(json.loads(sg("-c", str(cfg), "doctor", "node", "--json", env=env).stdout))["hook token"]
    assert item["status"] == "FAIL" and "copy the controller's serve.token_file" in item["fix"]


def test_doctor_warns_while_the_shared_token_is_in_use(tmp_path) -> None:
    """serve.auth = token lets root on any node write for every node: doctor says so (WARN,
    which does not fail the run); the default, munge, passes where munged answers."""
    from slurmguard.adapters import munge

    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")
    env = sg_env(SLURM_CONF=str(conf))
    cfg = tmp_path / "sg.toml"
    for auth, status in (("token", "WARN"), ("munge", "pass")):
        if auth == "munge":
            try:
                munge.encode(b"probe")
            except munge.MungeError as exc:
                require(False, f"munged does not answer: {exc}")
        cfg.write_text(f'[hooks]\nstate_dir = "{tmp_path}"\n[serve]\nauth = "{auth}"\n'
                       '[slurm]\ntimeout = 5.0\n')
        item = by_name(json.loads(sg("-c", str(cfg), "doctor", "node", "--json", env=env).stdout))["serve.auth"]
        assert item["status"] == status, item
        if status == "WARN":
            assert "every other node" in item["detail"] and 'serve.auth = "munge"' in item["fix"]


def test_doctor_names_units_left_behind_by_a_moved_slurmguard(site) -> None:  # type: ignore[no-untyped-def]
    prefix, cfg, c = site
    unit = prefix / "etc/systemd/system/slurmguard-serve.service"
    good = unit.read_text()
    try:
        unit.write_text(good.replace(f"ExecStart={VENV_SG}", "ExecStart=/opt/old-venv/bin/slurmguard"))
        rc, data = doctor(cfg, c, "controller")
        item = by_name(data)["service units"]
        assert rc == 1 and item["status"] == "FAIL" and "slurmguard-serve.service differs" in item["detail"]
        assert item["fix"].startswith("run: slurmguard setup controller")
    finally:
        unit.write_text(good)
