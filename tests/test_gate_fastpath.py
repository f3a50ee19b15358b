"""The gate's fast path: the compiled client asks a real `slurmguard serve` on its gate socket.

Same answer as `slurmguard gate` (same exit code, same log line, same log file), because serve
runs slurmguard.gate.answer.answer_job; when serve does not answer the client runs `slurmguard gate`
itself, so fail-open/fail-closed (gate.on_store_error) is the in-process behaviour.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import REPO, require, sg_argv, sg_env
from support.pgserver import pg_server  # noqa: F401  (fixture)
from support.sgserve import Serve, new_port, new_store
from support.wait import wait_for

from slurmguard.contract import CheckResult, Health
from slurmguard.gate.sock import BACKLOG, PENDING, WORKERS, GateSocket, gone
from slurmguard.node.record import make_record
from slurmguard.store import Store

LEMON = "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


def build_gate_client(dest: Path) -> Path:
    require(shutil.which("gcc") is not None and shutil.which("make") is not None,
            "gcc and make build the gate client")
    build = dest / "prolog"
    shutil.copytree(REPO / "prolog", build, ignore=shutil.ignore_patterns("slurmguard-*-client"))
    r = subprocess.run(["make", "-C", str(build), "slurmguard-gate-client"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return build / "slurmguard-gate-client"


class Setup:
    def __init__(self, d: Path, extra: str = "", url: str | None = None) -> None:
        """n1 healthy, n2 failed an Xid 5 s ago, n3 a lemon, in a new SQLite store (or in the
        migrated store at ``url``); serve's config with a gate socket."""
        self.d = d
        self.url = url or new_store(d, "s.db")
        s = Store.open(url=self.url)
        now = time.time()
        ok = [CheckResult("gpu-count", Health.HEALTHY)]
        bad = ok + [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")]
        s.nodes.record_many([make_record("n1", "prolog", ok, "pass", "", started=now - 5),
                             make_record("n2", "prolog", bad, "drain", "slurmguard: gpu-xid: Xid 79",
                                   started=now - 5),
                       make_record("n3", "prolog", ok, "pass", "", started=now - 5)])
        s.nodes.set_flags("n3", lemon=True, lemon_reason=LEMON)
        s.close()
        self.sock = d / "run" / "gate.sock"
        self.port = new_port()
        token = d / "token"
        token.write_text("test-token-0123456789abcdef\n")
        token.chmod(0o600)
        self.cfg = d / "sg.toml"
        self.cfg.write_text(f"""
[store]
url = "{self.url}"
[serve]
host = "127.0.0.1"
port = {self.port}
auth = "token"
token_file = "{token}"
policy = false
gate_socket = "{self.sock}"
[gate]
drain = false
log_file = "{d}/gate.log"
{extra}
""")

    def env(self, nodes: str, job: str = "11", **extra: str) -> dict[str, str]:
        base = {"SLURMGUARD_CONFIG": str(self.cfg), "SLURM_JOB_ID": job,
                "SLURM_JOB_NODELIST": nodes, "SLURMGUARD_GATE_SOCKET": str(self.sock)}
        return sg_env(**{**base, **extra})


@pytest.fixture(scope="module")
def gate_client(tmp_path_factory) -> Path:
    return build_gate_client(tmp_path_factory.mktemp("gateclient"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("gate"))
    srv = Serve(s.cfg, s.port).start()
    wait_for(s.sock.exists, 20, interval=0.05, what="the gate socket")
    yield s
    srv.stop()


def client(gate_client: Path, s: Setup, nodes: str, *args: str, **env: str):
    return subprocess.run([str(gate_client), *args, "--", *sg_argv("gate", *args)],
                          env=s.env(nodes, **env), capture_output=True, text=True, timeout=60)


def in_process(s: Setup, nodes: str, *args: str):
    return subprocess.run(sg_argv("gate", *args), env=s.env(nodes), capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("nodes", ["n1", "n[1-3]", "n2", "n3,n9", "unknown[1-4]", "n[1-2],n4"])
def test_serve_answers_like_the_gate(gate_client, served, nodes):
    assert (served.sock.stat().st_mode & 0o777) == 0o600
    fast = client(gate_client, served, nodes)
    slow = in_process(served, nodes)
    assert "serve not used" not in fast.stderr, fast.stderr
    assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr)
    if nodes == "n[1-3]":
        assert fast.returncode == 1 and "refused 2 of 3 nodes" in fast.stderr
        assert fast.stderr.count("refused 2 of 3") == 1
        assert (served.d / "gate.log").read_text().count("refused 2 of 3 nodes") >= 2  # both paths


def test_store_unreadable_through_serve_fails_open(gate_client, served):
    db = Path(served.url[len("sqlite:///"):])
    db.rename(db.with_suffix(".away"))
    try:
        fast = client(gate_client, served, "n2")
        slow = in_process(served, "n2")
        assert "serve not used" not in fast.stderr
        assert fast.returncode == slow.returncode == 0
        assert "fail-open" in fast.stderr and fast.stderr == slow.stderr
    finally:
        db.with_suffix(".away").rename(db)


def test_config_mismatch_falls_back(gate_client, served, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(served.cfg.read_text())
    fast = client(gate_client, served, "n[1-3]", SLURMGUARD_CONFIG=str(other))
    assert "serve not used (serve refused: config" in fast.stderr
    assert fast.returncode == 1 and "refused 2 of 3 nodes" in fast.stderr


def test_serve_down_falls_back_and_keeps_fail_closed(gate_client, tmp_path):
    s = Setup(tmp_path, 'on_store_error = "closed"')
    fast = client(gate_client, s, "n[1-3]")  # serve never started: no socket
    assert "serve not used (connect" in fast.stderr
    assert fast.returncode == 1 and "refused 2 of 3 nodes" in fast.stderr
    os.unlink(s.url[len("sqlite:///"):])
    fast = client(gate_client, s, "n1")
    assert fast.returncode == 5 and "fail-closed" in fast.stderr


EXPECTED = {"n1": 0, "n2": 1, "n3": 1}  # healthy, a fresh Xid, a lemon


def test_a_burst_on_postgresql_is_answered_from_serves_own_pool(gate_client, pg_server, tmp_path):  # noqa: F811
    """150 one-node jobs at once, serve on PostgreSQL: each gets the verdict its node has,
    from serve (none falls back), over serve's pooled connections. serve used to open the
    store for each job: a backend per job, and a burst past the server's max_connections
    would fail its gates open (a lemon's job allowed)."""
    from slurmguard.store.engine import POOL_MAX, make_engine
    from slurmguard.store.migrate import upgrade

    url = pg_server.url(pg_server.create_db())
    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    s = Setup(tmp_path, url=url)
    srv = Serve(s.cfg, s.port).start()
    try:
        wait_for(s.sock.exists, 20, interval=0.05, what="the gate socket")
        client(gate_client, s, "n1")  # serve's pool holds its first connections

        def sessions() -> int:
            return int(pg_server.sql(f"SELECT sessions FROM pg_stat_database "
                                     f"WHERE datname = '{url.rsplit('/', 1)[1]}'")[0][0])

        before = sessions()
        jobs = [(f"{700 + i}", ("n1", "n2", "n3")[i % 3]) for i in range(150)]
        with ThreadPoolExecutor(len(jobs)) as pool:
            done = list(pool.map(lambda j: client(gate_client, s, j[1], job=j[0],
                                                  SLURMGUARD_GATE_TIMEOUT="60"), jobs))
        opened = sessions() - before
    finally:
        srv.stop()
    fell_back = [p.stderr for p in done if "serve not used" in p.stderr]
    assert not fell_back, fell_back[:3]
    wrong = [(node, p.returncode, p.stderr) for (_, node), p in zip(jobs, done, strict=True)
             if p.returncode != EXPECTED[node]]
    assert not wrong, wrong[:3]
    assert not [p for p in done if "store unreadable" in p.stderr]
    assert opened <= POOL_MAX, f"{opened} PostgreSQL sessions for {len(jobs)} jobs"


def test_a_client_that_gave_up_is_not_answered(tmp_path):
    """A request whose client closed before a worker reached it (it timed out and ran the
    gate itself) is dropped, not computed: in a burst, answering the abandoned ones would
    delay every job behind them."""
    gs = GateSocket({}, str(tmp_path / "g.sock"), None, workers=1)
    gs.threads[0].start()  # accepting, no worker yet: the request waits in the queue
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(tmp_path / "g.sock"))
            c.sendall(b"SGG1 job=1 nodes=n1 dry=1 config=\n")
            wait_for(lambda: gs.pending.qsize() == 1, 10, interval=0.01, what="the queued request")
        gs.threads[1].start()
        wait_for(lambda: gs.counts["abandoned"] == 1, 10, interval=0.01, what="the drop")
        assert gs.counts["answered"] == 0
    finally:
        gs.close()


def test_gone_tells_a_closed_client_from_a_waiting_one():
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"SGG1 job=1 nodes=n1 dry=1 config=\n")
        a.settimeout(5.0)
        assert a.recv(64).endswith(b"\n")
        assert not gone(a) and a.gettimeout() == 5.0  # waiting, no byte: not gone, timeout kept
        b.close()
        assert gone(a)


def test_a_full_queue_tells_the_client_busy(gate_client, tmp_path):
    """Past PENDING queued jobs serve answers "busy" at once and the client runs the gate
    itself: a bounded queue, never a hung job start."""
    s = Setup(tmp_path)
    gs = GateSocket({}, str(s.sock), str(s.cfg), workers=1)
    gs.pending = type(gs.pending)(1)  # a queue of one, and no worker draining it
    gs.threads[0].start()
    try:
        first = threading.Thread(target=client, args=(gate_client, s, "n1"),
                                 kwargs={"SLURMGUARD_GATE_TIMEOUT": "3"})
        first.start()
        wait_for(lambda: gs.pending.qsize() == 1, 10, interval=0.01, what="the first queued")
        second = client(gate_client, s, "n3")
        assert "serve not used (serve refused: busy" in second.stderr, second.stderr
        assert second.returncode == 1 and LEMON in second.stderr  # the gate ran all the same
        first.join(30)
        assert gs.counts["busy"] == 1
    finally:
        gs.close()


def test_the_docs_give_the_sockets_bounds():
    text = " ".join((REPO / "docs" / "serve.md").read_text().split())
    words = {4: "Four"}
    assert f"{words[WORKERS]} workers answer the jobs in the order they asked" in text
    assert f"Past {PENDING:,} queued jobs serve answers `busy`" in text
    assert f"holds {BACKLOG:,} connects" in text
