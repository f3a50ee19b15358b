"""`slurmguard triage collect` against a REAL OpenSSH server on loopback (tests/support/sshserver.py).

Node names are mapped to 127.0.0.1:PORT with --host-map; the "remote" slurmguard is this
checkout run through a wrapper script; the node's kernel log is a stand-in dmesg script
printing real NVRM Xid lines, and its sysfs an InfiniBand fixture tree (this machine has
neither a GPU nor an HCA). Everything else (sshd, key exchange, host-key checks, auth,
remote exec, SFTP) is the real thing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from support import sshserver
from support.helpers import REPO, require, run_sg

pytestmark = pytest.mark.ssh

XID79 = ("NVRM: Xid (PCI:0000:3b:00): 79, pid=2371, name=python3, "
         "GPU has fallen off the bus.")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    ok, why = sshserver.available()
    require(ok, why)
    server = sshserver.start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def node_env(sshd, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A config that points triage at the stand-in node tools, plus the files it names."""
    d = tmp_path_factory.mktemp("node")
    wrapper = d / "slurmguard"
    node_cfg = d / "node.toml"
    node_cfg.write_text(f'[hooks]\nstate_dir = "{d / "state"}"\n')
    wrapper.write_text(f"#!/bin/sh\nSLURMGUARD_CONFIG={node_cfg} PYTHONPATH={REPO} "
                       f'exec {sys.executable} -m slurmguard "$@"\n')
    dmesg = d / "dmesg"
    dmesg.write_text("#!/bin/sh\n"
                     "echo '2026-12-02T10:00:00,000000+00:00 usb 1-1: new device'\n"
                     f"echo '2026-12-02T10:00:01,000000+00:00 {XID79}'\n"
                     "echo '2026-12-02T10:00:02,000000+00:00 eth0: link up'\n")
    for f in (wrapper, dmesg):
        f.chmod(0o755)
    sysfs = d / "sys"
    port = sysfs / "class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "counters/link_downed").write_text("3\n")
    cfg = d / "admin.toml"
    cfg.write_text(
        "[triage]\n"
        f'remote_slurmguard = ["{wrapper}"]\n'
        f'remote_dmesg = "{dmesg}"\n'
        f'remote_nvidia_smi = "{d}/no-such-nvidia-smi"\n'
        f'remote_sysfs = "{sysfs}"\n'
        f'identity = "{sshd.identity}"\n'
        f'known_hosts = ["{sshd.known_hosts}"]\n'
        "connect_timeout = 3.0\n"
        "command_timeout = 60.0\n"
        "[triage.host_map]\n"
        f'"n[1-4]" = "127.0.0.1:{sshd.port}"\n'
    )
    return {"cfg": cfg, "dir": d}


def collect(node_env: dict[str, Path], *args: str):
    return run_sg("-c", str(node_env["cfg"]), "triage", "collect", *args, timeout=180)


def test_bundle_from_two_nodes(node_env, tmp_path) -> None:
    out = tmp_path / "bundle"
    r = collect(node_env, "n[1-2]", "--out", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "slurmguard-triage-bundle"
    assert manifest["summary"]["failed"] == 0
    assert set(manifest["nodes"]) == {"n1", "n2"}
    for node in ("n1", "n2"):
        entry = manifest["nodes"][node]
        assert entry["facts"]["xid_count"] == 1
        assert (out / node / "xid.log").read_text().strip().endswith(XID79)
        ib = json.loads((out / node / "ib.json").read_text())
        assert ib["ports"]["mlx5_0/1"]["state"] == "4: ACTIVE"
        assert ib["ports"]["mlx5_0/1"]["counters/link_downed"] == "3"
        assert entry["facts"]["nvidia_smi"] == "absent"
        assert not (out / node / "nvidia-smi.txt").exists()
        # every file named in the manifest exists with the recorded size
        for rel, meta in entry["files"].items():
            assert (out / rel).stat().st_size == meta["bytes"]
        if importlib.util.find_spec("slurmguard.cli.hooks"):
            check = json.loads((out / node / "check.json").read_text())
            assert check, "slurmguard check --json ran on the node and printed JSON"
            assert entry["status"] == "ok"
        else:  # the hook commands have not landed: the step is recorded as failed, not lost
            assert entry["status"] == "partial" and entry["steps"]["check"]["rc"] not in (0, None)
    assert "2 ok" in r.stdout or "0 failed" in r.stdout


def test_unknown_host_refused_others_complete(node_env, sshd, tmp_path) -> None:
    before = sshd.known_hosts.read_bytes()
    out = tmp_path / "b"
    # n9 reaches the same sshd by another name, which known_hosts does not list.
    r = collect(node_env, "n1,n9", "--out", str(out), "--host-map", f"n9=localhost:{sshd.port}")
    assert r.returncode == 4
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("slurmguard: error:")]
    assert len(errors) == 1 and "n9" in errors[0] and "refused" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["nodes"]["n9"]["status"] == "failed"
    assert m["nodes"]["n9"]["error_kind"] == "unknown-host"
    assert m["nodes"]["n1"]["status"] in ("ok", "partial") and m["nodes"]["n1"]["files"]
    assert sshd.known_hosts.read_bytes() == before, "never auto-added"


def test_changed_host_key_refused(node_env, sshd, tmp_path) -> None:
    other = sshserver.keygen(tmp_path / "other")
    pub = Path(str(other) + ".pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    r = collect(node_env, "n1", "--json", "--tar", str(tmp_path / "x.tar.gz"),
                "--known-hosts", str(kh))
    assert r.returncode == 4
    m = json.loads(r.stdout)
    assert m["nodes"]["n1"]["error_kind"] == "host-key-mismatch"
    assert "does not match" in m["nodes"]["n1"]["error"]


