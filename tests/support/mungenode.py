"""A munged per test node, each with its own origin address (``munged --origin``).

On a real site every node runs its own munged, and the credentials it mints carry that
node's address. On this one machine the system munged stamps every credential 127.0.0.1, so
the node-identity tests start one more munged per test node (the site's key, a socket and pid
file under the test's directory, ``--origin 127.0.0.N``); a node's client mints through its
own socket (``hooks.munge_socket``). Stopped by pid, never by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from support.wait import wait_for

MUNGED = "/usr/sbin/munged"
KEY = "/etc/munge/munge.key"


class NodeMunged:
    def __init__(self, root: Path, name: str, origin: str) -> None:
        self.root, self.name, self.origin = root, name, origin
        self.socket = str(root / f"munge-{name}.sock")
        self.pid_file = root / f"munged-{name}.pid"

    def start(self) -> NodeMunged:
        self.root.mkdir(parents=True, exist_ok=True)
        subprocess.run([MUNGED, "--force", f"--socket={self.socket}", f"--origin={self.origin}",
                        f"--key-file={KEY}", f"--pid-file={self.pid_file}",
                        f"--log-file={self.root / f'munged-{self.name}.log'}",
                        f"--seed-file={self.root / f'munged-{self.name}.seed'}"],
                       check=True, timeout=30, capture_output=True)
        wait_for(lambda: os.path.exists(self.socket) and self.pid_file.exists(), 10,
                 what=f"munged of {self.name}")
        return self

    def stop(self) -> None:
        try:
            os.kill(int(self.pid_file.read_text().split()[0]), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def usable() -> bool:
    """munged and a key this process can read (root), as the tests need."""
    return os.access(MUNGED, os.X_OK) and os.access(KEY, os.R_OK)
