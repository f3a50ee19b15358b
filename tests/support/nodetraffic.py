"""What the scale harness's emulated nodes send: node entries in slurm.conf with no slurmd
(``ScaleSpec.emulated``), answered toward serve by this generator (docs/scale.md "Emulated
nodes").

For each emulated node it sends what that node's hooks would, through slurmguard's own node
code: a health-check record every HealthCheckInterval, spread over the interval as slurmd's
CYCLE spreads them; a prolog and an epilog record per job at the emulated nodes' share of the
fleet's job rate, each job first through the installed PrologSlurmctld entry script (the
gate's compiled client asking serve's socket); and, while a shared fault is set, the failing
check's drain by the hooks' own function, :func:`slurmguard.node.ownstate.drain_guarded`
(the one drain path with the hooks' permit, ``ServePermit``, its fallback over Slurm's view
when no replica answers). Records are built by
:func:`support.loadgen.hook_record` (``make_record``) and sent by
:func:`slurmguard.node.delivery.deliver` with the emulated nodes' config: signed as every
node of the harness signs (``serve.auth`` = munge with this host's munged: every entry,
real or emulated, has NodeHostname=localhost, so serve's origin map puts them all at
127.0.0.1, where that munged's credentials come from), spooled when no replica answers and
replayed after the next send, as a hook does. The one spool (``ScaleHarness.emulated_dir``)
is shared by all emulated nodes: one host sends for all of them.

Bounded: one scheduler thread and ``workers`` sending threads, whatever the number of nodes;
a send due while ``max_backlog`` are waiting is counted as ``behind`` and not made (the
figures say so instead of the generator falling ever further behind). :meth:`stop` ends it
within a send's timeout.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from support import footprint
from support.loadgen import Load, hook_record


def prolog_slurmctld_env(job: int, nodelist: str) -> dict[str, str]:
    """What slurmctld (slurmscriptd) gives PrologSlurmctld on 22.05, as root."""
    return {"SLURM_JOB_ID": str(job), "SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_USER": "root",
            "SLURM_JOB_UID": "0", "SLURM_JOB_GID": "0", "SLURM_JOB_PARTITION": "debug",
            "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_CLUSTER_NAME": "cluster"}


@dataclass
class TrafficSpec:
    nodes: Sequence[str]        # the emulated nodes
    fleet_nodes: int            # every node entry, real and emulated (their share of the jobs)
    hc_interval: float = 300.0  # HealthCheckInterval
    jobs_per_hour: float = 1200.0  # fleet-wide; the emulated nodes get nodes/fleet_nodes of it
    job_seconds: float = 3.0    # prolog to epilog (the harness's jobs sleep 2 s)
    gate_entry: str = ""        # the installed PrologSlurmctld entry script; "": no gate calls
    workers: int = 6
    max_backlog: int = 500
    # Each health check takes its node's state as an acting hook does
    # (slurmguard.node.ownstate: serve's /nodestate, the node's saved record, else Slurm).
    own_state: bool = True
    fallback_wait: float = 0.5  # serve down: seconds a fault's drain waits for its window
    first_job: int = 5_000_000  # the gate's job ids (never a real job's)


@dataclass
class _Stats:
    loads: dict[str, Load] = field(default_factory=lambda: {k: Load() for k in
                                                            ("healthcheck", "prolog", "epilog")})
    per_node: Counter[str] = field(default_factory=Counter)  # records handed to delivery
    made: dict[str, int] = field(default_factory=dict)  # record id -> its number of results
    permits: Counter[str] = field(default_factory=Counter)  # guarded_drain's results
    refusals: Counter[str] = field(default_factory=Counter)  # why a drain was not made
    gate: Load = field(default_factory=Load)
    gate_refused: int = 0
    slurm_reads: int = 0  # own states read from Slurm (neither serve nor the record answered)
    own_states: Counter[str] = field(default_factory=Counter)  # where they came from
    behind: int = 0
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0  # the generator's threads' own CPU (sends, signing, scheduling)


class NodeTraffic:
    """The generator: :meth:`start`, then scenarios turn a fault on and off
    (:meth:`set_fault`), change the job rate (:meth:`set_job_rate`) or run every node's
    health check at once (:meth:`check_all`); :meth:`stop`, :meth:`figures`."""

    def __init__(self, cfg: Any, spec: TrafficSpec, *, slurm: Any = None,
                 run_gate: Callable[[int, str], int] | None = None) -> None:
        """``cfg``: the emulated nodes' slurmguard Config; ``slurm``: a SlurmCLI (drains and
        reads); ``run_gate(job, node)``: the gate's exit code for a one-node job."""
        self.cfg, self.spec, self.slurm, self.run_gate = cfg, spec, slurm, run_gate
        self.stats = _Stats()
        self.lock = threading.Lock()
        self.fault = ""  # the check failing on every emulated node ("" none)
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(spec.workers, thread_name_prefix="nodetraffic")
        self._backlog = 0
        self._thread: threading.Thread | None = None
        self._epilogs: list[tuple[float, str, str]] = []
        self._job_rate = spec.jobs_per_hour
        self.t0 = 0.0

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> NodeTraffic:
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._schedule, name="nodetraffic-sched",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def set_job_rate(self, fleet_jobs_per_hour: float) -> None:
        with self.lock:
            self._job_rate = fleet_jobs_per_hour

    def set_fault(self, check: str) -> None:
        """Every emulated node's health check fails ``check`` from now ("" ends it)."""
        self.fault = check

    # -- the schedule --------------------------------------------------------------------------
    def _schedule(self) -> None:
        nodes, spec = list(self.spec.nodes), self.spec
        hc_step = spec.hc_interval / max(1, len(nodes))
        hc_i, job_i, next_job = 0, 0, time.monotonic()
        t_cpu = time.thread_time()
        while not self._stop.is_set():
            now = time.monotonic()
            with self.lock:
                rate = self._job_rate * len(nodes) / max(1, spec.fleet_nodes)
            next_hc = self.t0 + hc_i * hc_step
            due = [next_hc]
            if rate > 0:
                due.append(next_job)
            if self._epilogs:
                due.append(self._epilogs[0][0])
            wait = min(due) - now
            t = time.thread_time()
            with self.lock:
                self.stats.cpu_s += t - t_cpu
            t_cpu = t
            if wait > 0:
                self._stop.wait(min(wait, 0.5))
                continue
            if next_hc <= now:
                self._submit(self._healthcheck, nodes[hc_i % len(nodes)])
                hc_i += 1
            if rate > 0 and next_job <= now:
                node = nodes[(job_i * 7919) % len(nodes)]  # spread over the fleet
                job = str(spec.first_job + job_i)
                self._submit(self._prolog, node, job)
                heapq.heappush(self._epilogs, (now + spec.job_seconds, node, job))
                job_i += 1
                next_job = max(next_job + 3600.0 / rate, now - 60.0)
            elif rate <= 0:
                next_job = now
            while self._epilogs and self._epilogs[0][0] <= now:
                _, node, job = heapq.heappop(self._epilogs)
                self._submit(self._epilog, node, job)
        with self.lock:
            self.stats.cpu_s += time.thread_time() - t_cpu

    def _submit(self, fn: Callable[..., None], *args: str) -> Future[None] | None:
        with self.lock:
            if self._backlog >= self.spec.max_backlog:
                self.stats.behind += 1
                return None
            self._backlog += 1
        try:
            return self._pool.submit(self._run, fn, *args)
        except RuntimeError:  # stopped meanwhile
            with self.lock:
                self._backlog -= 1
            return None

    def _run(self, fn: Callable[..., None], *args: str) -> None:
        t = time.thread_time()
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 -- counted: the figures name what broke
            with self.lock:
                if len(self.stats.errors) < 20:
                    self.stats.errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}"[:300])
        finally:
            with self.lock:
                self._backlog -= 1
                self.stats.cpu_s += time.thread_time() - t

    # -- what a node sends ---------------------------------------------------------------------
    def _send(self, rec: dict[str, Any]) -> None:
        from slurmguard.node.delivery import deliver

        load = self.stats.loads[rec["hook"]]
        t0 = time.monotonic()
        said = deliver(rec, self.cfg, until=t0 + 10.0)
        dt = time.monotonic() - t0
        with self.lock:
            self.stats.per_node[rec["node"]] += 1
            self.stats.made[rec["id"]] = len(rec["results"])
            load.made.add(rec["id"])
            load.requests += 1
            if said == "sent":
                load.acked += 1
                load.latencies.append(dt)
            else:
                load.failures += 1
                load.spooled += said.startswith("spooled")

    def _healthcheck(self, node: str) -> None:
        own = None
        if self.spec.own_state and self.slurm is not None:
            from slurmguard.node.ownstate import own_state

            own = own_state(self.cfg, node, self.slurm)  # as node/hooks.py's _slurm_view
            with self.lock:
                self.stats.own_states[own.source or "none"] += 1
                self.stats.slurm_reads += own.read_now
        check = self.fault
        rec = hook_record(node, "healthcheck", time.time(), failing=check)
        if check:
            rec["applied"] = self._drain(node, check, rec["decision"]["reason"], own)
        self._send(rec)

    def _drain(self, node: str, check: str, reason: str, own: Any = None) -> str:
        """The hook's drain of a failing check, by the hook's own function
        (node/ownstate.py's ``drain_guarded``: the guard's permit, then Slurm; the emulated node is
        UNKNOWN+NOT_RESPONDING there, not DOWN, so Slurm takes the drain)."""
        from slurmguard.node import ownstate
        from slurmguard.node.fallback import SlurmPermit

        if self.slurm is None:
            return "drain failed: no Slurm adapter"
        fallback = SlurmPermit(self.slurm, self.cfg,
                               deadline=time.monotonic() + self.spec.fallback_wait)
        done = ownstate.drain_guarded(self.cfg, self.slurm, node, check, reason,
                                      via="healthcheck", own=own, fallback=fallback)
        with self.lock:
            self.stats.permits[done.result] += 1
            if done.result != "drained":
                self.stats.refusals[done.applied[:120]] += 1
        return done.applied

    def _prolog(self, node: str, job: str) -> None:
        if self.run_gate is not None:
            t0 = time.monotonic()
            rc = self.run_gate(int(job), node)
            with self.lock:
                self.stats.gate.requests += 1
                self.stats.gate.latencies.append(time.monotonic() - t0)
                self.stats.gate_refused += rc != 0
        self._send(hook_record(node, "prolog", time.time(), job=job))

    def _epilog(self, node: str, job: str) -> None:
        self._send(hook_record(node, "epilog", time.time(), job=job))

    # -- a pass of every node at once ----------------------------------------------------------
    def check_all(self, parallel: int = 0, timeout: float = 600.0) -> dict[str, Any]:
        """Every emulated node's health check once, now: what a fleet-wide pass sends. At
        most ``parallel`` (at least the pool's workers) of the pass are waiting at once, so
        the regular schedule's sends are not crowded out. Returns the pass's figures."""
        before = self.snapshot()
        t0 = time.monotonic()
        end = t0 + timeout
        window = max(parallel, self.spec.workers)
        pending: list[Future[None]] = []
        started = 0
        try:
            for n in self.spec.nodes:
                while len(pending) >= window:
                    pending[0].result(timeout=max(0.1, end - time.monotonic()))
                    pending = [f for f in pending if not f.done()]
                pending.append(self._pool.submit(self._run, self._healthcheck, n))
                started += 1
                with self.lock:
                    self._backlog += 1
            for f in pending:
                f.result(timeout=max(0.1, end - time.monotonic()))
        except FutureTimeout:  # past its time: what did not run is the figure, not an error
            pass
        late = sum(1 for f in pending if not f.done() and f.cancel())
        with self.lock:
            self._backlog -= late  # cancelled before they ran: _run never gives theirs back
        out = diff(before, self.snapshot())
        out["wall_s"] = round(time.monotonic() - t0, 1)
        out["not_checked_in_time"] = len(self.spec.nodes) - started + late
        return out

    # -- what it measured ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            s = self.stats
            return {"records": {k: (ld.requests, ld.acked, ld.failures, ld.spooled,
                                    len(ld.latencies)) for k, ld in s.loads.items()},
                    "latencies": {k: list(ld.latencies) for k, ld in s.loads.items()},
                    "gate": (s.gate.requests, s.gate_refused, list(s.gate.latencies)),
                    "permits": dict(s.permits), "refusals": dict(s.refusals),
                    "slurm_reads": s.slurm_reads, "own_states": dict(s.own_states),
                    "behind": s.behind, "errors": list(s.errors), "cpu_s": s.cpu_s,
                    "at": time.monotonic()}

    def figures(self) -> dict[str, Any]:
        """Everything since :meth:`start`."""
        out = diff({"records": {}, "latencies": {}, "gate": (0, 0, []), "permits": {},
                    "refusals": {},
                    "slurm_reads": 0, "own_states": {}, "behind": 0, "errors": [], "cpu_s": 0.0, "at": self.t0},
                   self.snapshot())
        out.update(nodes=len(self.spec.nodes), workers=self.spec.workers)
        return out

    def records_per_node(self) -> Mapping[str, int]:
        with self.lock:
            return dict(self.stats.per_node)

    def made(self) -> dict[str, int]:
        """Every record id handed to delivery -> its number of results (loadgen.count_records)."""
        with self.lock:
            return dict(self.stats.made)


