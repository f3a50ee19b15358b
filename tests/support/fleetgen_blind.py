"""A second fleet generator, written apart from fleetgen.py, to judge the node risk score on
physics it was not tuned on (docs/fleet.md, "Blind evaluation": the frozen spec this follows).

    truth = generate(path, nodes=2000, days=60, seed=1)   # a SQLite store at path

What differs from fleetgen.py on purpose: failures are rare and mostly one per node; 40 % of
them come without warning; the others warn over ramps of 2 to 30 days, on some days only, in
one of four areas; the warnings are the degraded results slurmguard's own checks would
write, with the details they carry (gpu-ecc's lifetime uncorrectable count, ib-counters'
rises), run by the default hook lists (healthcheck every 6 h runs every check; a job's
prolog runs gpu-ecc, gpu-thermal and gpu-xid; its epilog gpu-ecc and gpu-xid); 5 % of the
healthy nodes warn for good and harmlessly; users' jobs make Xid bursts; a rack's switch
makes every node of the rack warn at once.

Only non-healthy runs are written (the score reads no healthy run); the truth says which
failures had a precursor (``predictable``) and which healthy nodes warn benignly.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from dataclasses import dataclass, field

from slurmguard.contract import format_reason
from slurmguard.store import Store

DAY = 86400.0
HOUR = 3600.0
START = 1_769_904_000.0  # 2026-02-01 00:00 UTC
AREAS = ("gpu_memory", "links", "thermal", "xid")
# The failure each area's precursor ends in (the check that drains).
FAILS = {"gpu_memory": "gpu-ecc", "links": "ib-link", "thermal": "gpu-thermal",
         "xid": "gpu-xid", None: "gpu-lost"}
BENIGN = ("old_ecc", "ib_symbols", "hot_gpu")
RACK = 32  # nodes per rack (the IB burst's scope)
# Which checks each hook runs (slurmguard/config.py's default hook lists, the ones here).
HOOK_CHECKS = {"healthcheck": {"gpu-ecc", "gpu-thermal", "gpu-xid", "ib-counters"},
               "prolog": {"gpu-ecc", "gpu-thermal", "gpu-xid"},
               "epilog": {"gpu-ecc", "gpu-xid"}}


@dataclass
class Failure:
    node: str
    area: str | None  # None: sudden, no precursor
    start: float
    ramp_days: int  # 0 when sudden
    returned: float | None


@dataclass
class Truth:
    since: float  # the scored window: [since, until]; before it, a lookback of 30 days
    until: float
    nodes: list[str]
    failures: list[Failure] = field(default_factory=list)
    benign: dict[str, str] = field(default_factory=dict)  # node -> kind of benign warning
    user_bursts: int = 0
    rack_burst: tuple[str, float] = ("", 0.0)  # (first node of the rack, when)

    def scored(self) -> list[Failure]:
        return [f for f in self.failures if self.since <= f.start <= self.until]

    def predictable(self) -> list[Failure]:
        return [f for f in self.scored() if f.area is not None]


class _Node:
    """One node's runs over the history: (at, hook, job) slots, and what each one found."""

    def __init__(self, rng: random.Random, start: float, until: float, jobs_per_day: float):
        self.slots: list[tuple[float, str, str | None]] = []
        t = start + rng.uniform(0, 6 * HOUR)
        while t < until:
            self.slots.append((t, "healthcheck", None))
            t += 6 * HOUR + rng.uniform(-300, 300)
        t = start
        while True:
            t += rng.expovariate(jobs_per_day) * DAY
            if t >= until:
                break
            job = f"{rng.randrange(10**7)}"
            length = rng.uniform(0.5, 6) * HOUR
            self.slots.append((t, "prolog", job))
            if t + length < until:
                self.slots.append((t + length, "epilog", job))
        self.slots.sort()
        # slot index -> {check: (health, reason, details)}
        self.found: dict[int, dict[str, tuple[str, str, dict]]] = {}

    def warn(self, i: int, check: str, reason: str, details: dict, health: str = "degraded") -> None:
        if check in HOOK_CHECKS[self.slots[i][1]]:
            self.found.setdefault(i, {})[check] = (health, reason, details)


