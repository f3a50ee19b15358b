"""One read of Slurm's node table for all of serve (docs/serve.md, "What serve costs
slurmctld").

serve reads the node table for three things: the jobs' ``GET /drains`` (every wrapper polls
every ``notice.interval``), the policy pass (woken by each ingest batch, so by every health
check and prolog record: a read per record at scale) and the blast-radius scopes. Each used
to read on its own schedule, so slurmctld's load from serve grew with the jobs (the /drains
cache's one read a second) and with the records (a read per policy wake-up). Here one
cached read, at most one per ``serve.slurm_view_ttl``, answers all of them: serve's node
reads are at most 60 / ttl a minute whatever the number of jobs, nodes or records. A drain
or undrain serve makes itself drops the cache, so its own changes show at once.

Read on demand only, that count still followed the demand below its ceiling: a quiet cluster
asked (a health check's record now and then) and a busy one asked every second, so serve's
reads grew with the job rate until they reached 60 / ttl (docs/scale.md). A refresher that
read only while someone had asked in the last minute still did, per replica: a replica that
only jobs ask (a follower answering wrappers' ``/drains``) read while jobs ran and not
between them, so the replicas reading at once, 1 or 2, followed the job rate (51 and 67
reads per 120 s at 300 and 1,200 jobs/h, 1,024 nodes); and it timed each read from the end
of the last, so a slow read stretched the period. Now :meth:`CachedNodes.start` runs a
refresher that reads the table every ttl, timed from each read's start, whether or not
anyone asks, and a caller reads only when that view is older than two ttl (the refresher
fell behind) or was dropped: serve's node reads are at most 60 / ttl a minute per replica
from its start (fewer only when a read outlasts the ttl), whatever the jobs, records and
nodes. The price is that rate paid on an idle
cluster too (docs/serve.md, "What serve costs slurmctld").

Every other call (one node, drain, jobs, ...) goes to the adapter unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from slurmguard.errors import SlurmguardError

log = logging.getLogger("slurmguard.serve")

_CHANGES = ("drain", "undrain", "resume_ours", "reboot", "drain_ours_down")


class CachedNodes:
    """``slurm`` (the Slurm adapter) with ``nodes()`` answered from a read at most ``ttl`` old."""

    def __init__(self, slurm: Any, ttl: float) -> None:
        self.slurm, self.ttl = slurm, ttl
        self._lock = threading.Lock()  # one read at a time: waiters take its answer
        self._at = float("-inf")  # when the last read ended
        self._began = float("-inf")  # when it started
        self._view: list[Any] = []
        self._error: SlurmguardError | None = None
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self.reads = 0  # reads of the whole table (metrics, tests)
        # Each fresh view, to serve's node-state history (serve/nodestates.py); never raises.
        self.on_view: Callable[[list[Any]], Any] | None = None

    def start(self) -> CachedNodes:
        """Refresh the view every ttl in a thread of its own, asked for or not."""
        if self._refresher is None and self.ttl > 0:
            self._refresher = threading.Thread(target=self._refresh, name="slurm-view",
                                               daemon=True)
            self._refresher.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _refresh(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with self._lock:
                # A caller's read within the last half ttl (after serve's own change) stands
                # for this one: the count stays 60 / ttl a minute plus serve's own changes.
                if began - self._began >= self.ttl / 2:
                    self._read()
            # Timed from this read's start, not its end, so a slow read (a large table, a
            # busy slurmctld) does not stretch the period; never closer than half a ttl.
            self._stop.wait(max(began + self.ttl - time.monotonic(), self.ttl / 2))

    def _read(self) -> None:  # under self._lock
        self.reads += 1
        self._began = time.monotonic()
        try:
            self._view, self._error = list(self.slurm.nodes()), None
        except SlurmguardError as exc:  # a failing controller is not asked faster
            self._view, self._error = [], exc
        self._at = time.monotonic()
        if self._error is None and self.on_view is not None:
            try:
                self.on_view(self._view)
            except Exception:  # noqa: BLE001 - the history never stops the view
                log.exception("node-state history: view not recorded")

    def nodes(self, nodeset: str | None = None) -> list[Any]:
        if nodeset is not None:
            return list(self.slurm.nodes(nodeset))
        with self._lock:
            now = time.monotonic()
            # With the refresher running, a view up to two ttl old is its to renew: reading
            # here too would make the count follow the callers again.
            stale = self.ttl * (2 if self._refresher is not None else 1)
            if now - self._at >= stale:
                self._read()
            if self._error is not None:
                raise self._error
            return list(self._view)

    def nodes_now(self) -> list[Any]:
        """A fresh read of the whole table (repair's pass: a reboot's proof is a new BootTime,
        which a view up to ``ttl`` old may not show yet); it refreshes the shared view too."""
        self.invalidate()
        return self.nodes()

    def invalidate(self) -> None:
        with self._lock:
            self._at = float("-inf")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.slurm, name)
        if name not in _CHANGES:
            return attr

        def changed(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self.invalidate()

        return changed