def diff(before: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """What was sent between two :meth:`NodeTraffic.snapshot`: per hook the records, sent,
    failed (spooled or lost) and the send's p50/p99 (ms); the gate's calls, refusals and
    p50/p99; the drains' results; the generator's CPU as a share of one core."""
    secs = max(1e-6, now["at"] - before["at"])
    out: dict[str, Any] = {"seconds": round(secs, 1)}
    for hook, (req, ack, fail, spooled, nlat) in now["records"].items():
        b = before["records"].get(hook, (0, 0, 0, 0, 0))
        lat = now["latencies"][hook][b[4]:nlat]
        out[hook] = {"records": req - b[0], "sent": ack - b[1], "failed": fail - b[2],
                     "spooled": spooled - b[3], "p50_ms": _ms(lat, 0.5), "p99_ms": _ms(lat, 0.99)}
    g_req, g_ref, g_lat = now["gate"]
    b_req, b_ref, b_lat = before["gate"]
    out["gate"] = {"calls": g_req - b_req, "refused": g_ref - b_ref,
                   "p50_ms": _ms(g_lat[len(b_lat):], 0.5), "p99_ms": _ms(g_lat[len(b_lat):], 0.99)}
    out["drains"] = {k: v - before["permits"].get(k, 0) for k, v in now["permits"].items()
                     if v - before["permits"].get(k, 0)}
    why = Counter({k: v - before["refusals"].get(k, 0) for k, v in now["refusals"].items()})
    out["not_drained"] = dict(why.most_common(3))  # the drains not made: their commonest why
    out["slurm_reads"] = now["slurm_reads"] - before["slurm_reads"]
    out["own_states"] = {k: v - before["own_states"].get(k, 0)
                         for k, v in now["own_states"].items() if v - before["own_states"].get(k, 0)}
    out["behind"] = now["behind"] - before["behind"]
    out["errors"] = now["errors"][len(before["errors"]):][:5]
    out["cpu_pct"] = round(100 * (now["cpu_s"] - before["cpu_s"]) / secs, 2)
    return out


def _ms(xs: list[float], q: float) -> float | None:
    return round(footprint.percentile(xs, q) * 1000, 1) if xs else None
