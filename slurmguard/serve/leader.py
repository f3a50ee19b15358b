"""Which serve replica runs the periodic work (docs/serve.md, "One leader").

Every replica answers ingest, ``/permit`` and the gate; the periodic work (the policy pass,
probation marks, and whatever :meth:`slurmguard.serve.fleet.Fleet.run_periodic` gains, such as
the repair loop) runs on one: the replica holding the PostgreSQL session-level advisory lock
``serve-leader`` on a connection of its own (:class:`slurmguard.store.serial.SessionLock`).

- The others try to take it every ``serve.leader_retry`` seconds (2 s); the leader checks
  its connection as often. A lost connection is lost leadership (the server released the
  lock with the session), so two replicas never both believe it for longer than one retry.
- Takeover after the leader's process dies (kill -9, OOM, a crash): its socket closes, the
  server ends the session at once, and the next retry of another replica wins: at most
  ``leader_retry`` seconds, plus the new leader's first pass. After its host or network
  dies: the server's TCP keepalive (set on the session) ends it in about 10 s first.
- SQLite: one serve per store file; it is always the leader. A second serve on the same file
  refuses to start (:func:`single_serve`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from slurmguard.errors import ConfigError, SlurmguardError

log = logging.getLogger("slurmguard.serve")
LOCK_NAME = "serve-leader"


class Leader:
    """``is_leader`` for this replica, kept current by a thread that also writes the
    replica's heartbeat row (``store.replicas``, for `serve status`) every ``retry`` s.
    ``on_gain`` is called when leadership is taken (serve wakes its periodic work);
    ``contend=False`` (serve --no-policy): never the leader, heartbeat only."""

    def __init__(self, store: Any, *, retry: float = 2.0, label: str = "",
                 on_gain: Callable[[], None] | None = None, gauge: Any = None,
                 contend: bool = True, last_pass: Callable[[], float | None] | None = None) -> None:
        self.store, self.retry = store, retry
        self.gauge = gauge  # serve's slurmguard_serve_leader
        self.label = label or f"slurmguard-serve {socket.gethostname()} pid {os.getpid()}"
        self.on_gain, self.last_pass = on_gain, last_pass
        self.name = self.label.removeprefix("slurmguard-serve ")  # its heartbeat row
        self.since: float | None = None  # time.time() leadership was taken
        self.started = time.time()
        self._held = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_failed = False
        self.lock: Any = None
        if not contend:
            return
        if store.engine.dialect.name == "postgresql":
            from slurmguard.store.serial import SessionLock

            self.lock = SessionLock(store.engine, LOCK_NAME, label=self.label)
        else:  # SQLite: the one serve of this file (single_serve) is the leader
            self._gain()

    @property
    def is_leader(self) -> bool:
        return self._held.is_set()

    def start(self) -> None:
        if self.lock is not None:
            self.step()
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="sg-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.lock is not None:
            self.lock.close()
        self._held.clear()
        try:  # a clean stop leaves no row; a crashed replica's row goes stale (serve status)
            self.store.replicas.forget(self.name)
        except SlurmguardError as exc:
            log.warning("heartbeat row not removed: %s", exc)

    def step(self) -> None:
        """One look: check the lock when held, try to take it when not."""
        if self.is_leader:
            if not self.lock.check():
                self._held.clear()
                self.since = None
                if self.gauge is not None:
                    self.gauge.set(0)
                log.error("leader: lost the store connection; no longer the leader")
        elif self.lock.try_acquire():
            self._gain()

    def _gain(self) -> None:
        self.since = time.time()
        self._held.set()
        if self.gauge is not None:
            self.gauge.set(1)
        log.info("leader: this replica (%s) runs the periodic work", self.label)
        if self.on_gain is not None:
            self.on_gain()

    def _loop(self) -> None:
        while not self._stop.wait(self.retry):
            try:
                if self.lock is not None:
                    self.step()
            except Exception:  # noqa: BLE001  (never let the thread die: retry next time)
                log.exception("leader: check failed")
            self.beat()

    def beat(self) -> None:
        """Write this replica's heartbeat row; a store fault is logged once, not raised."""
        from slurmguard import __version__

        try:
            self.store.replicas.beat(self.name,
                                     host=socket.gethostname(), pid=os.getpid(),
                                     version=__version__, started=self.started,
                                     leader=self.is_leader,
                                     last_pass=self.last_pass() if self.last_pass else None)
            self._beat_failed = False
        except SlurmguardError as exc:
            if not self._beat_failed:
                log.warning("heartbeat not written: %s", exc)
            self._beat_failed = True

    def holder(self) -> str | None:
        """The label of the replica holding leadership now (any replica), None when none."""
        if self.lock is None:
            return self.label
        return self.lock.holder()


def single_serve(store: Any) -> Any:
    """On SQLite, hold an exclusive lock on ``<store file>.serve.lock`` for serve's life;
    raise a one-line ConfigError when another serve holds it. Returns the open file (keep
    it), or None on PostgreSQL (any number of replicas)."""
    url = store.engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = f"{os.path.abspath(url.database)}.serve.lock"
    fh = open(path, "a+")  # noqa: SIM115  (held open for serve's life)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        other = fh.read().strip() or "another process"
        fh.close()
        raise ConfigError(f"store.path: {url.database} is in use by another serve ({other}); "
                          "a SQLite store takes one serve: use PostgreSQL (store.url) for "
                          "replicas") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    fh.flush()
    return fh
