"""Drain notices for `slurmguard run`: learn within seconds that a node of the job was drained.

A node drained under a running job (by a health check, the lemon or risk rules, burn-in, an
admin, the Kubernetes reconciler) keeps running the job until something crashes, and the work
since the last checkpoint is lost. The wrapper asks, every ``interval`` seconds, whether any
node of its job carries a drain, and tells the training processes at once (slurmguard.job.
wrapper acts on the answer).

Where it asks, in order:

1. serve's ``GET /drains?nodes=SET&since=T`` (slurmguard.serve.drains): the store's drain
   events plus serve's own cached view of Slurm, one answer for every job of the cluster, so
   a thousand wrappers do not each poll slurmctld;
2. Slurm itself (``scontrol show node -o SET``), when serve is not configured, cannot be
   reached, answers something malformed, or says its own Slurm view failed. While serve is
   configured but not answering, this fallback is spread and slowed so that an outage does
   not turn every job into a slurmctld poller at once: its first read comes at a random
   point of one ``slurm_interval``, and each further one after twice the last wait (times a
   random 0.75-1.25), up to ``slurm_interval_max``; serve is still asked at its own pace, and
   its first answer resets this (docs/requeue.md, "What a serve outage costs slurmctld").

When neither answers, the state is *unknown*, said once per outage, and never read as
"clean": the next poll asks again. Each node gives one notice per run (deduplicated), and an
answer that names a node outside the job, an out-of-range time or a multi-line reason is
refused whole, in one line, as hostile or broken.
"""

from __future__ import annotations

import json
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from slurmguard.errors import InputError, SlurmguardError
from slurmguard.nodeset import fold, is_node_name

MAX_REASON = 300  # a drain reason is one short line (sinfo -R); more is not a reason
_CLOCK_SKEW = 300.0  # s: a drain time this far in the future is refused


@dataclass(frozen=True)
class Drain:
    """A drain of one node of the job, as a source reported it."""

    node: str
    reason: str
    at: float | None  # when the drain was set (the source's clock), when known
    actor: str = ""  # who set it, when the source knows
    via: str = ""  # serve | slurm


@dataclass(frozen=True)
class Notice:
    """A drain the wrapper learned about, and when."""

    drain: Drain
    seen_at: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self.drain)
        d["seen_at"] = round(self.seen_at, 3)
        if self.drain.at is not None:
            d["latency_s"] = round(max(0.0, self.seen_at - self.drain.at), 3)
        return d


class AskError(Exception):
    """A source could not say (unreachable, refused, malformed): never "no drains"."""


def _reason(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}.reason: expected a string, got {type(value).__name__}")
    if len(value) > MAX_REASON or any(c in value for c in "\r\n\0"):
        raise InputError(f"{where}.reason: expected one line of at most {MAX_REASON} "
                         f"characters, got {value[:40]!r}...")
    return value


