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

One reader for all replicas: with :meth:`CachedNodes.share`, the replica that leads (the
holder of serve's leader lock, serve/leader.py) is the only one that reads Slurm; it publishes
each read in the store (``store.slurm_views``: the text of ``scontrol show node -o``,
compressed, with the time its read began), and every other replica looks at the published
head every ttl / 2 and takes the text only when its digest moved. slurmctld then sees 60 / ttl
node reads a minute whatever the number of replicas. A follower whose published view is older
than ``serve.slurm_view_max_age`` (no leader: killed and not yet replaced, or a leader that
cannot read Slurm; or the store does not answer) reads Slurm itself every ttl until a fresh
view appears again: the cost is bounded per replica in that case as before, never zero views.

The period grows with the table: every ttl for up to ``serve.slurm_view_entries_per_ttl``
node entries (4,096), proportionally less often beyond (ttl x entries / that). A read packs
every entry, so slurmctld's time in one read grows with the fleet; reading less often as it
grows keeps serve's share of slurmctld about flat in N (at 10,000 entries: a read every 4.9 s
at ttl 2). A follower's ``max_age`` stretches likewise (at least 2.5 periods), so a large
fleet's followers do not take a leader's view for stale and read Slurm themselves.

Every other call (one node, drain, jobs, ...) goes to the adapter unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slurmguard.errors import SlurmguardError

if TYPE_CHECKING:
    from slurmguard.store.api import Store

log = logging.getLogger("slurmguard.serve")

_CHANGES = ("drain", "undrain", "resume_ours", "reboot", "drain_ours_down")
VIEW = "nodes"  # the published view's name in store.slurm_views


def read_period(ttl: float, entries: int, entries_per_ttl: int) -> float:
    """Seconds between two reads of a node table of ``entries``: ttl, times entries /
    entries_per_ttl for a larger table (0: every ttl whatever the size)."""
    if entries_per_ttl <= 0 or entries <= entries_per_ttl:
        return ttl
    return ttl * entries / entries_per_ttl


class SharedView:
    """The node table shared through the store: ``leading()`` says whether this replica is
    the one that reads Slurm and publishes (serve's Leader.is_leader); the others follow the
    published view while it is at most ``max_age`` s old (by its read time, on the
    controllers' synchronized clocks)."""

    def __init__(self, store: Store, leading: Callable[[], bool], *, label: str,
                 max_age: float, clock: Callable[[], float] = time.time) -> None:
        self.store, self.leading, self.label = store, leading, label
        self.max_age, self.clock = max_age, clock
        self._failed = False  # a store fault is logged once per run of faults

    def publish(self, text: str, read_at: float, digest: str) -> None:
        try:
            self.store.slurm_views.publish(VIEW, text, read_at=read_at, publisher=self.label,
                                           digest=digest)
            self._failed = False
        except SlurmguardError as exc:  # the followers fall back to Slurm past max_age
            if not self._failed:
                log.warning("slurm view not published: %s", exc)
            self._failed = True

    def fresh_head(self, period: float = 0.0) -> Any:
        """The published head when its read is at most max_age old (at least 2.5 of the
        leader's ``period``: a large table is read less often), else None."""
        try:
            head = self.store.slurm_views.head(VIEW)
        except SlurmguardError as exc:
            if not self._failed:
                log.warning("published slurm view not read: %s", exc)
            self._failed = True
            return None
        self._failed = False
        if head is None or self.clock() - head.read_at > max(self.max_age, 2.5 * period):
            return None
        return head


