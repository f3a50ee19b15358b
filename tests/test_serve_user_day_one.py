"""serve's user on day one (docs/install.md "Least privilege"): on a cluster without
accounting no user can be made a Slurm Admin, so `setup controller` alone makes serve run as
SlurmUser (or stops with the one command to run), and serve's first drain succeeds.

A real cluster whose SlurmUser is an unprivileged user made for the test (slurmctld runs as
it), no slurmdbd; serve started as the installed unit would start it (User=SlurmUser)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.helpers import REPO, require, run_sg, sg_env
from support.sgserve import new_port
from support.wait import wait_for

from slurmguard.node.record import make_record

pytestmark = pytest.mark.slurm

SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages"
SLURM_USER = "sgtest-slurm"
SERVE_USER_OTHER = "sgtest-notadmin"
LEMON = "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


@pytest.fixture
def cluster_as_slurmuser():
    """A real cluster without accounting whose SlurmUser is a (made) unprivileged user, in a
    directory that user can reach; stopped by pid, the user removed after."""
    from support import slurmcluster

    require(os.geteuid() == 0 and shutil.which("useradd") is not None
            and not slurmcluster.missing_components(), "root, useradd and Slurm")
    subprocess.run(["userdel", SLURM_USER], capture_output=True)
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", SLURM_USER], check=True, capture_output=True)
    d = Path(tempfile.mkdtemp(prefix="sg-dayone-", dir="/tmp"))
    d.chmod(0o755)
    for sub in ("", "etc", "state", "spool", "log", "run"):  # slurmctld writes as SlurmUser
        (d / "slurm" / sub).mkdir(parents=True, exist_ok=True)
        shutil.chown(d / "slurm" / sub, SLURM_USER, SLURM_USER)
    c = None
    try:
        c = slurmcluster.Cluster.start(d, nodes=2, extra_conf=[f"SlurmUser={SLURM_USER}"])
        yield c, d
    finally:
        if c is not None:
            c.stop()
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["userdel", SLURM_USER], capture_output=True)


def test_setup_controller_without_accounting_makes_serve_slurmuser_and_it_drains(
        cluster_as_slurmuser):
    """docs/install.md "Least privilege": no slurmdbd, so no user can be made a Slurm Admin;
    `setup controller` alone picks SlurmUser, and serve's first drain succeeds as it."""
    from slurmguard import config
    from slurmguard.adapters.serve_client import munge_signer, post_json
    from slurmguard.contract import CheckResult, Health
    from slurmguard.install.serveuser import day_one_user

    c, d = cluster_as_slurmuser
    assert c.run("scontrol", "show", "config").stdout.count(f"SlurmUser               = {SLURM_USER}(") == 1
    env = sg_env(SLURM_CONF=str(c.conf_path))
    prefix = d / "root"
    out = run_sg("setup", "controller", "--prefix", str(prefix), env=env)
    assert out.returncode == 0, out.stderr
    cfg_file = prefix / "etc" / "slurmguard" / "slurmguard.toml"
    assert config.load(str(cfg_file), env={})["serve.user"] == SLURM_USER
    # A config naming another user on such a cluster: setup stops with the one command.
    other = d / "other.toml"
    other.write_text('[serve]\nuser = "sgtest-nobody"\n')
    out = run_sg("-c", str(other), "setup", "controller", "--prefix", str(d / "r2"), env=env)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out
    assert f"run: printf '[serve]\\nuser = \"{SLURM_USER}\"\\n' | install -D -m 0644 /dev/stdin " \
           f"{d}/conf.d/serve-user.toml" in out.stderr, out.stderr
    # doctor says the same of such a config (a FAIL, no longer a warning) with that command.
    other.write_text(f'[serve]\nuser = "{SERVE_USER_OTHER}"\nhost = "127.0.0.1"\n')
    subprocess.run(["useradd", "--system", "--no-create-home", SERVE_USER_OTHER], capture_output=True)
    try:
        out = run_sg("-c", str(other), "doctor", "controller", "--json", env=env, timeout=120)
    finally:
        subprocess.run(["userdel", SERVE_USER_OTHER], capture_output=True)
    item = {i["name"]: i for i in json.loads(out.stdout)["items"]}["serve user"]
    assert item["status"] == "FAIL" and "no accounting" in item["detail"], item
    assert item["fix"].startswith("run: printf '[serve]") and SLURM_USER in item["fix"], item
    assert day_one_user("sgtest-nobody", {"slurmuser": SLURM_USER,
                                          "accountingstoragetype": "accounting_storage/slurmdbd"}
                        ) == ("sgtest-nobody", "")

    # serve, as the installed unit runs it (User=SlurmUser), on a port of its own.
    port = new_port()
    confd = cfg_file.parent / "conf.d"
    confd.mkdir()
    (confd / "test.toml").write_text(f'[serve]\nhost = "127.0.0.1"\nport = {port}\n'
                                     'policy_interval = 1.0\nbatch_interval = 0.05\n'
                                     # setup's new config observes first; this site acts.
                                     '[policy]\nmode = "act"\n')
    log = d / "serve.log"
    with open(log, "w") as logf:
        proc = subprocess.Popen(
            ["/usr/sbin/runuser", "-u", SLURM_USER, "--", "/usr/bin/env",
             f"PYTHONPATH={REPO}:{SITE}", f"SLURM_CONF={c.conf_path}", "/usr/bin/python3", "-m",
             "slurmguard", "-c", str(cfg_file), "serve"],
            stdout=logf, stderr=logf, start_new_session=True)
    try:
        wait_for(lambda: "listening on" in log.read_text() or proc.poll() is not None, 60,
                 what="serve up")
        assert proc.poll() is None, log.read_text()
        # n1 fails gpu-xid three times within the hour (drained and cleared by root, as its
        # hooks do); then an admin's plain undrain: serve drains the lemon, as SlurmUser.
        sign, url = munge_signer(), f"http://127.0.0.1:{port}/ingest"
        for i in range(3):
            c.run("scontrol", "update", "nodename=n1", "state=drain", "reason=slurmguard: gpu-xid: broken")
            bad = make_record("n1", "prolog", [CheckResult("gpu-xid", Health.UNHEALTHY, "broken")],
                              "drain", "slurmguard: gpu-xid: broken", job_id=str(10 + i))
            bad["applied"] = "drained"
            assert len(post_json(url, sign, {"records": [bad]}, 20)["stored"]) == 1
            if i < 2:
                c.run("scontrol", "update", "nodename=n1", "state=undrain")
                ok = make_record("n1", "healthcheck", [CheckResult("gpu-xid", Health.HEALTHY)],
                                 "pass", "")
                ok["applied"] = "undrained"
                assert len(post_json(url, sign, {"records": [ok]}, 20)["stored"]) == 1
        c.run("scontrol", "update", "nodename=n1", "state=undrain")
        info = c.wait_node("n1", lambda n: n.drained, timeout=60, what="serve's drain")
        assert info.reason == LEMON and info.reason_user == SLURM_USER, info
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
