"""A fleet's history, generated: months of results, drains and returns for thousands of nodes,
with planted lemons and degrading nodes whose truth the tests know (docs/fleet.md, "Test data").

    truth = generate(path, nodes=2000, days=90, seed=1)   # a SQLite store at path

- failures: a Poisson process per node at ``base_rate`` per node-day (2.3-6.5 per 1,000 in the
  published range), one cause each (weights and repair times in CAUSES);
- lemons (``lemon_share`` of the nodes) fail at ``lemon_rate`` per day;
- degrading nodes (``degrading_share``) warn more and more (ECC/row remaps or link errors) in
  the ``ramp_days`` before a failure of that area;
- noise: stray warnings on any node, checker errors, nodes that join late, and shared-cause
  incidents (one filesystem on one rack) that the blast-radius guard stopped: a fleet alert,
  some drains and many refusals, which are not node failures;
- every episode: a failing run, slurmguard's drain, failing healthchecks while out, a clear by
  slurmguard (transient causes) or an admin (then probation).

Written with the standard library's sqlite3 in bulk (executemany) into a store that
``Store.upgrade`` created: healthy runs carry no result rows (no reader of the fleet figures
needs them), which keeps 10,000 nodes x 30 days to a few seconds.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from dataclasses import dataclass, field

from slurmguard.contract import format_reason
from slurmguard.nodeset import fold
from slurmguard.store import Store

DAY = 86400.0
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
# cause -> (share of failures, median hours to return, returned by slurmguard's own undrain)
CAUSES: dict[str, tuple[float, float, bool]] = {
    "gpu-xid": (0.35, 6.0, False),
    "ib-link": (0.20, 4.0, True),
    "gpu-ecc": (0.15, 24.0, False),
    "host-memory": (0.10, 48.0, False),
    "fs-mount": (0.10, 1.0, True),
    "gpu-lost": (0.10, 72.0, False),
}
WARN_CHECKS = {"gpu_memory": ("gpu-ecc", "gpu-remap"), "links": ("ib-counters",)}
FAIL_OF_AREA = {"gpu_memory": "gpu-ecc", "links": "ib-link"}
NOISE_CHECKS = ("gpu-ecc", "gpu-remap", "ib-counters", "gpu-thermal", "gpu-xid")
# An 8-GPU node's bus ids (as the NVML stand-in's default config has them).
_BUS = ("0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0", "0000:9A:00.0",
        "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0")


@dataclass
class Truth:
    since: float
    until: float
    nodes: list[str]
    first_seen: dict[str, float]
    lemons: set[str] = field(default_factory=set)
    degrading: set[str] = field(default_factory=set)
    # (node, cause, start, drained_at, returned_at or None, returned_by or None)
    failures: list[tuple[str, str, float, float, float | None, str | None]] = field(default_factory=list)
    # drained by a shared cause: (node, drained_at, returned_at)
    shared: list[tuple[str, float, float]] = field(default_factory=list)
    refused: int = 0
    expected_rate: float = 0.0  # planted failures per 1,000 node-days (expectation)
    group: tuple[str, str] = ("", "")  # the rack of the shared incident: (name, NodeSet)

    @property
    def planted(self) -> set[str]:
        return self.lemons | self.degrading


class _Writer:
    def __init__(self, passing: tuple[str, ...] = ()) -> None:
        self.runs: list[tuple] = []
        self.results: list[tuple] = []
        self.events: list[tuple] = []
        self.passing = passing  # checks every run also passed (a result row each)
        self.remaps: dict[int, int] = {}  # node id -> rows gpu-remap saw remapped so far

    def run(self, nid: int, at: float, health: str, hook: str = "healthcheck", job: str | None = None,
            check: str = "", reason: str = "") -> None:
        rid = len(self.runs) + 1
        action = "drain" if health == "unhealthy" else "none"
        details = "{}"
        if check == "gpu-remap" and health == "degraded":
            reason, details = self.remapped(nid)
        self.runs.append((rid, f"g{rid}", nid, hook, job, at, 0.5, health, action,
                          format_reason(check, reason) if health == "unhealthy" else "", at, "gen"))
        if health != "healthy":
            self.results.append((rid, nid, at, check, health, reason, details, 0.1))
        self.results += [(rid, nid, at, c, "healthy", "", "{}", 0.1)
                         for c in self.passing if c != check]

    def remapped(self, nid: int) -> tuple[str, str]:
        """gpu-remap's degraded result as the check writes it (slurmguard/checks/gpu.py): one
        row newly remapped, for correctable errors, on the node's GPU ``nid % 8`` since the
        check's last run, nothing pending; the GPU's lifetime count goes up by one each time."""
        g = nid % 8
        rows = self.remaps[nid] = self.remaps.get(nid, 0) + 1
        reason = (f"GPU {g} ({_BUS[g]}) had 1 row remapped since the last run (now {rows} for "
                  "correctable, 0 for uncorrectable errors): memory wearing")
        gpus = [{"index": i, "pci_bus_id": b, "remap_pending": False, "remap_failure": False,
                 "remap_correctable": rows if i == g else 0, "remap_uncorrectable": 0,
                 "retired_pages_pending": None, "remap_new": 1 if i == g else 0}
                for i, b in enumerate(_BUS)]
        return reason, json.dumps({"new_rows": 1, "gpus": gpus, "problems": [reason]})

    def event(self, nid: int, at: float, kind: str, actor: str, source: str = "",
              reason: str = "") -> None:
        kind_, _, name = actor.partition(":")
        self.events.append((nid, at, kind, kind_, name or kind_, source, reason, "{}"))


def _cause(rng: random.Random) -> str:
    x, acc = rng.random(), 0.0
    for c, (share, _, _) in CAUSES.items():
        acc += share
        if x < acc:
            return c
    return "gpu-xid"


def _repair(rng: random.Random, cause: str) -> float:
    return CAUSES[cause][1] * 3600.0 * math.exp(rng.gauss(0.0, 0.5))


def _failure_times(rng: random.Random, rate: float, t0: float, t1: float) -> list[float]:
    out, t = [], t0
    while rate > 0:
        t += rng.expovariate(rate) * DAY
        if t >= t1:
            return out
        out.append(t)
    return out


def generate(path: str, *, nodes: int = 1000, days: int = 60, seed: int = 1,
             base_rate: float = 0.0035, lemon_share: float = 0.005, lemon_rate: float = 0.2,
             degrading_share: float = 0.02, ramp_days: int = 10, cadence_h: float = 6.0,
             epilogs_per_day: float = 2.0, noise_warn: float = 0.004, noise_error: float = 0.002,
             late_share: float = 0.05, shared_incidents: int = 1, start: float = START,
             passing: tuple[str, ...] = ()) -> Truth:
    """Write the history from ``start`` into a new SQLite store at ``path``; return the
    planted truth. ``passing``: checks every run also passed, stored as result rows (as
    real records carry them; none by default, since no fleet reader needs them)."""
    rng = random.Random(seed)
    Store.upgrade({"path": path})
    until = start + days * DAY
    names = [f"gpu{i:05d}" for i in range(1, nodes + 1)]
    t = Truth(start, until, names, {})
    for n in names:
        late = rng.random() < late_share
        t.first_seen[n] = start + (rng.uniform(0, days / 2) * DAY if late else 0.0)
    pick = rng.sample(names, max(1, round(nodes * (lemon_share + degrading_share))))
    n_lemon = max(1, round(nodes * lemon_share))
    t.lemons, t.degrading = set(pick[:n_lemon]), set(pick[n_lemon:])
    w = _Writer(passing)
    ids = {n: i + 1 for i, n in enumerate(names)}
    busy: dict[str, list[tuple[float, float]]] = {}
    rate_sum = 0.0
    for n in names:
        rate = lemon_rate if n in t.lemons else base_rate
        f0 = t.first_seen[n]
        rate_sum += rate * (until - f0) / DAY
        plan = [(at, _cause(rng)) for at in _failure_times(rng, rate, f0, until)]
        if n in t.degrading:
            area = rng.choice(sorted(WARN_CHECKS))
            fail_at = rng.uniform(max(f0 + (ramp_days + 2) * DAY, start + 0.3 * days * DAY),
                                  until - 2 * DAY)
            plan.append((fail_at, FAIL_OF_AREA[area]))
            for d in range(ramp_days, 0, -1):
                if rng.random() < 0.3 + 0.6 * (ramp_days - d) / ramp_days:
                    chk = rng.choice(WARN_CHECKS[area])
                    w.run(ids[n], fail_at - d * DAY + rng.uniform(0, DAY / 2), "degraded",
                          check=chk, reason=f"{chk}: counter rising")
        _episodes(w, t, rng, n, ids[n], sorted(plan), until, cadence_h, busy)
    nd = sum((until - f) / DAY for f in t.first_seen.values())
    planned_degrading = len(t.degrading)
    t.expected_rate = 1000.0 * (rate_sum + planned_degrading) / nd
    for _ in range(shared_incidents):
        _shared(w, t, rng, names, ids, busy)
    _background(w, t, rng, names, ids, busy, cadence_h, epilogs_per_day, noise_warn, noise_error)
    _write(path, w, t, ids)
    return t


def _episodes(w: _Writer, t: Truth, rng: random.Random, n: str, nid: int,
              plan: list[tuple[float, str]], until: float, cadence_h: float,
              busy: dict[str, list[tuple[float, float]]]) -> None:
    free_at = float("-inf")
    for at, cause in plan:
        if at < free_at:  # still out from the previous failure: this one did not happen
            continue
        drained = at + 60.0
        back = drained + _repair(rng, cause)
        returned = back if back < until else None
        by = ("slurmguard" if CAUSES[cause][2] and rng.random() < 0.8 else "admin:ops") if returned else None
        w.run(nid, at, "unhealthy", check=cause, reason="fault seen")
        w.event(nid, drained, "drain", "slurmguard", cause, format_reason(cause, "fault seen"))
        x = drained + cadence_h * 3600.0
        while x < (returned or until):  # a drained node keeps failing its healthcheck
            w.run(nid, x, "unhealthy", check=cause, reason="fault seen")
            x += cadence_h * 3600.0
        if returned is not None:
            w.event(nid, returned, "clear", by or "slurmguard", cause, "returned")
            if by == "admin:ops":
                w.event(nid, returned, "probation_start", by, "probation", "returned")
        t.failures.append((n, cause, at, drained, returned, by))
        busy.setdefault(n, []).append((at, returned or until))
        free_at = (returned or until) + 3600.0


def _shared(w: _Writer, t: Truth, rng: random.Random, names: list[str], ids: dict[str, int],
            busy: dict[str, list[tuple[float, float]]]) -> None:
    rack = names[: max(10, len(names) // 20)]
    t.group = ("rack1", fold(rack))
    def quiet(at: float) -> bool:  # no drain of the rack within the guard's window around it
        return not any(at - 3600 <= a + 60 <= at + 3600 + len(rack)
                       for n in rack for a, _ in busy.get(n, []))

    at = rng.uniform(t.since + 5 * DAY, t.until - 5 * DAY)
    while not quiet(at):
        at = rng.uniform(t.since + 5 * DAY, t.until - 5 * DAY)
    cap = max(1, len(rack) // 10)  # the guard's cap: 10 % of the rack (policy defaults)
    drained: list[str] = []
    for i, n in enumerate(rack):
        if any(a - 3600 <= at <= b + 3600 for a, b in busy.get(n, [])):
            continue
        x = at + i
        w.run(ids[n], x, "unhealthy", check="fs-mount", reason="/scratch hung")
        if len(drained) < cap:
            w.event(ids[n], x + 1, "drain", "slurmguard", "fs-mount", format_reason("fs-mount", "/scratch hung"))
            w.event(ids[n], at + 7200, "clear", "slurmguard", "fs-mount", "returned")
            drained.append(n)
            t.shared.append((n, x + 1, at + 7200))
            busy.setdefault(n, []).append((x, at + 7200))
        else:
            w.event(ids[n], x + 1, "drain_refused", "slurmguard", "fs-mount", "blast-radius guard")
            t.refused += 1
    w.alert = (at, at + 600, at + 7200, "fs-mount", "group:rack1", fold(sorted(set(rack))), len(rack),  # type: ignore[attr-defined]
               "blast-radius guard: fs-mount failing on rack1")


def _background(w: _Writer, t: Truth, rng: random.Random, names: list[str], ids: dict[str, int],
                busy: dict[str, list[tuple[float, float]]], cadence_h: float, epd: float,
                noise_warn: float, noise_error: float) -> None:
    step = cadence_h * 3600.0
    job = 0
    for n in names:
        nid, spans = ids[n], busy.get(n, [])
        f0 = t.first_seen[n]
        x = f0 + rng.uniform(0, step)
        while x < t.until:
            if not any(a <= x <= b for a, b in spans):
                u = rng.random()
                if u < noise_error * cadence_h / 24:
                    w.run(nid, x, "error", check="gpu-count", reason="NVML timed out")
                elif u < (noise_error + noise_warn) * cadence_h / 24:
                    chk = rng.choice(NOISE_CHECKS)
                    w.run(nid, x, "degraded", check=chk, reason=f"{chk}: one-off")
                else:
                    w.run(nid, x, "healthy")
            x += step
        for at in _failure_times(rng, epd, f0, t.until):
            if not any(a <= at <= b for a, b in spans):
                job += 1
                w.run(nid, at, "healthy", hook="epilog", job=str(job))


def _write(path: str, w: _Writer, t: Truth, ids: dict[str, int]) -> None:
    db = sqlite3.connect(path)
    # Bulk load: no fsync, and the history tables' indexes built once at the end (keeping
    # them up to date row by row costs four times the inserts).
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-200000")
    tables = ("runs", "results", "events")
    indexes = db.execute("SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT "
                         f"NULL AND tbl_name IN {tables}").fetchall()
    try:
        with db:
            for name, _ in indexes:
                db.execute(f"DROP INDEX {name}")
            db.executemany(
                "INSERT INTO nodes (id, name, first_seen, last_seen, last_health, lemon, "
                "burnin_required, probation, probation_passes) VALUES (?,?,?,?,?,0,0,0,0)",
                [(i, n, t.first_seen[n], t.until, "healthy") for n, i in ids.items()])
            db.executemany("INSERT INTO runs (id, record_id, node_id, hook, job_id, started, "
                           "duration, health, action, reason, received, version) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", w.runs)
            db.executemany("INSERT INTO results (run_id, node_id, started, name, health, reason, "
                           "details, duration) VALUES (?,?,?,?,?,?,?,?)", w.results)
            db.executemany("INSERT INTO events (node_id, at, kind, actor_kind, actor, source, "
                           "reason, details) VALUES (?,?,?,?,?,?,?,?)", w.events)
            alert = getattr(w, "alert", None)
            if alert is not None:
                db.execute("INSERT INTO fleet_alerts (opened, updated, closed, cause, scope, "
                           "nodes, count, message) VALUES (?,?,?,?,?,?,?,?)", alert)
            for _, sql in indexes:
                db.execute(sql)
    finally:
        db.close()