def parse_serve_answer(doc: object, asked: set[str], now: float) -> list[Drain]:
    """The drains of serve's ``/drains`` answer; InputError (one line) when anything in it is
    malformed or names a node that was not asked about; AskError when serve says its answer
    is incomplete (its Slurm view failed)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("drains"), list):
        raise InputError("serve /drains: expected {\"drains\": [...]}, got "
                         f"{json.dumps(doc)[:60]}")
    if len(doc["drains"]) > 4 * len(asked) + 16:
        raise InputError(f"serve /drains: {len(doc['drains'])} drains for {len(asked)} nodes")
    out = []
    for i, d in enumerate(doc["drains"]):
        where = f"serve /drains: drains[{i}]"
        if not isinstance(d, dict):
            raise InputError(f"{where}: expected an object, got {type(d).__name__}")
        node = d.get("node")
        if not is_node_name(node) or node not in asked:
            raise InputError(f"{where}.node: not a node of this job: {str(node)[:60]!r}")
        at = d.get("at")
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))
                               or not math.isfinite(at) or not 0 < at <= now + _CLOCK_SKEW):
            raise InputError(f"{where}.at: expected a time not in the future, got {at!r}")
        actor = d.get("actor", "")
        if not isinstance(actor, str) or len(actor) > 80 or not actor.isprintable():
            raise InputError(f"{where}.actor: expected a short name, got {str(actor)[:40]!r}")
        out.append(Drain(node, _reason(d.get("reason", ""), where),
                         None if at is None else float(at), actor, "serve"))
    if doc.get("complete") is False:
        raise AskError(f"serve could not ask Slurm: {str(doc.get('error', ''))[:120]}")
    return out


def serve_asker(url: str, timeout: float, ca: str = "", auth: Any = None,
                job: str = "") -> Callable[[Sequence[str], float], list[Drain]]:
    """Ask serve at ``url`` (its base, e.g. http://ctl:8742) for drains of nodes since a time;
    an https URL is verified against ``ca`` (serve.tls_ca) like every client of serve.

    serve shows node state only to a caller with a credential (docs/security.md): ``auth`` is
    the job token, or a signer of the request target (serve_client.munge_signer: the job's
    user's MUNGE credential, sent from the node's address); ``job`` the job's id, which serve
    checks the nodes and the signer against."""
    import http.client
    import urllib.parse

    from slurmguard.adapters.serve_client import DeliveryError, connection

    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InputError(f"notice.serve_url: not an http(s) URL: {url!r}")

    def ask(nodes: Sequence[str], since: float) -> list[Drain]:
        fields = {"nodes": fold(nodes), "since": f"{since:.3f}"}
        if job:
            fields["job"] = job
        target = f"{u.path.rstrip('/')}/drains?{urllib.parse.urlencode(fields)}"
        headers, source = {}, ""
        try:
            if callable(auth):
                headers["Authorization"] = auth(target.encode())
                source = auth.source_address() if hasattr(auth, "source_address") else ""
            elif auth:
                headers["Authorization"] = f"Bearer {auth}"
            conn = connection(url, timeout, ca, source)
        except DeliveryError as exc:
            raise AskError(str(exc)) from None
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
            body = resp.read(1 << 20)
        except (OSError, http.client.HTTPException) as exc:
            raise AskError(f"serve unreachable: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200:
            raise AskError(f"serve answered {resp.status}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise AskError("serve /drains: answer is not JSON") from None
        try:
            return parse_serve_answer(doc, set(nodes), time.time())
        except InputError as exc:
            raise AskError(f"refused: {exc.message}") from None

    return ask


def slurm_asker(cli: Any) -> Callable[[Sequence[str], float], list[Drain]]:
    """Ask Slurm (``scontrol show node -o SET``) which nodes of the job carry a drain now."""

    def ask(nodes: Sequence[str], since: float) -> list[Drain]:
        try:
            infos = cli.nodes(fold(nodes))
        except SlurmguardError as exc:
            raise AskError(f"Slurm: {exc.message}") from None
        asked = set(nodes)
        out = []
        for n in infos:
            if n.name in asked and n.drained:
                at = _slurm_time(n.reason_time)
                out.append(Drain(n.name, n.reason[:MAX_REASON].replace("\n", " "), at,
                                 n.reason_user, "slurm"))
        return out

    return ask


def _slurm_time(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


class NoticeWatch:
    """Polls the sources on a thread of its own (a slow source never delays the wrapper's
    loop); :meth:`take` hands over new notices and log lines.

    ``askers`` are (name, ask, interval) in order of preference. A later one (Slurm, when
    serve is down) is a fallback: it is asked at most once per its own wait, which starts at
    a random fraction of its interval and doubles (jittered) after each of its answers up to
    ``backoff_max`` while the first asker keeps failing, so the fallback neither hammers
    slurmctld from every job at serve's pace nor from all jobs in the same second."""

    def __init__(self, nodes: Sequence[str], since: float,
                 askers: Sequence[tuple[str, Callable[[Sequence[str], float], list[Drain]], float]],
                 *, backoff_max: float | None = None,
                 rng: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nodes, self.since, self.askers = list(nodes), since, list(askers)
        self.backoff_max, self.rng, self.clock = backoff_max, rng, clock
        self._wait: dict[str, float] = {}  # fallback -> its current wait (s)
        self._due: dict[str, float] = {}  # fallback -> when it may be asked next (clock)
        self.seen: set[str] = set()
        self.unknown = False  # the last poll reached no source
        self.source: str | None = None  # the source of the last answer
        self._q: queue.Queue[Notice | str] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sg-notice", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> tuple[list[Notice], list[str]]:
        notices: list[Notice] = []
        lines: list[str] = []
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return notices, lines
            if isinstance(item, Notice):
                notices.append(item)
            else:
                lines.append(item)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.poll_once())

    def poll_once(self) -> float:
        """Ask the first source that answers; queue a notice per newly drained node. Returns
        the seconds to wait before the next poll."""
        errors = []
        for i, (name, ask, interval) in enumerate(self.askers):
            if i and self.backoff_max is not None:
                due = self._due.setdefault(name, self.clock() + self.rng() * interval)
                if self.clock() < due:  # not yet: the preferred source again at its pace
                    return min(self.askers[0][2], due - self.clock())
            try:
                drains = ask(self.nodes, self.since)
            except AskError as exc:
                errors.append(f"{name}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 -- a bug here must not end the job
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            finally:
                if i and self.backoff_max is not None:
                    self._backoff(name, interval)
            if i == 0:  # the preferred source answers: the fallbacks start over
                self._wait.clear()
                self._due.clear()
            if name != self.source and (self.source is not None or errors or self.unknown):
                self._q.put(f"drain state now from {name}"
                            + (f" ({'; '.join(errors)})" if errors else ""))
            self.source, self.unknown = name, False
            now = time.time()
            for d in drains:
                if d.node not in self.seen:
                    self.seen.add(d.node)
                    self._q.put(Notice(d, now))
            return interval
        if not self.unknown:
            self._q.put("drain state unknown: could not ask " + "; ".join(errors)
                        + " (asking again; not taken as 'no drain')")
        self.unknown, self.source = True, None
        return self.askers[0][2] if self.askers else 60.0

    def _backoff(self, name: str, interval: float) -> None:
        """After asking fallback ``name``: its next wait is twice the last (the first wait
        after an answer is ``interval``), capped at ``backoff_max``, times 0.75-1.25."""
        assert self.backoff_max is not None
        wait = self._wait[name] = min(self.backoff_max, 2 * self._wait.get(name, interval / 2))
        self._due[name] = self.clock() + wait * (0.75 + 0.5 * self.rng())