def _ecc(count: int) -> dict:
    gpus = [{"index": g, "volatile_uncorrected": 0, "aggregate_uncorrected": 0} for g in range(8)]
    gpus[3]["aggregate_uncorrected"] = count
    return {"gpus": gpus}


def _ib(rise: int) -> dict:
    return {"rises": {"mlx5_0/1": {"symbol_error": rise}}}


def generate(path: str, *, nodes: int = 2000, days: int = 60, seed: int = 1,
             fail_share: float = 0.03, sudden_share: float = 0.4, benign_share: float = 0.05,
             user_bursts_per_week: int = 36, jobs_per_day: float = 3.0,
             start: float = START) -> Truth:
    """Write the history into a new SQLite store at ``path``; return the truth."""
    rng = random.Random(f"blind-{seed}")
    Store.upgrade({"path": path})
    until = start + days * DAY
    names = [f"bn{i // RACK:03d}-{i % RACK:02d}" for i in range(nodes)]
    truth = Truth(start + 30 * DAY, until, names)
    plan = {n: _Node(rng, start, until, jobs_per_day) for n in names}
    events: list[tuple[str, float, str, str, str, str]] = []
    failing = rng.sample(names, round(nodes * fail_share))
    for n in failing:
        area = None if rng.random() < sudden_share else rng.choice(AREAS)
        ramp = rng.randint(2, 30) if area else 0
        at = rng.uniform(start + (ramp + 1) * DAY, until - 0.5 * DAY)
        truth.failures.append(_fail(rng, plan[n], n, area, ramp, at, until, events))
    healthy = [n for n in names if n not in set(failing)]
    for n in rng.sample(healthy, round(nodes * benign_share)):
        truth.benign[n] = kind = BENIGN[len(truth.benign) % 3]
        _benign(rng, plan[n], kind)
    for week in range(math.ceil(days / 7)):
        for n in rng.sample(names, user_bursts_per_week):
            at = start + (week * 7 + rng.uniform(0, 7)) * DAY
            if _user_burst(plan[n], at):
                truth.user_bursts += 1
    rack = rng.randrange(max(1, nodes // RACK))
    at = rng.uniform(start + 35 * DAY, until - 3 * DAY)
    truth.rack_burst = (names[rack * RACK], at)
    for n in names[rack * RACK:(rack + 1) * RACK]:
        node = plan[n]
        for i, (t, _, _) in enumerate(node.slots):
            if at <= t <= at + 12 * HOUR:
                node.warn(i, "ib-counters", "mlx5_0/1 symbol_error rising", _ib(rng.randint(2000, 9000)))
    _write(path, names, plan, events, start, until)
    return truth


def _fail(rng: random.Random, node: _Node, name: str, area: str | None, ramp: int, at: float,
          until: float, events: list) -> Failure:
    """The precursor (if any), the failing run, the drain, the failing runs while out and the
    return. A lifetime ECC count the precursor left stays after the return."""
    ecc = 0
    lo = at - ramp * DAY
    active_day = -1
    for i, (t, _, _) in enumerate(node.slots):
        if area is None or t < lo:
            continue
        if t >= at:
            break
        day = int((t - lo) // DAY)
        if day != active_day:  # each day of the ramp: active or not, likelier near the end
            active_day = day
            on = rng.random() < 0.2 + 0.6 * (t - lo) / (at - lo)
            grew = False
        if area == "gpu_memory":
            if on and not grew:
                ecc += 1 if rng.random() < 0.8 else 2
                grew = True
            if ecc:
                node.warn(i, "gpu-ecc", f"GPU 3 has {ecc} lifetime uncorrectable ECC errors", _ecc(ecc))
        elif not on:
            continue
        elif area == "links" and rng.random() < 0.7:
            node.warn(i, "ib-counters", "mlx5_0/1 symbol_error rising",
                      _ib(int(1000 * math.exp(rng.uniform(0.5, 3.5)))))
        elif area == "thermal" and rng.random() < 0.6:
            node.warn(i, "gpu-thermal", "GPU 5 is at 84 C, near its limit of 87 C", {"gpus": []})
        elif area == "xid" and rng.random() < 0.4:
            node.warn(i, "gpu-xid", "GPU 2 Xid 94: contained ECC error", {"new_xids": 1})
    check = FAILS[area]
    back = at + 24 * HOUR * math.exp(rng.gauss(0.0, 0.6))
    returned = back if back < until else None
    for i, (t, hook, _) in enumerate(node.slots):
        if at <= t <= (returned or until) and (t == at or hook == "healthcheck"):
            node.found[i] = {check: ("unhealthy", "fault seen", {})}
    node.slots.append((at, "healthcheck", None))
    node.found[len(node.slots) - 1] = {check: ("unhealthy", "fault seen", {})}
    events.append((name, at + 60, "drain", "slurmguard", check, format_reason(check, "fault seen")))
    if returned is not None:
        events.append((name, returned, "clear", "admin", check, "part replaced"))
        events.append((name, returned, "probation_start", "admin", "probation", "returned"))
        for i, (t, _, _) in enumerate(node.slots[:-1]):
            if t > returned and ecc:
                node.warn(i, "gpu-ecc", f"GPU 3 has {ecc} lifetime uncorrectable ECC errors", _ecc(ecc))
    return Failure(name, area, at, ramp, returned)


def _benign(rng: random.Random, node: _Node, kind: str) -> None:
    """A steady, harmless warning for the whole history."""
    count = rng.randint(1, 3)
    per_day = rng.uniform(1, 3)  # symbol-error rises over the threshold per day
    share = rng.uniform(0.3, 0.8)  # of the runs where the GPU is near its limit
    for i, (_, hook, _) in enumerate(node.slots):
        if kind == "old_ecc":
            node.warn(i, "gpu-ecc", f"GPU 3 has {count} lifetime uncorrectable ECC errors", _ecc(count))
        elif kind == "ib_symbols" and hook == "healthcheck" and rng.random() < per_day / 4:
            node.warn(i, "ib-counters", "mlx5_0/1 symbol_error rising", _ib(rng.randint(1000, 1500)))
        elif kind == "hot_gpu" and rng.random() < share:
            node.warn(i, "gpu-thermal", "GPU 1 is at 83 C, near its limit of 87 C", {"gpus": []})


def _user_burst(node: _Node, at: float) -> bool:
    """A user's job that hits app-error Xids (13, 31, 43) again and again: gpu-xid degraded
    at the job's epilog and the next healthcheck."""
    after = [i for i, (t, hook, _) in enumerate(node.slots) if t >= at and hook != "prolog"][:2]
    for i in after:
        node.warn(i, "gpu-xid", "GPU 0: 4 app-error Xids within 3600s", {"new_xids": 4})
    return bool(after)


def _write(path: str, names: list[str], plan: dict[str, _Node], events: list, start: float,
           until: float) -> None:
    ids = {n: i + 1 for i, n in enumerate(names)}
    runs, results = [], []
    for n in names:
        node = plan[n]
        for i, found in sorted(node.found.items()):
            at, hook, job = node.slots[i]
            rid = len(runs) + 1
            bad = [c for c, (h, _, _) in found.items() if h == "unhealthy"]
            health = "unhealthy" if bad else "degraded"
            reason = format_reason(bad[0], "fault seen") if bad else ""
            runs.append((rid, f"b{rid}", ids[n], hook, job, at, 0.5, health,
                         "drain" if bad else "none", reason, at, "blind"))
            for c, (h, r, d) in sorted(found.items()):
                results.append((rid, ids[n], at, c, h, r, json.dumps(d), 0.05))
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    try:
        with db:
            db.executemany(
                "INSERT INTO nodes (id, name, first_seen, last_seen, last_health, lemon, "
                "burnin_required, probation, probation_passes) VALUES (?,?,?,?,?,0,0,0,0)",
                [(i, n, start, until, "healthy") for n, i in ids.items()])
            db.executemany("INSERT INTO runs (id, record_id, node_id, hook, job_id, started, "
                           "duration, health, action, reason, received, version) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", runs)
            db.executemany("INSERT INTO results (run_id, node_id, started, name, health, reason, "
                           "details, duration) VALUES (?,?,?,?,?,?,?,?)", results)
            db.executemany("INSERT INTO events (node_id, at, kind, actor_kind, actor, source, "
                           "reason, details) VALUES (?,?,?,?,?,?,?,'{}')",
                           [(ids[n], at, k, a, a, s, r) for n, at, k, a, s, r in events])
    finally:
        db.close()
