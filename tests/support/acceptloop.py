"""A test server's accept loop that can be stopped safely: slurmguard.unixsock.accept_loop
(why the loop, not its stopper, closes the socket) in a thread of its own.

Seen once in the suite before: test_agent's stand-in agent, closed minutes earlier by
another thread, answered a Kubernetes client's request to test_observe_cluster's API server
("SGA1 1 ... 500 0" as the HTTP status line).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from slurmguard.unixsock import accept_loop


class AcceptLoop:
    """Calls ``handle(conn)`` for each connection to ``sock`` (in the loop's thread, one at
    a time, the connection blocking) until ``close()``."""

    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], None],
                 period: float = 0.2) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=accept_loop, args=(sock, handle, self.stop, period),
                                       daemon=True)
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the accept loop did not stop"
