"""Fleet policy inside `slurmguard serve`: after each ingest batch and every
``serve.policy_interval`` seconds, evaluate the nodes concerned and act through Slurm.

The decisions are pure (:mod:`slurmguard.policy`); this module only gathers their inputs
(store history, Slurm node states and partitions, config groups), carries out the actions
(flags, events, and drains through :func:`slurmguard.drainguard.guarded_drain`), and answers
``/permit``: a node about to drain itself asks first. Both use the same permit
(:class:`slurmguard.drainguard.StorePermit`): one blast-radius guard, one ledger, for every
drain path (docs/policy.md).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from slurmguard.contract import REASON_PREFIX
from slurmguard.drainguard import WOULD_APPLIED, StorePermit, Verdict, guarded_drain
from slurmguard.errors import InputError, SlurmguardError
from slurmguard.observe import WOULD_UNDRAIN_APPLIED
from slurmguard.policy.blast import DrainRequest, cause_key
from slurmguard.policy.blast import scopes as blast_scopes
from slurmguard.policy.engine import SlurmState, plan
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.types import Action
from slurmguard.repair.loop import run_pass as repair_pass
from slurmguard.store.api import Store
from slurmguard.store.records import validate_node
from slurmguard.wouldledger import WOULD_ACT, end_episodes, record_would, withheld_to_ledger

if TYPE_CHECKING:
    from slurmguard.config import Config

log = logging.getLogger("slurmguard.serve")

ACTOR = "slurmguard"
_CHECK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
_SCOPES_TTL = 30.0
_NEWS_WINDOW = 120.0


class Fleet:
    def __init__(self, cfg: Config, store: Store, slurm: Any = None, metrics: Any = None) -> None:
        from slurmguard.metrics.registry import ServeMetrics

        self.cfg = cfg
        self.store = store
        self.metrics: ServeMetrics = metrics or ServeMetrics()
        self.pcfg = cfg.section("policy")
        self.params = PolicyParams.from_section(self.pcfg)
        self.interval = float(cfg["serve.policy_interval"])
        # At least this long from one pass's start to the next incremental one's: records
        # arriving meanwhile are evaluated together (docs/serve.md, `policy_min_gap`).
        self.min_gap = float(cfg["serve.policy_min_gap"])
        if slurm is None:
            from slurmguard.adapters.slurm.commands import SlurmCLI

            slurm = SlurmCLI.from_config(cfg)
        self.slurm = slurm
        inner = getattr(slurm, "slurm", slurm)  # serve's CachedNodes wraps the adapter
        if hasattr(inner, "on_withheld"):  # observe mode: what was withheld, to the ledger
            inner.on_withheld = self._withheld
        self.lock = threading.RLock()
        self._scopes: tuple[float, dict[str, frozenset[str]]] = (float("-inf"), {})
        self._scopes_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pending: set[str] = set()
        self._thread: threading.Thread | None = None
        self.leader: Any = None
        self._full_now = False
        self._news: dict[str, float] = {}
        self.last_pass: float | None = None
        self.wakeups = 0  # looks of the periodic thread (tests: a replica that does not lead sleeps)
        # More leader-only periodic work, run after each full policy pass (run_periodic).
        self.periodic: list[Callable[[], None]] = [self.repair]

    # -- life cycle
    def start(self, leader: Any = None) -> None:
        """Start the periodic work's thread. ``leader``: serve/leader.py's Leader (None: this
        process is the only one, e.g. tests)."""
        self.leader = leader
        if leader is not None:
            leader.on_gain = self._on_gain
        self._thread = threading.Thread(target=self._loop, name="sg-policy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def is_leader(self) -> bool:
        return self.leader is None or self.leader.is_leader

    def _on_gain(self) -> None:
        self._full_now = True  # a new leader starts with a full pass
        for work in self.periodic:  # work that keeps state per leadership starts it afresh
            gain = getattr(work, "on_gain", None)
            if gain is not None:
                gain()
        self._wake.set()

    def _loop(self) -> None:
        # Nodes of fresh records are evaluated as soon as the writer hands them over; all
        # active nodes every `interval`; with replicas, the leader also looks every
        # leader_retry s for nodes whose records another replica stored. The writer never
        # waits for Slurm.
        try:
            self._cached_scopes()  # warm: the first /permit answers without waiting on Slurm
        except SlurmguardError as exc:
            log.warning("policy: Slurm unavailable at start: %s", exc)
        next_full = time.monotonic() + self.interval
        last_pass = float("-inf")
        while not self._stop.is_set():
            poll = self.leader.retry if self.leader is not None and self.leader.lock else None
            wait = next_full - time.monotonic()
            self._wake.wait(max(0.0, wait if poll is None else min(wait, poll)))
            self._wake.clear()
            self.wakeups += 1
            if self._stop.is_set():
                break
            # Woken by every ingest batch: at 10,000 nodes that is tens a second, and each
            # incremental pass reads the fleet's view, so passes wait out min_gap and take
            # every record that came meanwhile in one pass.
            gap = last_pass + self.min_gap - time.monotonic()
            if gap > 0 and not self._full_now and time.monotonic() < next_full \
                    and self._stop.wait(gap):
                break
            nodes = self._take_pending()
            if not self.is_leader:
                # The leader evaluates them: it looks at what every replica stored. The full
                # pass is not this replica's to schedule, but its time is: left in the past,
                # the wait above was 0 and a replica that did not lead spun here, a core's
                # worth of Python from policy_interval after its start (docs/serve.md).
                next_full = time.monotonic() + self.interval
                continue
            full = self._full_now or time.monotonic() >= next_full
            if full:
                self._full_now = False
                next_full = time.monotonic() + self.interval
            if full or nodes:
                last_pass = time.monotonic()
            self.run_periodic(nodes, full=full, others=poll is not None)

    def run_periodic(self, nodes: set[str], *, full: bool, others: bool = False) -> None:
        """The leader-only periodic work, in one place: the policy pass over ``nodes`` (and
        every active node when ``full``; with ``others``, the nodes other replicas stored
        records of), probation marks, and each of ``self.periodic`` (later work such as the
        repair loop registers there) on full passes. Never raises."""
        try:
            if others:
                nodes |= self._others_news()
            if full:
                nodes |= set(self.store.nodes.active(time.time() - self.params.window))
            if not nodes and not full:
                return  # nothing new: not a pass
            t0 = time.monotonic()
            self.evaluate(nodes)
            self.metrics.policy_pass_duration.labels(
                kind="full" if full else "incremental").observe(time.monotonic() - t0)
            self.metrics.policy_passes.labels(result="ok").inc()
            self.last_pass = time.time()
        except Exception:
            self.metrics.policy_passes.labels(result="failed").inc()
            log.exception("policy pass failed")
        for work in self.periodic if full else ():
            try:
                work()
            except Exception:
                log.exception("periodic work %s failed", getattr(work, "__name__", work))

    def repair(self) -> None:
        """Autonomous repair's pass (slurmguard/repair/loop.py), on the leader after each full
        policy pass."""
        repair_pass(self)

    def _others_news(self) -> set[str]:
        """Nodes with a run newer than this leader has evaluated, stored by any replica in the
        last _NEWS_WINDOW s (older ones wait for the next full pass)."""
        seen = self.store.nodes.seen_since(time.time() - _NEWS_WINDOW)
        fresh = {n for n, at in seen.items() if self._news.get(n) != at}
        self._news = seen
        return fresh

    # -- inputs
    def _slurm_view(self) -> tuple[dict[str, frozenset[str]], dict[str, Any]]:
        """Scopes (fleet, partitions, config groups) and each node's NodeInfo, from Slurm."""
        infos = {n.name: n for n in self.slurm.nodes()}
        frozen = blast_scopes(infos.values(), self.params.groups)
        self._scopes = (time.monotonic(), frozen)
        states = {"up": 0, "drained_slurmguard": 0, "drained_other": 0, "down": 0}
        for i in infos.values():
            key = ("down" if i.down or i.not_responding else
                   ("drained_slurmguard" if i.ours else "drained_other") if i.drained else "up")
            states[key] += 1
        for key, n in states.items():
            self.metrics.slurm_nodes.labels(state=key).set(n)
        return frozen, infos

    def _cached_scopes(self) -> dict[str, frozenset[str]]:
        """Scopes for /permit: partitions change rarely, and a permit must answer fast (a
        node waits for it inside its prolog), so a view up to _SCOPES_TTL old is used."""
        with self._scopes_lock:  # one refresh at a time, not one scontrol per waiting node
            at, scopes = self._scopes
            if time.monotonic() - at > _SCOPES_TTL:
                scopes, _ = self._slurm_view()
            return scopes

    # -- ingest hook
    def after_ingest(self, records: list[dict[str, Any]]) -> None:
        """Ledger the drains/undrains nodes did themselves, then evaluate those nodes."""
        from slurmguard.contract import reason_source

        for r in records:
            applied = str(r.get("applied", ""))
            reason = r["decision"]["reason"]
            if applied == "drained" or applied.startswith("drain failed"):
                # The ledger from what Slurm did (docs/policy.md, "The ledger"): a drain
                # only when Slurm took it, drain_failed with the error, nothing for a node
                # that was already drained or down.
                cause = cause_key(reason_source(reason) or r["hook"], reason)
                ok = applied == "drained"
                if ok:
                    self.metrics.drains.labels(cause=reason_source(reason) or "unknown",
                                               source=r["hook"]).inc()
                self.store.nodes.record_event(
                    r["node"], "drain" if ok else "drain_failed", ACTOR,
                    reason if ok else applied[:1000], source=cause, at=r["started"],
                    details={"via": r["hook"], "hook": r["hook"]})
            elif applied.startswith(WOULD_APPLIED):  # observe mode: the would-event, once
                cause = cause_key(reason_source(reason) or r["hook"], reason)
                # As when acting: the hook's drain would have asked serve's /permit, so a
                # shared fault's would-drains are held for their second look alike.
                self.store_permit(r["hook"]).would(r["node"], cause, reason, now=r["started"],
                                                   via=r["hook"], asks_as="permit")
            elif applied.startswith(WOULD_UNDRAIN_APPLIED):  # observe mode: the would-event
                record_would(self.store, r["node"], WOULD_ACT, "undrain", reason,
                             at=r["started"], details={
                                 "verb": "undrain", "via": r["hook"],
                                 "argv": ["update", f"nodename={r['node']}", "state=UNDRAIN"]})
            elif applied == "undrained":
                # reason: "<check> passes again" (decide.py): the check whose drain was cleared
                self.metrics.undrains.labels(cause=(reason.split() or ["unknown"])[0]).inc()
                self.store.nodes.record_event(r["node"], "clear", ACTOR, reason, source=r["hook"],
                                              at=r["started"], details={"hook": r["hook"]})
            if r["decision"]["action"] == "pass" and self._observes(r["node"]) \
                    and not self._kept_out(r["node"]):
                # passed again: the node's would-episodes end, those of the checks it ran
                from slurmguard.checks import BY_NAME

                passed = {x["name"] for x in r.get("results", [])
                          if x["health"] not in ("unhealthy", "error")}
                end_episodes(self.store, r["node"], f"{r['hook']} passes", at=r["started"],
                             passed=passed, checks=BY_NAME)
        with self.lock:
            self._pending.update(r["node"] for r in records)
        if self._thread is None:  # not started (tests, one-shot use): evaluate inline
            self.evaluate(self._take_pending())
        else:
            self._wake.set()

    def _observes(self, node: str) -> bool:
        observes = getattr(self.slurm, "observes", None)
        return bool(observes is not None and observes(node))

    def _kept_out(self, node: str) -> bool:
        """A lemon, or a node awaiting burn-in: acting, its drain would stand whatever its
        checks say now (no check's pass clears a lemon's drain), so a passing run does not
        end its would-episodes in observe mode; clearing the flag (burn-in, an admin) does,
        at the next pass."""
        rows = self.store.nodes.columns([node], ("lemon", "burnin_required"))
        return bool(rows) and any(bool(v) for v in rows[0])

    def _withheld(self, w: Any) -> None:
        """A Slurm call observe mode withheld (the adapter's choke point): its would-event."""
        try:
            withheld_to_ledger(self.store, w, at=time.time(), via="serve")
        except SlurmguardError as exc:
            log.warning("observe: would-event of %s %s not written: %s", w.verb,
                        ",".join(w.nodes), exc)

    def _take_pending(self) -> set[str]:
        with self.lock:
            nodes, self._pending = self._pending, set()
        return nodes

    # -- the policy pass
    def evaluate(self, nodes: Iterable[str], now: float | None = None) -> list[Action]:
        nodes = sorted(set(nodes))
        if not nodes:
            return []
        now = time.time() if now is None else now
        try:
            scopes, infos = self._slurm_view()  # outside the lock: /permit must not wait on it
        except SlurmguardError as exc:
            # Without Slurm's view nothing is drained (fail safe); lemons are still marked.
            log.warning("policy: Slurm unavailable, no drains this pass: %s", exc)
            scopes, infos = {}, {}
        with self.lock:
            views = self.store.nodes.policy_views(nodes, window=self.params.window, now=now,
                                                  scopes=scopes, blast_window=self.params.blast_window)
            bad, judged = self.store.nodes.fleet_failure_rate(window=self.params.window, now=now)
            states = {n: SlurmState(drained=i.drained, ours=i.ours, down=i.down or i.not_responding)
                      for n, i in infos.items() if n in views}
            actions = plan(views, now, self.params, fleet_rate=(bad / judged) if judged else None,
                           slurm=states)
            for a in actions:
                try:
                    self._apply(a, now, infos, scopes)
                except SlurmguardError as exc:
                    log.error("policy: %s %s failed: %s", a.kind, a.node or a.source, exc)
            self._probation_marks(views, infos)
            self._gate_risk()
            return actions

    def _apply(self, a: Action, now: float, infos: dict[str, Any],
               scopes: dict[str, frozenset[str]]) -> None:
        if a.kind == "lemon":
            self.store.nodes.set_flags(a.node, lemon=True, lemon_reason=a.reason, lemon_since=now,
                                       burnin_required=bool(self.params.burnin_after_lemon))
            self.store.nodes.record_event(a.node, "lemon", ACTOR, a.reason, source=a.source, at=now)
            self.metrics.lemons.labels(cause=a.source or "unknown").inc()
            log.warning("policy: %s is a lemon: %s", a.node, a.reason)
        elif a.kind == "drain":
            if not scopes:  # Slurm did not answer this pass: nothing is drained (fail safe)
                return
            done = guarded_drain(self.slurm, self.store_permit("policy", scopes), a.node,
                                 a.source or "lemon", a.reason, via="policy", ledger=self.store,
                                 now=now)
            if done.result == "drained":
                self.metrics.drains.labels(cause=a.source or "unknown", source="policy").inc()
                log.warning("policy: drained %s: %s", a.node, a.reason)
            elif done.result == "failed":
                log.error("policy: drain of %s failed: %s", a.node, done.detail)
        elif a.kind == "probation_end":
            self._end_probation(a.node, infos.get(a.node), a.reason, now)

    def store_permit(self, via: str, scopes: Any = None) -> StorePermit:
        """The one permit, for serve's own drains (``scopes`` of this pass) and for /permit
        (the cached scopes), decided under serve's lock and counted in serve's metrics."""
        return StorePermit(self.store, self.params, scopes if scopes is not None else self._cached_scopes,
                           via=via, lock=self.lock, on_verdict=self._count_verdict)

    def _count_verdict(self, req: DrainRequest, v: Verdict, via: str) -> None:
        if via == "permit":
            self.metrics.permits.labels(cause=req.cause,
                                        result="allowed" if v.allowed else "held" if v.held else "refused").inc()
        for a in v.actions:
            if a.kind == "refuse":
                self.metrics.drains_refused.labels(cause=a.source or "unknown", via=via).inc()
        if v.alert_created:
            scope = next((a.scope for a in v.actions if a.kind == "alert"), "")
            self.metrics.blast_trips.labels(cause=req.cause, scope=scope).inc()
            log.error("fleet alert: %s", v.alert)

    # -- probation marks
    def _probation_marks(self, views: dict[str, Any], infos: dict[str, Any]) -> None:
        mark = str(self.pcfg.get("probation_mark", "feature"))
        if mark == "none":
            return
        from slurmguard.adapters.slurm import marks as slurm_marks

        if self.cfg.section("risk")["probation_mark"]:
            self._risk_marks(views, infos, mark)
            return
        for name, v in views.items():
            info = infos.get(name)
            if info is None or not v.probation:
                continue
            if mark == "feature":
                slurm_marks.set_feature(self.slurm, info, str(self.pcfg["probation_feature"]), True)
            else:
                slurm_marks.set_weight(self.slurm, info, int(self.pcfg["probation_weight"]))

    def _risk_marks(self, views: dict[str, Any], infos: dict[str, Any], mark: str) -> None:
        """risk.probation_mark: the probation mark on probation *or* at-risk nodes, off when
        neither (slurmguard.fleet.uses, docs/fleet.md)."""
        from slurmguard.adapters.slurm import marks as slurm_marks
        from slurmguard.fleet.uses import mark_changes

        feature, heavy = str(self.pcfg["probation_feature"]), int(self.pcfg["probation_weight"])
        shown = {n: (slurm_marks.has_feature(i, feature) if mark == "feature"
                     else slurm_marks.weight(i) == heavy) for n, i in infos.items() if n in views}
        try:
            risky = self._at_risk()
        except SlurmguardError as exc:  # no risk scores this pass: leave every mark as it is
            log.warning("policy: node risk unavailable, probation marks unchanged: %s", exc)
            return
        changes = mark_changes(sorted(views), probation={n for n, v in views.items() if v.probation},
                               at_risk=risky, marked=shown)
        for name, on in changes.items():
            if mark == "feature":
                slurm_marks.set_feature(self.slurm, infos[name], feature, on)
            else:  # 1, Slurm's default, until the configured weight returns with a reconfigure
                slurm_marks.set_weight(self.slurm, infos[name], heavy if on else 1)
            if name in risky or not on:
                log.info("policy: %s the probation mark %s %s (node risk)",
                         "put" if on else "took", "on" if on else "off", name)

    def _at_risk(self) -> set[str]:
        """Nodes at or above risk.level (scores of :meth:`_risk_scores`)."""
        level = float(self.cfg["risk.level"])
        return {n for n, s in self._risk_scores().items() if s >= level}

    def _risk_scores(self) -> dict[str, float]:
        """Every known node's risk score; recomputed at most every 5 minutes (a month of
        history per pass would cost a large fleet seconds, and risk moves slowly). With
        risk.gate_max_nodes on, each recomputation is stored for the gate (nodes.risk_score)."""
        from slurmguard.fleet.params import RiskParams
        from slurmguard.store.fleet import node_risks

        cached = getattr(self, "_risk_cache", None)
        if cached is not None and time.monotonic() - cached[0] < 300.0:
            return cached[1]
        rp = RiskParams.from_section(self.cfg.section("risk"))
        scores = {n: r.score for n, r in node_risks(self.store.engine, rp).items()}
        if rp.gate_max_nodes > 0:
            self.store.nodes.set_risk(scores, time.time())
        self._risk_cache = (time.monotonic(), scores)
        return scores

    def _gate_risk(self) -> None:
        """risk.gate_max_nodes: keep the stored scores the gate reads fresh."""
        if int(self.cfg["risk.gate_max_nodes"]) <= 0:
            return
        try:
            self._risk_scores()
        except SlurmguardError as exc:  # stale scores age out of the gate's use (an hour)
            log.warning("policy: node risk unavailable, scores for the gate not stored: %s", exc)

    def _end_probation(self, node: str, info: Any, reason: str, now: float) -> None:
        mark = str(self.pcfg.get("probation_mark", "feature"))
        if info is not None and mark == "feature":
            from slurmguard.adapters.slurm import marks as slurm_marks

            slurm_marks.set_feature(self.slurm, info, str(self.pcfg["probation_feature"]), False)
        elif info is not None and mark == "weight":
            # The configured weight comes back with the next `scontrol reconfigure`; until
            # then 1 (Slurm's default) puts the node back in the normal order.
            from slurmguard.adapters.slurm import marks as slurm_marks

            slurm_marks.set_weight(self.slurm, info, 1)
        self.store.nodes.set_flags(node, probation=False, probation_since=None)
        self.store.nodes.record_event(node, "probation_end", ACTOR, reason, source="probation", at=now)

    # -- /permit
    def permit(self, body: Any) -> dict[str, Any]:
        """May ``node`` drain itself for ``check``? Counts it against the caps if so."""
        if not isinstance(body, dict):
            raise InputError("permit: expected an object {node, check, reason}")
        node = validate_node(body.get("node"))
        check = body.get("check") or "unknown"
        if not isinstance(check, str) or not _CHECK_NAME.fullmatch(check):
            # It becomes an event's source and a metrics label: a plain check name only.
            raise InputError(f"permit.check: expected a check name, got {_show(check)}")
        reason = body.get("reason") or f"{REASON_PREFIX} {check}: failed"
        if not isinstance(reason, str) or "\x00" in reason or not _encodable(reason):
            raise InputError(f"permit.reason: expected text without NUL, got {_show(reason)}")
        reason = reason[:1000]
        scopes = self._cached_scopes()
        fleet = scopes.get("fleet", frozenset())
        if fleet and node not in fleet:
            # Slurm answered and does not know this node: nothing to drain, nothing to
            # count. (With no answer from Slurm the node is counted, failing open.)
            raise InputError(f"permit.node: {node!r} is not a node Slurm knows")
        allowed, why = self.store_permit("permit", scopes).ask(node, cause_key(check, reason), reason)
        return {"allow": True} if allowed else {"allow": False, "alert": why}
