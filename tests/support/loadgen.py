"""Node clients for the soak and fault tests: threads that act like nodes posting to serve.

Each client is one node: it builds result records with the real ``slurmguard.node.record.make_record``,
POSTs them in batches with the real ``serve_client.post_records``, spools a batch it could not
deliver with the real ``adapters.spool.write`` and, after each success, replays its spool with the
real ``delivery.replay_spool``, exactly as a node's hooks do. Every loop is bounded in count
and time; only loopback is used.

Afterwards :func:`count_in_store` counts, in the store itself, every record id the clients
made: how many are missing (lost) and how many are stored more than once (duplicated).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmguard.adapters import serve_client, spool
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record

RESULTS_PER_RECORD = 2


@dataclass
class Load:
    made: set[str] = field(default_factory=set)  # every record id a client created
    acked: int = 0  # records serve answered for (stored or duplicate)
    latencies: list[float] = field(default_factory=list)  # seconds per successful POST
    requests: int = 0
    failures: int = 0  # POSTs that failed (the batch was spooled)
    spooled: int = 0
    rejected: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def percentile(self, p: float) -> float:
        xs = sorted(self.latencies)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (f"{self.rate:.0f} records/s, p50 {self.percentile(50) * 1000:.0f} ms, "
                f"p99 {self.percentile(99) * 1000:.0f} ms, {self.requests} requests, "
                f"{len(self.made)} records")


def _records(node: str, n: int) -> list[dict]:
    results = [CheckResult("gpu-count", Health.HEALTHY), CheckResult("ib-link", Health.HEALTHY)]
    return [make_record(node, "healthcheck", results, "pass", "") for _ in range(n)]


def one_record(node: str) -> dict:
    """One record of the shape every client here posts (count_in_store knows its results)."""
    return _records(node, 1)[0]


# What the harness's nodes run (support/scaleharness.py CHECKS): a health check's and a
# prolog's checks, and an epilog's.
HOOK_CHECKS = ("gpu-count", "gpu-lost", "gpu-ecc", "gpu-xid", "fs-mount", "host-cpus")
EPILOG_CHECKS = ("gpu-count", "gpu-lost", "gpu-xid", "fs-mount")


def hook_record(node: str, hook: str, started: float, job: str | None = None,
                failing: str = "") -> dict[str, Any]:
    """The record of one run of ``hook`` on ``node``, as its hook makes it (make_record): every
    check healthy, or ``failing`` unhealthy and the decision a drain (the hook's reason)."""
    names = EPILOG_CHECKS if hook == "epilog" else HOOK_CHECKS
    results = [CheckResult(n, Health.UNHEALTHY, f"{n}: shared fault") if n == failing
               else CheckResult(n, Health.HEALTHY) for n in names]
    if failing:
        return make_record(node, hook, results, "drain", f"slurmguard: {failing}: shared fault",
                           job_id=job, started=started, duration=0.1)
    return make_record(node, hook, results, "pass", "", job_id=job, started=started, duration=0.1)


def run_clients(url: str, token: str, *, clients: int, seconds: float, batch: int,
                spool_root: Path, timeout: float = 10.0, prefix: str = "soak",
                max_requests: int = 100_000, during: threading.Event | None = None,
                auth_for: Callable[[str], Any] | None = None) -> Load:
    """``clients`` node threads post ``batch`` records per request for ``seconds``;
    ``auth_for(node)``: that node's own signer (serve.auth = node-key), else ``token``."""
    load = Load()
    end = time.monotonic() + seconds
    start_gate = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        node = f"{prefix}{i:04d}"
        sdir = str(spool_root / node)
        auth = auth_for(node) if auth_for is not None else token
        start_gate.wait()
        for _ in range(max_requests):
            if time.monotonic() >= end:
                break
            recs = _records(node, batch)
            with load.lock:
                load.made.update(r["id"] for r in recs)
            t0 = time.monotonic()
            try:
                ans = serve_client.post_records(url, auth, recs, timeout)
            except serve_client.DeliveryError:
                for r in recs:
                    spool.write(r, sdir, 1_000_000)
                with load.lock:
                    load.failures += 1
                    load.spooled += len(recs)
                time.sleep(0.25)  # a node would retry at its next hook run, not at once
                continue
            dt = time.monotonic() - t0
            with load.lock:
                load.requests += 1
                load.latencies.append(dt)
                load.acked += len(ans.get("stored", [])) + len(ans.get("duplicate", []))
                load.rejected.extend(ans.get("rejected", {}))
            if spool.pending(sdir):
                try:
                    delivery.replay_spool(url, auth, sdir, deadline=time.monotonic() + timeout)
                except OSError:
                    pass

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.monotonic()
    if during is not None:
        during.set()
    for t in threads:
        t.join(timeout=seconds + timeout * 3 + 30)
    load.seconds = time.monotonic() - t0
    return load


def drain_spools(url: str, token: str, spool_root: Path, *, seconds: float = 60.0,
                 auth_for: Callable[[str], Any] | None = None) -> int:
    """Replay every client's spool until all are empty (bounded); returns files left."""
    end = time.monotonic() + seconds
    left = 0
    for _ in range(1000):
        left = 0
        for d in sorted(p for p in spool_root.iterdir() if p.is_dir()) if spool_root.exists() else []:
            if spool.pending(str(d)):
                try:
                    delivery.replay_spool(url, auth_for(d.name) if auth_for else token, str(d),
                                          deadline=time.monotonic() + 10)
                except OSError:
                    pass
                left += len(spool.pending(str(d)))
        if left == 0 or time.monotonic() > end:
            break
    return left


def count_in_store(store_url: str, made: set[str],
                   results_per_record: int = RESULTS_PER_RECORD) -> tuple[int, int, int]:
    """(lost, duplicated, stored) for the ids in ``made``, counted in the store's tables.

    duplicated counts both a record id in ``runs`` more than once and a run with more
    result rows than the record had (a record written twice in parts)."""
    return count_records(store_url, dict.fromkeys(made, results_per_record))


def count_records(store_url: str, made: Mapping[str, int]) -> tuple[int, int, int]:
    """:func:`count_in_store` for records of different sizes: ``made`` maps each record id
    to the number of results it carried. Rows are counted per id (a duplicate shows as a
    count of 2, never folded into a set)."""
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine

    engine = make_engine({"url": store_url})
    try:
        with engine.connect() as conn:
            ids = Counter(r[0] for r in conn.execute(text("SELECT record_id FROM runs")))
            per_run = conn.execute(text(
                "SELECT runs.record_id, count(results.id) FROM runs "
                "LEFT JOIN results ON results.run_id = runs.id GROUP BY runs.record_id")).all()
    finally:
        engine.dispose()
    lost = sum(1 for i in made if ids.get(i, 0) == 0)
    duplicated = sum(n - 1 for i, n in ids.items() if i in made and n > 1)
    duplicated += sum(1 for rid, n in per_run if rid in made and n != made[rid])
    stored = sum(1 for i in made if ids.get(i, 0) >= 1)
    return lost, duplicated, stored
