"""A private unix socket server: one setup for the node agent and serve's gate socket.

Both answer root (and a configured peer) on a local stream socket, so both need the same
care: the socket lives in a directory nobody else can write (else someone could swap it for
their own), it is created mode 0600 with no window where it is wider (umask around bind),
and a socket file already at the path is probed first: a *stale* one (nobody listens: the
last server died) is removed, a *live* one is refused, because unlinking it would silently
cut off the server that answers there (two agents for one node, two serves on one host).
tests/test_unixsock.py holds these rules.

:func:`accept_loop` is the one way to run a listening socket's accept loop that can be
stopped: see its docstring for why the loop, not its stopper, closes the socket.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from contextlib import suppress

from slurmguard.errors import ConfigError

_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def bind_private(path: str, *, key: str, server: str, backlog: int = 64,
                 dir_mode: int = 0o700, owner: tuple[int, int] | None = None) -> socket.socket:
    """A listening unix stream socket at ``path``, mode 0600 (chowned to ``owner`` if given).

    ``key`` is the config key that named the path and ``server`` what answers there (for the
    one-line errors); ``dir_mode`` is used when the directory has to be created. Raises
    ConfigError when the directory is writable by others or another ``server`` is live there.
    """
    d = os.path.dirname(path) or "."
    os.makedirs(d, mode=dir_mode, exist_ok=True)
    st = os.stat(d)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise ConfigError(f"{key}: directory {d} is writable by others")
    _clear_stale(path, key=key, server=server)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(path)
    except OSError:
        s.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    if owner is not None:
        os.chown(path, *owner)
    s.listen(backlog)
    return s


def _clear_stale(path: str, *, key: str, server: str) -> None:
    """Remove a socket at ``path`` that nobody answers on; refuse one that is answered."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return  # not a socket: bind fails with EADDRINUSE and says so
    except FileNotFoundError:
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: its server is gone
    else:
        raise ConfigError(f"{key}: {path}: another {server} is answering there")
    finally:
        probe.close()


def remove(path: str) -> None:
    """Unlink the socket file on shutdown; already gone is fine."""
    with suppress(OSError):
        os.unlink(path)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end (SO_PEERCRED: the kernel's word, not the peer's)."""
    return _CREDS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))[1]


def read_line(conn: socket.socket, limit: int) -> str | None:
    """The first line a client sent (without its newline), reading at most about ``limit``
    bytes; None when the client closed before sending one."""
    buf = b""
    while b"\n" not in buf and len(buf) < limit:
        chunk = conn.recv(min(limit, 65536))
        if not chunk:
            return None
        buf += chunk
    return buf.split(b"\n", 1)[0].decode("utf-8", "replace")


def accept_loop(sock: socket.socket, handle: Callable[[socket.socket], None],
                stop: threading.Event, period: float) -> None:
    """Accept on ``sock`` and call ``handle(conn)`` (the connection blocking) until ``stop``
    is set, waking every ``period`` s to look; then close ``sock``, from this thread.

    Closed by another thread under a blocked ``accept()``, a socket's descriptor number is
    free for the next socket the process opens, and a stop and continue of the process
    (SIGSTOP, a cgroup freeze) restarts that ``accept()`` on the number: the loop then takes
    connections meant for another server. The suite saw it: a test's stand-in node agent
    answered a Kubernetes client's request to a later test's API server
    (tests/test_unixsock.py stops and continues a process to show the gate socket safe)."""
    sock.settimeout(period)
    try:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            handle(conn)
    finally:
        sock.close()
