"""The store API against SQLite and a real PostgreSQL (the same tests, parametrized)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.contract import CheckResult, Health
from slurmguard.errors import EXIT_STORE, InputError, StoreError
from slurmguard.node.record import make_record
from slurmguard.policy.lemon import failures, lemon_verdict
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store

pytestmark = pytest.mark.postgres

T0 = 1_800_000_000.0


def rec(node: str, started: float, *fails: str, hook: str = "prolog", job: str | None = None,
        errors: tuple[str, ...] = ()) -> dict:
    results = [CheckResult("gpu-count", Health.HEALTHY)]
    results += [CheckResult(f, Health.UNHEALTHY, f"{f} broke") for f in fails]
    results += [CheckResult(e, Health.ERROR, "checker crashed") for e in errors]
    action = "drain" if fails else "pass"
    return make_record(node, hook, results, action, f"slurmguard: {fails[0]}: broke" if fails else "",
                       job_id=job, started=started, duration=0.1)


@pytest.fixture
def store(store_url: str):  # noqa: F811
    s = Store.open(url=store_url)
    yield s
    s.close()


def test_record_is_stored_exactly_once(store: Store) -> None:
    r = rec("n1", T0, "gpu-xid")
    assert store.nodes.record_results(r) is True
    assert store.nodes.record_results(r) is False
    r2 = rec("n1", T0 + 1)
    assert store.nodes.record_many([r, r2, r2]) == [r2["id"]]
    c = store.counts()
    assert c["runs"] == 2 and c["nodes"] == 1 and c["results"] == 3


def test_node_view_follows_newest_run_not_replayed_old_ones(store: Store) -> None:
    store.nodes.record_results(rec("n1", T0 + 100))
    store.nodes.record_results(rec("n1", T0, "fs-mount"))  # an old record replayed from a spool
    (s,) = store.nodes.summary(["n1"], now=T0 + 200)
    assert s.last_health == "healthy" and s.last_seen == T0 + 100
    assert s.failing_checks == () and s.failures == 1
    store.nodes.record_results(rec("n1", T0 + 150, "fs-mount", "gpu-xid"))
    (s,) = store.nodes.summary(["n1"], now=T0 + 200)
    assert s.last_health == "unhealthy" and s.failing_checks == ("fs-mount", "gpu-xid")
    assert s.failures == 2 and s.last_reason == "slurmguard: fs-mount: broke"


def test_checker_errors_are_not_failures(store: Store) -> None:
    store.nodes.record_results(rec("n1", T0, errors=("gpu-ecc",)))
    (s,) = store.nodes.summary(["n1"], now=T0 + 1)
    assert s.last_health == "healthy" and s.failures == 0
    store.nodes.record_results(make_record("n2", "prolog", [CheckResult("x", Health.ERROR, "boom")],
                                           "checker-error", "", started=T0))
    (s,) = store.nodes.summary(["n2"], now=T0 + 1)
    assert s.last_health == "error" and s.failures == 0
    assert store.nodes.lemon_candidates(PolicyParams(window=10, lemon_failures=1), now=T0 + 1) == []


def test_events_ledger_with_actors(store: Store) -> None:
    store.nodes.record_event("n1", "drain", "slurmguard", "slurmguard: gpu-xid: xid 79",
                             source="gpu-xid", at=T0)
    store.nodes.record_event("n1", "clear", "admin:alice", "fixed", at=T0 + 10)
    store.nodes.record_event("n2", "state_change", "kubernetes", "NotReady", at=T0 + 20)
    store.nodes.record_event("n2", "drain", "slurm", "Not responding", at=T0 + 30)
    ev = store.nodes.events(since=T0)
    assert [(e.node, e.kind, e.who) for e in ev] == [
        ("n2", "drain", "slurm"), ("n2", "state_change", "kubernetes"),
        ("n1", "clear", "admin:alice"), ("n1", "drain", "slurmguard")]
    assert [e.kind for e in store.nodes.events(node="n1", kinds=["clear"])] == ["clear"]
    assert store.nodes.events(since=T0 + 25)[0].reason == "Not responding"
    with pytest.raises(InputError, match="actor"):
        store.nodes.record_event("n1", "drain", "root", "x")
    with pytest.raises(InputError, match="event kind"):
        store.nodes.record_event("n1", "explode", "slurmguard", "x")
    with pytest.raises(InputError, match="node"):
        store.nodes.record_event("n1;rm -rf", "drain", "slurmguard", "x")


def test_history_merges_results_and_events_newest_first(store: Store) -> None:
    store.nodes.record_results(rec("n1", T0, "gpu-xid"))
    store.nodes.record_event("n1", "drain", "slurmguard", "slurmguard: gpu-xid: x", at=T0 + 1)
    store.nodes.record_results(rec("n1", T0 + 2))
    h = store.nodes.history("n1")
    assert [(i.kind, i.health) for i in h] == [("result", "healthy"), ("drain", ""),
                                              ("result", "unhealthy")]
    assert h[2].checks == ("gpu-xid",) and h[1].actor == "slurmguard"
    assert store.nodes.history("nope") == []


def test_lemon_candidates_are_the_policy_verdict_and_drain_history_sql_runs(store: Store) -> None:
    from pathlib import Path

    from sqlalchemy import text

    for i in range(3):  # three failure episodes, each ended by a run where gpu-xid passed
        store.nodes.record_results(rec("bad", T0 + i * 60, "gpu-xid"))
        store.nodes.record_results(make_record("bad", "healthcheck", [CheckResult("gpu-xid", Health.HEALTHY)],
                                         "pass", "", started=T0 + i * 60 + 30, duration=0.1))
    store.nodes.record_results(rec("ok", T0, "gpu-xid"))
    store.nodes.record_results(rec("ok", T0 + 60))
    now = T0 + 600
    # The thresholds are the policy's (policy/params.py), and the verdict is lemon_verdict's.
    assert store.nodes.lemon_candidates(now=now) == [("bad", "slurmguard: lemon: 3 failures in 1h (gpu-xid)")]
    p = PolicyParams(lemon_failures=4, flap_transitions=6)
    views = store.nodes.policy_views(["bad", "ok"], window=p.window, now=now)
    assert lemon_verdict(views["bad"], now, p) is None
    assert store.nodes.lemon_candidates(p, now=now) == []
    assert store.nodes.lemon_candidates(PolicyParams(lemon_failures=1), now=now) == [
        ("bad", "slurmguard: lemon: 3 failures in 1h (gpu-xid)"),
        ("ok", "slurmguard: lemon: 1 failures in 1h (gpu-xid)")]
    store.nodes.set_flags("bad", lemon=True, lemon_reason="x")
    assert store.nodes.lemon_candidates(now=now) == []  # already marked: not a candidate
    hist = (Path(__file__).resolve().parents[1] / "sql" / "drain_history.sql").read_text()
    store.nodes.record_event("bad", "drain", "admin:bob", "flaky", at=T0)
    with store.engine.connect() as conn:
        rows = conn.execute(text(hist), {"since": T0 - 1}).all()
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("bad", "drain", "admin", "bob")]


def test_probation_counts_passing_jobs(store: Store) -> None:
    store.nodes.record_results(rec("n1", T0))
    store.nodes.return_node("n1", "admin:alice", "replaced GPU", at=T0 + 1)
    store.nodes.record_results(rec("n1", T0 + 2, hook="epilog", job="11"))
    store.nodes.record_results(rec("n1", T0 + 3, hook="prolog", job="12"))  # not a finished job
    store.nodes.record_results(rec("n1", T0 + 4, "gpu-xid", hook="epilog", job="12"))  # failed
    store.nodes.record_results(rec("n1", T0 + 5, hook="epilog", job="13"))
    (s,) = store.nodes.summary(["n1"])
    assert s.probation and s.probation_passes == 2
    assert [e.who for e in store.nodes.events(kinds=["probation_start"])] == ["admin:alice"]


def test_return_of_a_lemon_is_recorded_with_the_admin(store: Store) -> None:
    store.nodes.set_flags("n1", lemon=True, lemon_reason="lemon: 3 failures in 1h (gpu-xid)",
                          lemon_since=T0, burnin_required=True)
    (s,) = store.nodes.summary(["n1"])
    assert s.lemon and s.burnin_required
    store.nodes.return_node("n1", "admin:carol", "resume --force", at=T0 + 5)
    (s,) = store.nodes.summary(["n1"])
    assert not s.lemon and not s.burnin_required and s.probation
    kinds = [(e.kind, e.who) for e in store.nodes.events()]
    assert ("lemon_cleared", "admin:carol") in kinds


def test_one_fleet_alert_per_cause_and_scope(store: Store) -> None:
    a, created = store.nodes.open_alert("fs-mount", "partition:gpu", ["n1", "n2"], "m", now=T0)
    assert created and a.nodes == "n[1-2]" and a.count == 2
    b, created = store.nodes.open_alert("fs-mount", "partition:gpu", ["n3", "n2"], "m2", now=T0 + 5)
    assert not created and b.id == a.id and b.nodes == "n[1-3]" and b.count == 3
    c, created = store.nodes.open_alert("gpu-xid", "partition:gpu", ["n1"], "m", now=T0 + 5)
    assert created and c.id != a.id
    assert {x.cause for x in store.nodes.alerts()} == {"fs-mount", "gpu-xid"}
    store.nodes.close_alert(a.id, now=T0 + 6)
    assert [x.cause for x in store.nodes.alerts()] == ["gpu-xid"]


def test_policy_view_counts_foreign_drains_only(store: Store) -> None:
    store.nodes.record_results(rec("n1", T0, "gpu-xid"))
    store.nodes.record_results(rec("n1", T0 + 10, errors=("gpu-ecc",)))
    store.nodes.record_event("n1", "drain", "slurmguard", "x", at=T0 + 1)
    store.nodes.record_event("n1", "drain", "admin:alice", "x", at=T0 + 2)
    store.nodes.record_event("n1", "drain", "kubernetes", "x", at=T0 - 7200)  # outside the window
    v = store.nodes.policy_views(["n1", "unknown"], window=3600, now=T0 + 60)
    assert set(v) == {"n1"}
    assert v["n1"].foreign_drains == (T0 + 2,)
    assert [(s.health, s.checks) for s in v["n1"].samples] == [("unhealthy", ("gpu-xid",)),
                                                               ("healthy", ())]


def test_bad_record_is_refused_naming_the_field(store: Store) -> None:
    r = rec("n1", T0)
    r["results"][0]["health"] = "sick"
    with pytest.raises(InputError, match=r"record.results\[0\].health"):
        store.nodes.record_results(r)
    r = rec("n1", T0)
    r["started"] = "yesterday"
    with pytest.raises(InputError, match="record.started"):
        store.nodes.record_many([rec("n2", T0), r])
    assert store.counts()["runs"] == 0  # nothing of a bad batch is stored


def test_many_nodes_in_one_batch(store: Store) -> None:
    batch = [rec(f"gpu{i:04d}", T0 + i, *(("fs-mount",) if i % 2 else ())) for i in range(1200)]
    assert len(store.nodes.record_many(batch)) == 1200
    assert len(store.nodes.summary()) == 1200
    assert len(store.nodes.summary([f"gpu{i:04d}" for i in range(0, 1200, 2)])) == 600
    assert store.nodes.fleet_failure_rate(window=10_000, now=T0 + 1200) == (600, 1200)


def test_summary_of_every_node_counts_failures_as_the_named_one_does(store: Store) -> None:
    day = 86400.0
    store.nodes.record_many([rec("n1", T0 - 8 * day, "gpu-xid"), rec("n1", T0 - day, "gpu-xid"),
                             rec("n1", T0, "ib-link"), rec("n2", T0), rec("n3", T0 - 2 * day, "fs-mount")])
    every = {s.name: s.failures for s in store.nodes.summary(now=T0 + 1)}
    named = {s.name: s.failures for s in store.nodes.summary(["n1", "n2", "n3"], now=T0 + 1)}
    assert every == named == {"n1": 2, "n2": 0, "n3": 1}  # the 8-day-old failure is out


def test_batch_write_keeps_each_run_whole(store: Store) -> None:
    """The batch write's rows, column by column (PostgreSQL binds them as arrays): a new
    node, a record without results, a job id, details JSON, an already stored id."""
    old = rec("n1", T0 - 5)
    store.nodes.record_results(old)
    bare = make_record("n9", "epilog", [], "pass", "", job_id="77", started=T0, duration=2.5)
    bad = rec("n1", T0, "gpu-xid")
    bad["results"][1]["details"] = {"xid": 79, "bus": "0000:17:00.0"}
    assert store.nodes.record_many([old, bare, bad, bare]) == [bare["id"], bad["id"]]
    from sqlalchemy import text

    with store.engine.connect() as conn:
        runs = {r.record_id: r for r in conn.execute(text(
            "SELECT r.record_id, n.name, r.hook, r.job_id, r.started, r.duration, r.health, "
            "r.action, r.reason, r.version, count(x.id) AS results FROM runs r "
            "JOIN nodes n ON n.id = r.node_id LEFT JOIN results x ON x.run_id = r.id "
            "GROUP BY r.record_id, n.name, r.hook, r.job_id, r.started, r.duration, r.health, "
            "r.action, r.reason, r.version"))}
        details = conn.execute(text("SELECT details FROM results WHERE name = 'gpu-xid'")).scalar()
    assert len(runs) == 3
    b = runs[bare["id"]]
    assert (b.name, b.hook, b.job_id, b.started, b.duration, b.health, b.results) == (
        "n9", "epilog", "77", T0, 2.5, "healthy", 0)
    x = runs[bad["id"]]
    assert (x.health, x.action, x.reason, x.results) == ("unhealthy", "drain",
                                                         "slurmguard: gpu-xid: broke", 2)
    assert json.loads(details) == {"bus": "0000:17:00.0", "xid": 79}
    s = {n.name: n for n in store.nodes.summary()}
    assert s["n1"].last_seen == T0 and s["n1"].failing_checks == ("gpu-xid",)
    assert s["n9"].last_hook == "epilog"


def test_batch_write_keeps_hostile_text_and_exact_numbers(store: Store) -> None:
    """What the node sends is what is stored, byte for byte and bit for bit: quotes,
    backslashes, JSON-looking text, non-ASCII and line separators in reasons and details
    (PostgreSQL's rows travel as one JSON document), a NUL inside details (escaped by JSON,
    so legal), and floats at full precision."""
    reason = 'say "hi" \\ {"records": []} \u2028 \u00e9\U0001f525 \t'
    r = rec("n1", T0 + 0.123456789, "gpu-xid")
    r["results"][1]["reason"] = reason
    r["results"][1]["details"] = {"msg": "a\x00b", "q": '"\\', "k\u00e9y": [1.5e-300, 2 ** 53]}
    r["results"][1]["duration"] = 9999999.999999
    r["decision"]["reason"] = "slurmguard: " + reason
    assert store.nodes.record_many([r]) == [r["id"]]
    from sqlalchemy import text

    with store.engine.connect() as conn:
        run = conn.execute(text("SELECT started, reason FROM runs")).one()
        res = conn.execute(text(
            "SELECT reason, details, duration FROM results WHERE name = 'gpu-xid'")).one()
    assert run.started == T0 + 0.123456789 and run.reason == "slurmguard: " + reason
    assert res.reason == reason and res.duration == 9999999.999999
    assert res.details == json.dumps(r["results"][1]["details"], sort_keys=True)
    (s,) = store.nodes.summary(["n1"])
    assert s.last_seen == T0 + 0.123456789


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=60))
def test_batch_write_round_trips_any_reason(store: Store, reason: str) -> None:
    r = rec(f"h{uuid.uuid4().hex[:12]}", T0, "fs-mount")
    r["results"][1]["reason"] = reason
    r["results"][1]["details"] = {reason: reason}
    assert store.nodes.record_many([r]) == [r["id"]]
    from sqlalchemy import text

    with store.engine.connect() as conn:
        row = conn.execute(text(
            "SELECT x.reason, x.details FROM results x JOIN runs r ON r.id = x.run_id "
            "WHERE r.record_id = :i AND x.name = 'fs-mount'"), {"i": r["id"]}).one()
    assert row.reason == reason[:1000] and json.loads(row.details) == {reason: reason}


def test_replicas_writing_the_same_records_store_each_once(pg_server) -> None:  # noqa: F811
    """Serve replicas on one PostgreSQL, each writing batches that overlap (the same spool
    replayed to two replicas): every record once, no batch fails, no deadlock."""
    from concurrent.futures import ThreadPoolExecutor

    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    url = pg_server.url(pg_server.create_db())
    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    records = [rec(f"r{i % 40:03d}", T0 + i) for i in range(400)]
    stores = [Store.open(url=url) for _ in range(4)]
    try:
        def write(k: int) -> list[str]:
            batch = records[k::3] + records[: 60]  # every writer also takes the first 60
            return stores[k % 4].nodes.record_many(batch[::-1] if k % 2 else batch)

        with ThreadPoolExecutor(8) as pool:
            stored = [i for ids in pool.map(write, range(12)) for i in ids]
        assert sorted(stored) == sorted(r["id"] for r in records)  # each once, none lost
        assert stores[0].counts()["runs"] == 400
        assert stores[0].counts()["results"] == 400
        newest = {s.name: s.last_seen for s in stores[0].nodes.summary()}
        assert newest == {f"r{n:03d}": T0 + 360 + n for n in range(40)}
    finally:
        for s in stores:
            s.close()


def test_newer_schema_is_refused(store_url: str) -> None:  # noqa: F811
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    engine = make_engine({"url": store_url})
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer than this slurmguard"):
        Store.open(url=store_url)
    with pytest.raises(StoreError, match="newer than this slurmguard"):
        upgrade(engine)
    engine.dispose()


def test_unreachable_store_is_one_line_and_exit_store(tmp_path) -> None:
    port = 1  # nothing listens there
    with pytest.raises(StoreError, match="store postgresql"):
        Store.open(url=f"postgresql+psycopg://sg@127.0.0.1:{port}/x")
    (tmp_path / "sg.toml").write_text("")
    p = run_sg("db", "current", "--url", f"postgresql+psycopg://sg:secret@127.0.0.1:{port}/x",
               env=sg_env(SLURMGUARD_CONFIG=str(tmp_path / "sg.toml")))
    assert p.returncode == EXIT_STORE, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmguard: error: store ")
    assert "secret" not in p.stderr and "Traceback" not in p.stderr


def test_sqlite_store_in_missing_directory_is_store_error(tmp_path) -> None:
    with pytest.raises(StoreError, match="does not exist; run: slurmguard setup controller"):
        Store.open(url=f"sqlite:///{tmp_path}/no/such/dir/s.db")


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine

    engine = make_engine({"path": str(tmp_path / "s.db"), "busy_timeout": 3.0})
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 3000
    engine.dispose()


def test_record_ids_are_unique_per_make_record() -> None:
    ids = {rec("n1", time.time())["id"] for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 for i in ids)
    assert uuid.UUID(next(iter(ids)))


def test_policy_views_carry_which_checks_passed_so_an_episode_ends_only_when_its_check_passes(
        store: Store) -> None:
    # fs-mount fails in a health check; a prolog that runs only gpu-count passes; fs-mount
    # fails again: one incident. Then a health check where fs-mount passes ends it.
    store.nodes.record_results(rec("n1", T0, "fs-mount", hook="healthcheck"))
    store.nodes.record_results(rec("n1", T0 + 10, hook="prolog"))
    store.nodes.record_results(rec("n1", T0 + 20, "fs-mount", hook="healthcheck"))
    store.nodes.record_results(rec("ok", T0 + 20, hook="prolog"))
    views = store.nodes.policy_views(["n1", "ok"], window=3600, now=T0 + 30)
    assert [s.passed for s in views["n1"].samples] == [("gpu-count",)] * 3
    assert views["ok"].samples[0].passed is None  # never failed: not read
    assert failures(views["n1"], T0 + 30, 3600) == 1
    store.nodes.record_results(make_record("n1", "healthcheck", [CheckResult("fs-mount", Health.HEALTHY)],
                                     "pass", "", started=T0 + 40, duration=0.1))
    store.nodes.record_results(rec("n1", T0 + 50, "fs-mount", hook="healthcheck"))
    views = store.nodes.policy_views(["n1"], window=3600, now=T0 + 60)
    assert failures(views["n1"], T0 + 60, 3600) == 2


def test_policy_views_carry_the_shared_faults_that_cover_each_node(store: Store) -> None:
    # n1, n2: a shared fs-mount fault twice (pass, fail, pass, fail, pass); n3 flaps on its
    # own gpu-xid, under an alert that names no shared cause (one node: "causes unknown").
    for node, check in (("n1", "fs-mount"), ("n2", "fs-mount"), ("n3", "gpu-xid")):
        for i in range(5):
            at = T0 + i * 300
            if i % 2:
                store.nodes.record_results(rec(node, at, check, hook="healthcheck"))
            else:
                store.nodes.record_results(make_record(
                    node, "healthcheck", [CheckResult(check, Health.HEALTHY)], "pass", "",
                    started=at, duration=0.1))
    store.nodes.open_alert("fs-mount", "partition:gpu", ["n1", "n2"], "suspect a shared cause",
                           now=T0 + 301)
    store.nodes.open_alert("fs-mount", "partition:gpu", ["n1", "n2"], "suspect a shared cause",
                           now=T0 + 901)  # the second fault: the open alert is updated
    store.nodes.open_alert("gpu-xid", "fleet", ["n3"], "causes unknown", now=T0 + 301)
    now = T0 + 1300
    views = store.nodes.policy_views(["n1", "n3"], window=3600, now=now,
                                     scopes={"partition:gpu": frozenset({"n1", "n2"})})
    assert views["n1"].shared == (("fs-mount", T0 + 301 - 3600, T0 + 901 + 3600),)
    assert views["n3"].shared == ()
    assert lemon_verdict(views["n1"], now, PolicyParams()) is None
    # Without Slurm's scopes the alert still covers the nodes it names.
    assert store.nodes.lemon_candidates(now=now) == [
        ("n3", "slurmguard: flapping: 4 pass/fail changes in 1h (gpu-xid)")]