class CachedNodes:
    """``slurm`` (the Slurm adapter) with ``nodes()`` answered from a read at most ``ttl`` old."""

    def __init__(self, slurm: Any, ttl: float, entries_per_ttl: int = 0) -> None:
        self.slurm, self.ttl = slurm, ttl
        self.entries_per_ttl = entries_per_ttl  # 0: every ttl whatever the table's size
        self._lock = threading.Lock()  # one read at a time: waiters take its answer
        self._at = float("-inf")  # when the last read ended
        self._began = float("-inf")  # when it started
        self._view: list[Any] = []
        self._error: SlurmguardError | None = None
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self.reads = 0  # reads of the whole table from Slurm (metrics, tests)
        self.adopted = 0  # published views taken from the store (a follower's)
        self.stale_looks = 0  # a follower's looks that found no fresh published view
        self.shared: SharedView | None = None
        self._digest = ""  # of the view held, when it came from (or went to) the store
        self._memo: dict[str, Any] = {}  # record text -> NodeInfo: only changed nodes parsed
        self.following = False  # the last look found a fresh published view
        self._read_wall = float("-inf")  # time.time() the held view's read began
        self._index: dict[str, Any] = {}  # name -> NodeInfo of the held view (lookup)
        self._index_of: list[Any] | None = None  # the view _index was built from
        # Each fresh view, to serve's node-state history (serve/nodestates.py); never raises.
        self.on_view: Callable[[list[Any]], Any] | None = None
        self.counter: Any = None  # serve's slurmguard_serve_node_views_total{source}

    def share(self, shared: SharedView) -> CachedNodes:
        """Read Slurm only while ``shared.leading()``; otherwise follow the published view."""
        self.shared = shared
        return self

    @property
    def period(self) -> float:
        """Seconds between reads of the table held (:func:`read_period`)."""
        return read_period(self.ttl, len(self._view), self.entries_per_ttl)

    def _follows(self) -> bool:
        return self.shared is not None and not self.shared.leading()

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
            follows = self._follows()
            every = self.period
            with self._lock:
                if follows:
                    self._follow(began)
                # A caller's read within the last half period (after serve's own change)
                # stands for this one: the count stays 60 / period a minute plus serve's own
                # changes.
                elif began - self._began >= every / 2:
                    self._read()
            # Timed from this read's start, not its end, so a slow read (a large table, a
            # busy slurmctld) does not stretch the period; never closer than half a ttl. A
            # follower looks twice a ttl: its view is then at most 1.5 periods old.
            wait = self.ttl / 2 if follows else every
            self._stop.wait(max(began + wait - time.monotonic(), self.ttl / 2))

    def _follow(self, began: float) -> None:  # under self._lock
        """Take the published view when it is fresh; read Slurm (at most once a ttl) when not."""
        assert self.shared is not None
        head = self.shared.fresh_head(self.period)
        if head is None:
            self.stale_looks += 1
            if self.following:
                log.warning("slurm view: no published view newer than %.0f s; reading Slurm "
                            "on this replica until one appears", self.shared.max_age)
            self.following = False
            if began - self._began >= self.period * 0.9:
                self._read()
            return
        if head.digest != self._digest:
            try:
                got = self.shared.store.slurm_views.text(VIEW)
            except SlurmguardError:
                got = None
            if got is None:  # gone between the two looks: the next look decides
                return
            from slurmguard.adapters.slurm.commands import nodes_from_text

            try:
                self._view, self._error = nodes_from_text(got[1], self._memo), None
            except SlurmguardError as exc:  # a text serve itself parsed: not expected
                log.error("published slurm view not parsed: %s", exc)
                return
            self._digest = got[0]
            self._read_wall = head.read_at
            self.adopted += 1
            self._count("store")
            self._seen()
        if not self.following:
            log.info("slurm view: following the view %s publishes", head.publisher)
        self._read_wall = max(self._read_wall, head.read_at)  # the same text, read again
        self.following = True
        self._at = time.monotonic()

    def _count(self, source: str) -> None:
        if self.counter is not None:
            self.counter.labels(source=source).inc()

    def _read(self) -> None:  # under self._lock
        self.reads += 1
        self._count("slurm")
        self._began = time.monotonic()
        wall = time.time()
        publish = self.shared is not None and self.shared.leading()
        # The text, parsed record by record against the last read's (the memo): at 10,000
        # entries a whole parse was about a second of serve's CPU a read.
        text_of = getattr(self.slurm, "nodes_text", None)
        try:
            if text_of is not None:
                from slurmguard.adapters.slurm.commands import nodes_from_text

                text = text_of()
                self._view, self._error = nodes_from_text(text, self._memo), None
                self._digest = ""
                if publish:
                    from slurmguard.store.slurmviews import digest_of

                    self._digest = digest_of(text)
                    assert self.shared is not None
                    self.shared.publish(text, wall, self._digest)
            else:
                self._view, self._error = list(self.slurm.nodes()), None
                self._digest = ""
            self._read_wall = wall
        except SlurmguardError as exc:  # a failing controller is not asked faster
            self._view, self._error = [], exc
        self._at = time.monotonic()
        self._seen()

    def _seen(self) -> None:
        if self._error is None and self.on_view is not None:
            try:
                self.on_view(self._view)
            except Exception:  # noqa: BLE001 - the history never stops the view
                log.exception("node-state history: view not recorded")

    def nodes(self, nodeset: str | None = None) -> list[Any]:
        if nodeset is not None:
            return list(self.slurm.nodes(nodeset))
        with self._lock:
            self._fresh()
            return list(self._view)

    def lookup(self, name: str) -> tuple[Any, float]:
        """(``name``'s entry in the held view or None, the time.time() that view's read
        began): a node's health check asks for its own state (``POST /nodestate``) instead of
        reading Slurm, and thousands of nodes ask; the view is read on its schedule, never
        for them. Raises the view's error as :meth:`nodes` does."""
        with self._lock:
            self._fresh()
            if self._index_of is not self._view:
                self._index = {n.name: n for n in self._view}
                self._index_of = self._view
            return self._index.get(name), self._read_wall

    def _fresh(self) -> None:  # under self._lock
        """Read when the view is past its age; raise the last read's error."""
        now = time.monotonic()
        # With the refresher running, a view up to two periods old is its to renew:
        # reading here too would make the count follow the callers again.
        stale = self.period * (2 if self._refresher is not None else 1)
        if now - self._at >= stale:
            self._read()
        if self._error is not None:
            raise self._error

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
