"""The private unix socket setup shared by the node agent and serve's gate socket: mode 0600,
a private directory, a stale socket replaced, a live one refused (with real sockets)."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest

from slurmguard import unixsock
from slurmguard.errors import EXIT_CONFIG, ConfigError
from slurmguard.gate.sock import GateSocket
from slurmguard.node.agent import bind_socket


def _stale(path: str) -> None:
    """A socket file whose server is gone (closed without unlinking: a killed server)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()


def test_socket_is_private_in_a_private_directory(tmp_path):
    path = str(tmp_path / "run" / "x.sock")
    srv = unixsock.bind_private(path, key="k.socket", server="x")
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
    finally:
        srv.close()


def test_directory_writable_by_others_is_refused(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(ConfigError) as e:
        unixsock.bind_private(str(d / "x.sock"), key="k.socket", server="x")
    assert str(e.value) == f"k.socket: directory {d} is writable by others"
    assert not (d / "x.sock").exists()


def test_stale_socket_is_replaced(tmp_path):
    path = str(tmp_path / "x.sock")
    _stale(path)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(ConnectionRefusedError):
        c.connect(path)  # nobody answers a stale socket
    srv = unixsock.bind_private(path, key="k.socket", server="x")
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)  # the new server answers
        c.close()
    finally:
        srv.close()


@pytest.mark.parametrize("bind,message", [
    (lambda p: bind_socket(p), "agent.socket: {p}: another agent is answering there"),
    (lambda p: GateSocket({}, p, None), "serve.gate_socket: {p}: another serve is answering there"),
])
def test_live_socket_is_refused_for_agent_and_gate(tmp_path, bind, message):
    path = str(tmp_path / "live.sock")
    live = unixsock.bind_private(path, key="k.socket", server="x")
    try:
        with pytest.raises(ConfigError) as e:
            bind(path)
        assert str(e.value) == message.format(p=path) and e.value.exit_code == EXIT_CONFIG
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)  # the live server kept its socket
        c.close()
    finally:
        live.close()


def test_gate_socket_takes_over_a_stale_one(tmp_path):
    path = str(tmp_path / "gate.sock")
    _stale(path)
    gs = GateSocket({}, path, None)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        gs.close()
    assert not os.path.exists(path)  # close removes it


def test_peer_uid_and_first_line(tmp_path):
    path = str(tmp_path / "x.sock")
    srv = unixsock.bind_private(path, key="k.socket", server="x")
    got: list[object] = []

    def serve_two() -> None:
        for _ in range(2):
            conn, _ = srv.accept()
            with conn:
                got.append((unixsock.peer_uid(conn), unixsock.read_line(conn, 1024)))

    t = threading.Thread(target=serve_two)
    t.start()
    for data in (b"HELLO a=1\nrest", b""):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        c.sendall(data)
        c.close()
    t.join(10)
    srv.close()
    assert got == [(os.geteuid(), "HELLO a=1"), (os.geteuid(), None)]


# A process that closed its gate socket, opened a TCP listener (which takes the freed
# descriptor number), was stopped and continued, and then accepts on its listener itself.
_AFTER_CLOSE = r"""
import socket, sys, time
from slurmguard.gate.sock import GateSocket
gs = GateSocket({}, sys.argv[1], None)
gs.start()
time.sleep(0.3)  # the accept loop is in accept()
gs.close()
tcp = socket.create_server(("127.0.0.1", 0))
print("ready", flush=True)
sys.stdin.readline()  # the test stops and continues us meanwhile
c = socket.create_connection(tcp.getsockname())
c.sendall(b"GET / HTTP/1.0\r\n\r\n")
tcp.settimeout(5)
try:
    conn, _ = tcp.accept()
    print("mine", conn.recv(100)[:3].decode(), flush=True)
except TimeoutError:
    print("taken", flush=True)
print("threads", sum(t.is_alive() for t in gs.threads), flush=True)
"""


def test_a_closed_gate_socket_never_accepts_for_the_next_socket(tmp_path):
    """After close() no thread of the gate socket is left in accept(): a stop and continue
    of serve's process then cannot restart one on a descriptor number another socket took."""
    import signal
    import subprocess
    import sys
    import time

    from support.helpers import sg_env

    p = subprocess.Popen([sys.executable, "-c", _AFTER_CLOSE, str(tmp_path / "g.sock")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=sg_env())
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "ready"
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(0.2)
        os.kill(p.pid, signal.SIGCONT)
        p.stdin.write("go\n")
        p.stdin.flush()
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    assert out.split("\n")[:2] == ["mine GET", "threads 0"], out