def test_auth_failure_and_refused_port(node_env, sshd, tmp_path) -> None:
    wrong = sshserver.keygen(tmp_path / "wrong")
    closed = sshserver.free_port()
    r = collect(node_env, "n1,n5", "--json", "--out", str(tmp_path / "b"),
                "--identity", str(wrong), "--host-map", f"n5=127.0.0.1:{closed}")
    assert r.returncode == 4
    m = json.loads(r.stdout)
    assert m["nodes"]["n1"]["error_kind"] == "auth"
    assert m["nodes"]["n5"]["error_kind"] == "connect"
    assert m["summary"] == {"ok": 0, "partial": 0, "failed": 2}


def test_silent_server_times_out(node_env, tmp_path) -> None:
    """A port that accepts TCP but never speaks SSH: the node fails after the timeout."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(lsock.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        start = time.monotonic()
        r = collect(node_env, "n6", "--json", "--out", str(tmp_path / "b"),
                    "--host-map", f"n6=127.0.0.1:{lsock.getsockname()[1]}")
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join()
        for s in held:
            s.close()
        lsock.close()
    assert r.returncode == 4, r.stderr
    assert json.loads(r.stdout)["nodes"]["n6"]["error_kind"] == "timeout"
    assert elapsed < 30


def test_tarball(node_env, tmp_path) -> None:
    tar = tmp_path / "ev.tar.gz"
    r = collect(node_env, "n3", "--tar", str(tar))
    assert r.returncode == 0, r.stderr
    with tarfile.open(tar) as tf:
        names = tf.getnames()
        manifest = json.load(tf.extractfile("ev/manifest.json"))  # type: ignore[arg-type]
    assert "ev/n3/xid.log" in names and "ev/n3/ib.json" in names
    assert set(manifest["nodes"]) == {"n3"}
    assert [p.name for p in tmp_path.iterdir()] == ["ev.tar.gz"], "no staging left behind"


@pytest.mark.parametrize("nodeset", ["n1;reboot", "../etc", "-oProxyCommand=x", "n 1", "n1/x"])
def test_hostile_names_refused(node_env, tmp_path, nodeset: str) -> None:
    r = collect(node_env, "--out", str(tmp_path / "b"), "--", nodeset)
    assert r.returncode == 6, (r.returncode, r.stderr)
    assert r.stderr.startswith("slurmguard: error:") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_existing_output_not_overwritten(node_env, tmp_path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "keep").write_text("precious")
    r = collect(node_env, "n1", "--out", str(out))
    assert r.returncode == 6 and "not an empty directory" in r.stderr
    assert (out / "keep").read_text() == "precious" and len(os.listdir(out)) == 1


def test_recent_results_from_the_store(node_env, tmp_path) -> None:
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record
    from slurmguard.store import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    url = f"sqlite:///{tmp_path}/sg.db"
    upgrade(make_engine({"url": url}))
    store = Store.open(url=url)
    store.nodes.record_results(make_record("n1", "healthcheck",
                                           [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")],
                                           "drain", "slurmguard: gpu-xid: Xid 79"))
    store.nodes.record_event("n1", "drain", "admin:alice", "checking", source="admin")
    store.close()
    cfg = tmp_path / "with-store.toml"
    text = node_env["cfg"].read_text().replace("[triage.host_map]", f'[store]\nurl = "{url}"\n'
                                               "[triage.host_map]")
    cfg.write_text(text)
    out = tmp_path / "b"
    r = run_sg("-c", str(cfg), "triage", "collect", "n1", "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stderr
    recent = json.loads((out / "n1" / "results.json").read_text())
    assert [(x["kind"], x["health"] or x["actor"]) for x in recent] == [
        ("drain", "admin:alice"), ("result", "unhealthy")]
    assert recent[1]["checks"] == ["gpu-xid"]


def test_progress_bar_when_asked(node_env, sshd, tmp_path, capsys) -> None:
    """The library draws tqdm's bar on stderr when asked (the CLI asks only on a tty)."""
    from slurmguard.triage.bundle import Bundle
    from slurmguard.triage.collect import CollectOptions, collect

    opts = CollectOptions(identity=str(sshd.identity), known_hosts=(str(sshd.known_hosts),),
                          host_map={"n[1-2]": f"127.0.0.1:{sshd.port}"},
                          remote_slurmguard=("/bin/sh", "-c", "echo {}"), remote_sysfs=str(tmp_path))
    manifest = collect(["n1", "n2"], opts, Bundle(str(tmp_path / "b")), progress=True)
    err = capsys.readouterr().err
    assert "collect: 100%" in err and "2/2" in err
    assert manifest["summary"]["failed"] == 0
    assert json.loads((tmp_path / "b/n1/check.json").read_text()) == {}


def test_missing_key_files_fail_once_up_front(node_env, tmp_path) -> None:
    for flag in ("--known-hosts", "--identity"):
        r = collect(node_env, "n[1-2]", "--out", str(tmp_path / flag), flag, str(tmp_path / "nope"))
        assert r.returncode == 6 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
        assert not (tmp_path / flag).exists()


def test_hashed_known_hosts(node_env, sshd, tmp_path) -> None:
    import shutil
    import subprocess

    kh = tmp_path / "known_hosts"
    shutil.copyfile(sshd.known_hosts, kh)
    subprocess.run([sshserver.SSH_KEYGEN, "-H", "-f", str(kh)], check=True, capture_output=True)
    assert kh.read_text().startswith("|1|"), "ssh-keygen -H hashed the host names"
    r = collect(node_env, "n1", "--json", "--out", str(tmp_path / "b"), "--known-hosts", str(kh))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nodes"]["n1"]["error"] is None
