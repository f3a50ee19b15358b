"""serve as its own unprivileged user (serve.user, docs/install.md "Least privilege"): a real
system user made for the test runs `slurmguard serve` with TLS; its token, key and SQLite
store are its own (0600/0600/0660) and nobody else's; records arrive and are stored."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.helpers import REPO, require
from support.sgserve import TOKEN, new_port, new_store, write_config
from support.testca import TestCA
from support.wait import wait_for

from slurmguard.adapters import serve_client
from slurmguard.node.record import make_record

USER = "sgtest-serve"
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages"


@pytest.fixture
def serve_user():
    require(os.geteuid() == 0 and shutil.which("useradd") is not None
            and os.path.exists("/usr/sbin/runuser"), "root, useradd and runuser")
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", USER], check=True, capture_output=True)
    d = Path(tempfile.mkdtemp(prefix="sg-serveuser-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run(["userdel", USER], capture_output=True)


def _own(path: Path, mode: int) -> None:
    shutil.chown(path, USER, USER)
    path.chmod(mode)


def test_serve_runs_unprivileged_with_tls_and_its_own_files(serve_user):
    d = serve_user
    ca = TestCA(d / "ca")
    crt, key = ca.issue("serve", ["localhost"])
    (d / "ca").chmod(0o755)
    crt.chmod(0o644)
    _own(key, 0o600)
    store_dir = d / "store"
    store_dir.mkdir()
    url = new_store(store_dir)
    _own(store_dir, 0o700)
    _own(store_dir / "store.db", 0o660)
    port = new_port()
    cfg = write_config(d, store_url=url, port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"\nuser = "{USER}"')
    _own(d / "token", 0o600)
    cfg.chmod(0o644)
    log = d / "serve.log"
    with open(log, "w") as logf:
        proc = subprocess.Popen(
            ["/usr/sbin/runuser", "-u", USER, "--", "/usr/bin/env", f"PYTHONPATH={REPO}:{SITE}",
             "/usr/bin/python3", "-m", "slurmguard", "-c", str(cfg), "serve", "--no-policy"],
            stdout=logf, stderr=logf, start_new_session=True)
    try:
        wait_for(lambda: "listening on https://" in log.read_text() or proc.poll() is not None,
                 60, what="serve up")
        assert proc.poll() is None, log.read_text()
        uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout)
        # the python process of this session (runuser itself stays root, as it must)
        pids = subprocess.run(["pgrep", "-s", str(proc.pid), "-x", "python3"],
                              capture_output=True, text=True).stdout.split()
        uids = {int(Path(f"/proc/{p}/status").read_text().split("\nUid:")[1].split()[0])
                for p in pids}
        assert uids == {uid} and uid != 0, (pids, uids)
        recs = [make_record(f"n{i}", "prolog", [], "pass", "", job_id=None,
                            started=time.time(), duration=0.01) for i in range(3)]
        answer = serve_client.post_records(f"https://localhost:{port}/ingest", TOKEN, recs, 10,
                                           ca=str(ca.ca_file))
        assert len(answer["stored"]) == 3, answer
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    for f in ("store.db-wal", "store.db-shm"):  # what serve created is its own
        p = store_dir / f
        if p.exists():
            assert p.stat().st_uid == uid

