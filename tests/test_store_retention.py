"""Retention (store.retention, slurmguard/store/retention.py): `slurmguard db expire` on a
generated fleet history (tests/support/fleetgen.py) in SQLite and in a real PostgreSQL.

- the same answers: fleet report, incidents and policy replay (the real CLI) and the node risk
  score give the same answers over the retained window before and after `db expire`, while
  the expiry did delete results, healthy runs, failing runs and events (before the window,
  the ledger read is shorter after it);
- small batches that never stall ingest: serve's batch write goes on between the expiry's
  transactions, each of at most `batch` rows;
- serve's leader runs it (serve/expiry.py).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest
from support.fleetgen import DAY, generate
from support.helpers import run_sg, sg_env
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.storecopy import copy_history

from slurmguard.cli._common import iso
from slurmguard.contract import CheckResult, Health
from slurmguard.goodput.account import Allocation, JobInputs, account
from slurmguard.node.record import make_record
from slurmguard.sources.burnin import BurninValue
from slurmguard.store import Store
from slurmguard.store.fleet import load_history, node_risks
from slurmguard.store.retention import RetentionPolicy

NODES, DAYS = 80, 60
# Short horizons so that a 60-day history has something of every kind to expire.
RESULTS, RUNS, EVENTS = 5, 40, 45
WINDOW = 8  # days: the retained window's width, behind its 30-day lookback (replay, report)
PASSING = ("gpu-count", "host-cpus")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    d = tmp_path_factory.mktemp("retention")
    start = (time.time() // DAY) * DAY - DAYS * DAY  # ends at midnight today
    truth = generate(str(d / "fleet.db"), nodes=NODES, days=DAYS, seed=11, start=start,
                     base_rate=0.02, lemon_share=0.02, passing=PASSING)
    return truth, d


def _config(d: Path, store_line: str) -> Path:
    cfg = d / f"sg-{abs(hash(store_line))}.toml"
    cfg.write_text(f"[store]\n{store_line}\n[store.retention]\nresults = {RESULTS}\n"
                   f"runs = {RUNS}\nevents = {EVENTS}\npause = 0\n[slurm]\nscontrol = \"{d}/no-scontrol\"\n"
                   f"sinfo = \"{d}/no-sinfo\"\n")
    return cfg


def _sg(cfg: Path, *args: str) -> dict:
    p = run_sg("-c", str(cfg), *args, "--json", env=sg_env(), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _answers(cfg: Path, url: str, since: float, until: float) -> dict:
    w = ["--since", iso(since), "--until", iso(until)]
    store = Store.open(url=url)
    try:
        risk = {n: asdict(r) for n, r in node_risks(store.engine, now=until).items()}
    finally:
        store.close()
    return {"report": _sg(cfg, "fleet", "report", *w),
            "incidents": _sg(cfg, "incident", "list", *w),
            "replay": _sg(cfg, "policy", "replay", *w),
            "risk": risk}


@pytest.fixture(scope="module")
def pg_history(history, pg_server):  # noqa: F811
    """The history copied once into a PostgreSQL database that each test clones."""
    name = pg_server.create_db()
    url = pg_server.url(name)
    Store.upgrade({"url": url})
    copy_history(str(history[1] / "fleet.db"), url)
    return name


@pytest.fixture(params=["sqlite", "postgresql"])
def store_cfg(request, history, tmp_path):
    truth, d = history
    if request.param == "sqlite":
        shutil.copy(d / "fleet.db", tmp_path / "fleet.db")
        url = f"sqlite:///{tmp_path}/fleet.db"
        cfg = _config(tmp_path, f'path = "{tmp_path}/fleet.db"')
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        template = request.getfixturevalue("pg_history")
        name = f"c{uuid.uuid4().hex[:12]}"
        server.sql(f"CREATE DATABASE {name} TEMPLATE {template}")
        url = server.url(name)
        cfg = _config(tmp_path, f'url = "{url}"')
    return truth, cfg, url


def test_fleet_answers_are_the_same_over_the_retained_window_after_expiry(store_cfg):
    truth, cfg, url = store_cfg
    until = truth.until
    since = until - WINDOW * DAY
    store = Store.open(url=url)
    before_rows = store.counts()
    before_early = load_history(store.engine, since=truth.since, until=since, healthy=False)
    store.close()
    before = _answers(cfg, url, since, until)
    assert before["report"]["failures"] > 5 and before["incidents"]["incidents"]
    assert any(r["score"] > 0 for r in before["risk"].values())

    out = _sg(cfg, "db", "expire")
    deleted = out["deleted"]
    # every kind had something past its horizon, and it went
    assert deleted["results"] > NODES * (DAYS - RESULTS) and deleted["runs"] > 0
    assert deleted["events"] > 0
    store = Store.open(url=url)
    after_rows = store.counts()
    store.close()
    assert after_rows["results"] == before_rows["results"] - deleted["results"]
    assert after_rows["runs"] == before_rows["runs"] - deleted["runs"]
    assert after_rows["events"] == before_rows["events"] - deleted["events"]
    assert out["largest_transaction"] <= 2000 * (1 + len(PASSING) + 1)

    after = _answers(cfg, url, since, until)
    for what in ("report", "incidents", "replay", "risk"):
        assert after[what] == before[what], what
    # Past the retained window the history is gone: the episodes read there change.
    store = Store.open(url=url)
    try:
        early = load_history(store.engine, since=truth.since, until=since, healthy=False)
        assert len(early.events) < len(before_early.events)
        # A second pass finds only what crossed a horizon in the seconds since the first.
        again = store.retention.expire(RetentionPolicy(results=RESULTS, runs=RUNS,
                                                       events=EVENTS, pause=0)).deleted
    finally:
        store.close()
    assert sum(again.values()) < sum(deleted.values()) / 100, again


def _ingest_batch(store: Store, k: int, at: float) -> float:
    recs = [make_record(f"gpu{i:05d}", "healthcheck",
                        [CheckResult(c, Health.HEALTHY) for c in PASSING], "pass", "",
                        started=at + i * 0.001) for i in range(1 + k % 50, 201 + k % 50)]
    t = time.monotonic()
    store.nodes.record_many(recs)
    return time.monotonic() - t


def test_expiry_runs_in_small_transactions_while_ingest_goes_on(store_cfg):
    _, _, url = store_cfg
    store = Store.open(url=url)
    policy = RetentionPolicy(results=RESULTS, runs=RUNS, events=EVENTS, batch=500, pause=0.005)
    result: dict = {}

    def expire() -> None:
        result["stats"] = store.retention.expire(policy)

    t = threading.Thread(target=expire)
    lat: list[tuple[float, float]] = []  # (when, seconds) of each ingest batch
    try:
        t0 = time.monotonic()
        t.start()
        k = 0
        while t.is_alive() and k < 400:
            lat.append((time.monotonic() - t0, _ingest_batch(store, k, time.time())))
            k += 1
        t.join(timeout=300)
    finally:
        store.close()
    st = result["stats"]
    assert st.transactions >= 20 and st.largest <= 500 * (1 + len(PASSING) + 1)
    during = [s for at, s in lat if at <= st.seconds]
    # ingest went on through the expiry, batch after batch, never waiting out the whole pass
    assert len(during) >= 5, (len(during), st.as_dict())
    assert max(during) < max(2.0, st.seconds / 4), (max(during), st.as_dict())


def test_serve_leader_runs_expiry_and_the_config_is_checked(history, tmp_path):
    from slurmguard.serve.expiry import Expiry
    from slurmguard.serve.leader import Leader

    shutil.copy(history[1] / "fleet.db", tmp_path / "fleet.db")
    store = Store.open(url=f"sqlite:///{tmp_path}/fleet.db")
    now = time.time()
    for jid, end in (("old", now - (EVENTS + 1) * DAY), ("new", now - (EVENTS - 1) * DAY)):
        store.goodput.record([account(JobInputs(jid, (Allocation(
            end - 3600, end, ("gpu00001", "gpu00002"), 16, "COMPLETED"),))).to_dict()])
    old_night, new_night = now - 100 * DAY, now - 80 * DAY  # burn-in keeps 90 days
    series_before = {}
    for at in (old_night, new_night):
        rid = store.burnin.started("gpu00003", job_id=None, group_key="g", at=at)
        store.burnin.record(rid, [BurninValue("host-cpu", "ok", "host_cpu_gflops", 100.0 + at % 7,
                                              "GFLOPS")], at=at + 60)
        store.burnin.finish(rid, "complete", at=at + 120)
        series_before = store.burnin.series(nodes=["gpu00003"])
    before = store.counts()
    leader = Leader(store)  # SQLite: the one serve of the file leads
    ex = Expiry(store, RetentionPolicy(results=RESULTS, runs=RUNS, events=EVENTS,
                                       interval=3600), leader)
    try:
        ex.start(first_delay=0.01)
        deadline = time.monotonic() + 120
        while ex.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        ex.stop()
        store.close()
    assert ex.passes == 1 and ex.last is not None and not ex.last["stopped"]
    assert ex.last["deleted"]["results"] > 0 and ex.last["deleted"]["results"] < before["results"]
    # goodput's jobs go with the ledger (the job and its two node rows), the newer one stays
    assert ex.last["deleted"]["goodput_jobs"] == 3
    # burn-in: the measurement past 90 days went; the run (its verdict) and the series stay
    assert ex.last["deleted"]["burnin_results"] == 1
    store = Store.open(url=f"sqlite:///{tmp_path}/fleet.db")
    try:
        assert store.goodput.job("new") is not None and store.goodput.job("old") is None
        assert repr(store.burnin.series(nodes=["gpu00003"])) == repr(series_before)  # nan != nan
        assert store.counts()["burnin_runs"] == 2
    finally:
        store.close()
    bad = tmp_path / "bad.toml"
    bad.write_text("[store.retention]\nruns = \"a month\"\n")
    p = run_sg("-c", str(bad), "db", "expire", env=sg_env())
    assert p.returncode != 0 and "store.retention.runs" in p.stderr and "a month" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
