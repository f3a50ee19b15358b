"""serve's gate socket: the PrologSlurmctld fast path (docs/serve.md, "Gate fast path").

slurmctld runs PrologSlurmctld for every job; a Python process per job costs 60-90 ms of a
controller core. The compiled ``slurmguard-gate-client`` (prolog/sg_gate_client.c) asks
`slurmguard serve`, which is already running with the store open, over a unix socket; serve
answers with :func:`slurmguard.gate.answer.answer_job`, the very function `slurmguard gate` runs, with
serve's own config (the client's config path must be serve's). The client falls back to
`slurmguard gate` when serve does not answer, so the fail-open/fail-closed setting
(``gate.on_store_error``) and every refusal are the same on both paths.

Wire protocol, one request per connection (peer uid: root, serve's own, or gate_socket_user)::

    request:  SGG1 job=J nodes=NODELIST dry=0|1 config=PATH\\n
    answer:   SGG1 <exit> <len err>\\n<err bytes>SGG1 END\\n
    refusal:  SGG1 unavailable <why>\\n
"""

from __future__ import annotations

import io
import logging
import os
import pwd
import queue
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurmguard.config import Config
    from slurmguard.store.api import Store

from slurmguard import unixsock

log = logging.getLogger("slurmguard.gate.sock")
PROTO = "SGG1"


def parse_request(line: str) -> dict[str, str]:
    parts = line.rstrip("\n").split(" ")
    if not parts or parts[0] != PROTO:
        raise ValueError("not an SGG1 request")
    req = {"job": "", "nodes": "", "dry": "0", "config": ""}
    for item in parts[1:]:
        key, sep, value = item.partition("=")
        if not sep or key not in req:
            raise ValueError(f"bad request field {item[:40]!r}")
        req[key] = value
    return req


def answer(code: int, err: str) -> bytes:
    e = err.encode()
    return f"{PROTO} {code} {len(e)}\n".encode() + e + f"{PROTO} END\n".encode()


def refusal(why: str) -> bytes:
    return f"{PROTO} unavailable {' '.join(why.split())[:300]}\n".encode()


# A few workers answer in the order jobs asked (FIFO), on serve's pooled store. One thread per
# connection let a burst of 500 one-node jobs share the interpreter 500 ways: every answer
# came late, past the client's timeout, and each late client ran the Python gate beside serve
# on the same controller (tenk-read: p50 1.6 s, p99 26 s). In order, the first answer is as
# fast as one alone and the queue drains at serve's rate (docs/serve.md, "Gate fast path").
WORKERS = 4
PENDING = 4096  # queued connections at most; past that a client hears "busy" and runs the gate
BACKLOG = 1024  # the kernel's queue before accept (a full one refuses a connect: the client
                # falls back at once), capped by net.core.somaxconn
# How often the accept loop looks for a stop (slurmguard.unixsock.accept_loop).
ACCEPT_PERIOD = 0.5


class GateSocket:
    """Threads answering gate requests on ``path`` with serve's config and ``store``."""

    def __init__(self, cfg: Config, path: str, config_path: str | None, user: str = "",
                 store: Store | None = None, workers: int = WORKERS) -> None:
        self.cfg = cfg
        self.path = path
        self.store = store
        self.config_path = os.path.realpath(config_path) if config_path else ""
        self.allowed = {0, os.geteuid()}
        owner = None
        if user:
            pw = pwd.getpwnam(user)
            owner = (pw.pw_uid, pw.pw_gid)
            self.allowed.add(pw.pw_uid)
        # 0755 directory: the gate_socket_user (slurmctld's user) must reach the socket.
        self.sock = unixsock.bind_private(path, key="serve.gate_socket", server="serve",
                                          backlog=BACKLOG, dir_mode=0o755, owner=owner)
        self.stop = threading.Event()
        self.pending: queue.Queue[socket.socket | None] = queue.Queue(PENDING)
        # answered, abandoned (the client had given up and run the gate itself), busy
        self.counts = {"answered": 0, "abandoned": 0, "busy": 0}
        self._count_lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, name="gate-socket", daemon=True)]
        self.threads += [threading.Thread(target=self._work, name=f"gate-worker-{i}", daemon=True)
                         for i in range(max(1, workers))]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        accept = self.threads[0]
        if accept.is_alive():
            accept.join(ACCEPT_PERIOD * 10)  # it closes the socket on its way out
        else:  # never started (or already ended, having closed it)
            self.sock.close()
        unixsock.remove(self.path)
        for _ in self.threads[1:]:
            try:
                self.pending.put_nowait(None)
            except queue.Full:
                break  # the workers are daemons: they end with serve

    def _loop(self) -> None:
        unixsock.accept_loop(self.sock, self._queue, self.stop, ACCEPT_PERIOD)

    def _queue(self, conn: socket.socket) -> None:
        """Hand ``conn`` to a worker, or tell it serve is busy."""
        try:
            self.pending.put_nowait(conn)
            return
        except queue.Full:
            self._tally("busy")
        with conn:
            try:  # its request read first: closing on unread bytes resets the connection,
                conn.settimeout(0.5)  # and the client would not hear why
                unixsock.read_line(conn, 4096)
                conn.sendall(refusal(f"busy: {self.pending.maxsize} jobs waiting"))
            except OSError:
                pass

    def _work(self) -> None:
        while True:
            conn = self.pending.get()
            if conn is None:
                return
            self._one(conn)

    def _tally(self, what: str) -> None:
        with self._count_lock:
            self.counts[what] += 1

    def handle(self, line: str) -> bytes:
        from slurmguard.gate.answer import answer_job

        try:
            req = parse_request(line)
        except ValueError as exc:
            return refusal(str(exc))
        theirs = os.path.realpath(req["config"]) if req["config"] else ""
        if theirs != self.config_path:
            return refusal(f"config {theirs or '(default)'} is not serve's {self.config_path or '(default)'}")
        env = {"SLURM_JOB_ID": req["job"] or "?", "SLURM_JOB_NODELIST": req["nodes"]}
        err = io.StringIO()
        try:
            code = answer_job(self.cfg, env, dry_run=req["dry"] == "1", err=err, store=self.store)
        except Exception as exc:  # noqa: BLE001 - `slurmguard gate` says it properly
            return refusal(f"{type(exc).__name__}: {exc}")
        return answer(code, err.getvalue())

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5.0)
                uid = unixsock.peer_uid(conn)
                if uid not in self.allowed:
                    conn.sendall(refusal(f"uid {uid} may not ask"))
                    return
                line = unixsock.read_line(conn, 1 << 20)
                if line is None:
                    return
                if gone(conn):  # it waited past its timeout: the job was gated without us
                    self._tally("abandoned")
                    return
                conn.sendall(self.handle(line))
                self._tally("answered")
            except OSError:
                return


def gone(conn: socket.socket) -> bool:
    """Whether the client has closed its end (it sends one line, then only reads)."""
    timeout = conn.gettimeout()
    conn.setblocking(False)  # a socket with a timeout would wait for a byte before peeking
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        conn.settimeout(timeout)
