"""A test server's accept loop that can be stopped safely.

A listening socket closed by another thread while a thread is blocked in accept() on it frees
its descriptor number, and a stop and continue of the process (SIGSTOP, a cgroup freeze)
restarts that accept() on whatever socket holds the number next: the loop then answers
connections meant for another server. The suite saw it once: test_agent's stand-in agent,
closed minutes earlier, answered a Kubernetes client's request to test_observe_cluster's API
server ("SGA1 1 ... 500 0" as the HTTP status line). So the loop accepts with a timeout,
and closes the socket itself, on its way out; ``close()`` stops it and waits for that.
slurmguard's gate socket does the same (slurmguard/gate/sock.py).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class AcceptLoop:
    """Calls ``handle(conn)`` for each connection to ``sock`` (in the loop's thread, one at
    a time, the connection blocking) until ``close()``."""

    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], None],
                 period: float = 0.2) -> None:
        self.sock, self.handle = sock, handle
        self.stop = threading.Event()
        sock.settimeout(period)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    conn, _ = self.sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.settimeout(None)
                self.handle(conn)
        finally:
            self.sock.close()

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the accept loop did not stop"
