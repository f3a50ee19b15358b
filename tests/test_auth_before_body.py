"""serve authenticates a write from its head before it reads the body (docs/serve.md,
"Limits"; docs/security.md): a client that is not authenticated costs serve at most 64 KiB.

A real `slurmguard serve` in the default mode (serve.auth = munge) on a real Slurm cluster:
200 connections each send a 4 MiB body under a bogus MUNGE credential while an honest node
keeps posting its records. serve's resident memory (VmHWM, the peak, of the serve process
from /proc) may grow by 64 MiB at most, and the honest records are stored meanwhile.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import require
from support.reliability import record
from support.sgserve import Serve, new_port, new_store, write_config

from slurmguard.adapters import munge
from slurmguard.adapters.serve_client import munge_signer, post_json
from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record

pytestmark = pytest.mark.slurm

CONNS = 200
BODY = 4 << 20
LIMIT_KIB = 64 * 1024  # what 200 unauthenticated clients may cost serve, in KiB


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (KiB) of a process, from /proc/PID/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _hostile(port: int, sent: list[int], answers: list[bytes]) -> None:
    """One connection: a head with a bogus credential, then 4 MiB of body, then the answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(b"POST /ingest HTTP/1.1\r\nHost: x\r\nAuthorization: MUNGE MUNGE:AwQDAAB"
                  + b"A" * 80 + b":\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {BODY}\r\n\r\n".encode())
        chunk = b"[" + b"1," * (256 * 1024)
        n = 0
        try:
            while n < BODY:
                n += s.send(chunk[: min(len(chunk), BODY - n)])
        except OSError:
            pass  # serve answered and stopped reading: what it should do
        sent.append(n)
        s.settimeout(10)
        try:
            answers.append(s.recv(4096))
        except OSError:
            answers.append(b"")
    finally:
        s.close()


def test_a_bogus_credential_never_gets_its_body_read(slurm_cluster_factory: Any,
                                                      tmp_path: Path) -> None:
    require(munge.library_available() or Path(munge.UNMUNGE).exists(), "munge")
    # NodeAddr of every node is localhost: the system munged's credentials (127.0.0.1) are
    # theirs, so this machine is an honest node.
    c = slurm_cluster_factory(nodes=2)
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port, auth="munge",
                       serve_extra="policy = false")
    srv = Serve(cfg, port, env={"SLURM_CONF": str(c.conf_path)}).start()
    url = f"http://127.0.0.1:{port}/ingest"
    sign = munge_signer()
    stored: list[str] = []

    def honest(n: int) -> None:
        res = CheckResult("gpu-xid", Health.HEALTHY, "")
        for i in range(n):
            answer = post_json(url, sign, {"records": [make_record(
                f"n{1 + i % 2}", "healthcheck", [res], "pass", "")]}, 30)
            stored.extend(answer["stored"])

    try:
        honest(5)  # warm: the node table, the uids, the writer
        assert srv.proc is not None
        pid = srv.proc.pid
        before = _status(pid)
        sent: list[int] = []
        answers: list[bytes] = []
        threads = [threading.Thread(target=_hostile, args=(port, sent, answers), daemon=True)
                   for _ in range(CONNS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        done_before = len(stored)
        honest(20)  # while the flood is on
        peak = _status(pid)["VmHWM"]
        for t in threads:
            t.join(timeout=120)
        took = time.monotonic() - t0
        after = _status(pid)
        assert len(answers) == CONNS
        refused = sum(1 for a in answers if a.startswith(b"HTTP/1.1 403"))
        assert refused == CONNS, [a[:60] for a in answers if not a.startswith(b"HTTP/1.1 403")][:3]
        assert len(stored) - done_before == 20
        grew = max(peak, after["VmHWM"]) - before["VmRSS"]
        assert grew <= LIMIT_KIB, f"serve's RSS grew {grew} KiB under {CONNS} bogus 4 MiB bodies"
        assert srv.metric("slurmguard_auth_refusals_total", reason="invalid") == CONNS
    finally:
        srv.stop()
    record("auth-before-body", store="SQLite", mode="munge",
           bad_inputs=f"{CONNS} connections sending {BODY >> 20} MiB bodies under a bogus credential",
           lost=0, duplicated=0,
           figures=f"serve peak RSS +{grew / 1024:.1f} MiB over {before['VmRSS'] / 1024:.0f} MiB "
                   f"(limit 64); {sum(sent) >> 20} MiB sent, all {CONNS} refused 403 in "
                   f"{took:.1f} s; 20 honest records stored meanwhile")
