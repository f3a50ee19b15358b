"""The numpy report path (slurmguard/burnin/vector.py) gives the pure judge's report, and the
stdlib SQLite reader (slurmguard/store/burnin_read.py) the Store's rows (docs/burnin.md,
"Report at fleet scale")."""

from __future__ import annotations

import json
import math
import sqlite3
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard.burnin.stats import StatParams
from slurmguard.burnin.vector import judge_packs, judge_rows
from slurmguard.burnin.verdict import Report, judge
from slurmguard.errors import StoreError
from slurmguard.store.burnin_read import (
    PACK_NUMS,
    SeriesRow,
    SqliteBurninReader,
    pack_recent,
    pack_series,
)


@dataclass(frozen=True)
class R:
    node: str
    id: int
    status: str
    reason: str = ""
    group_key: str = "8x H100"


def _same(a: Report, b: Report) -> None:
    """Equal reports, floats compared by repr (nan == nan, and no rounding allowed)."""
    assert repr(a.units) == repr(b.units)
    assert repr(a.groups) == repr(b.groups)
    assert list(a.nodes) == list(b.nodes)
    for n in a.nodes:
        assert repr(a.nodes[n]) == repr(b.nodes[n]), n


def unpack_packs(packs: list[Any]) -> list[tuple[Any, ...]]:
    """burnin_packs rows (node, meta, nums, recent) back as raw burnin_series rows, each
    node's in metric order: what ``pack_series`` was given (``recent`` text rebuilt from the
    float64 values, as burnin_finish writes it). The format's inverse, for the tests."""
    out = []
    for node, meta, nums, recent in packs:
        items = json.loads(meta)
        vals = struct.unpack(f"<{len(nums) // 8}d", nums)
        at = 0
        for i, (metric, unit, higher, group, night) in enumerate(items):
            rid, last_at, value, n = vals[PACK_NUMS * i:PACK_NUMS * (i + 1)]
            f8 = bytes(recent[at:at + 8 * int(n)])
            at += 8 * int(n)
            text = " ".join(map(repr, struct.unpack(f"<{int(n)}d", f8)))
            out.append((node, metric, unit, higher, group, int(rid), last_at, value, night,
                        text, f8))
    return out


NODES = [f"n{i}" for i in range(10)]
value = st.one_of(st.floats(0, 1000, allow_nan=False), st.sampled_from(
    [0.0, -1.0, math.nan, math.inf, 100.0, 5e-324]))
night_value = st.one_of(st.floats(80, 120), st.sampled_from([0.0, -1.0, math.nan, math.inf]))


@st.composite
def fleets(draw):
    nodes = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=10, unique=True))
    runs, rows = [], []
    for i, n in enumerate(nodes):
        status = draw(st.sampled_from(["complete"] * 6 + ["failed", "partial", "running"]))
        group = draw(st.sampled_from(["A", "B", ""]))
        runs.append(R(n, 100 + i, status, "why" if status != "complete" else "", group))
        for m in draw(st.lists(st.sampled_from(["cpu", "lat", "bw"]), unique=True, max_size=3)):
            rid = 100 + i if draw(st.integers(0, 9)) else 7  # sometimes an older run's value
            recent = tuple(draw(st.lists(night_value, max_size=8)))
            last = draw(value)
            night = draw(st.sampled_from(["2027-01-14", "2027-01-13", "2027-01-16", "bad"]))
            rows.append(SeriesRow(n, m, {"lat": "s"}.get(m, "u"), m != "lat", group, rid, 0.0,
                                  last, night, recent))
    if draw(st.booleans()):
        rows.append(SeriesRow("ghost", "cpu", "u", True, "A", 1, 0.0, 1.0, "2027-01-14", ()))
    return runs, rows


params = st.builds(StatParams, threshold=st.sampled_from([0.9, 0.5, 1.2]),
                   z_limit=st.sampled_from([0.0, 3.5, 0.5]),
                   mad_floor=st.sampled_from([0.01, 0.0]), min_group=st.sampled_from([1, 2, 4]),
                   trend_nights=st.sampled_from([1, 2, 4]),
                   trend_min_drop=st.sampled_from([0.05, 0.0]),
                   trend_sigmas=st.sampled_from([3.5, 0.0]),
                   clear_z=st.sampled_from([11.0, 0.5]), confirm_metrics=st.sampled_from([1, 2]),
                   score_z=st.sampled_from([4.0, 0.0, 0.5]))


@settings(max_examples=300, deadline=None)
@given(fleets(), params, st.booleans(), st.sampled_from(["floats", "text", "text+f8"]))
def test_numpy_judge_equals_the_pure_judge(fleet, p, drain, form) -> None:
    runs, rows = fleet
    groups_of = {"n3": "cfg"}
    k = max(1, p.trend_nights) + 1
    ref = judge(runs, [r._replace(recent=r.recent[-k:]) for r in rows], p, groups_of=groups_of,
                drain_degrading=drain)
    if form != "floats":  # as the store holds it (text, and since 0005 float64 bytes too)
        rows = [r._replace(recent=" ".join(map(repr, r.recent))) for r in rows if r.recent]
        ref = judge(runs, [r._replace(recent=tuple(map(float, r.recent.split()))[-k:])
                           for r in rows], p, groups_of=groups_of, drain_degrading=drain)
        if form == "text+f8":
            rows = [(*r, pack_recent(r.recent)) for r in rows]
    got = judge_rows(runs, rows, p, groups_of=groups_of, drain_degrading=drain)
    assert got is not None
    _same(got, ref)


@settings(max_examples=300, deadline=None)
@given(fleets(), params, st.booleans(), st.lists(st.sampled_from([0.0, 5.0]), min_size=40,
                                                 max_size=40),
       st.sampled_from([-math.inf, 1.0]))
def test_judge_from_packs_equals_the_pure_judge(fleet, p, drain, ats, since) -> None:
    # burnin_packs (one row a node) give the report the summary rows give: the pure
    # judge over the same rows (a node's in metric order), only those with last_at >= since.
    runs, rows = fleet
    rows = [r._replace(last_at=ats[i % len(ats)]) for i, r in enumerate(rows)]
    raw = [(*r[:9], " ".join(map(repr, r.recent)), struct.pack(f"<{len(r.recent)}d", *r.recent))
           for r in rows]
    by_node: dict[str, list] = {}
    for r in raw:
        by_node.setdefault(r[0], []).append(r)
    packs = [(n, *pack_series(rs)) for n, rs in by_node.items()]
    assert sorted(map(repr, unpack_packs(packs))) == sorted(map(repr, raw))  # nan: by repr
    k = max(1, p.trend_nights) + 1
    ordered = [SeriesRow(*r[:9], tuple(struct.unpack(f"<{len(r[10]) // 8}d", r[10]))[-k:])
               for r in unpack_packs(packs) if r[6] >= since]
    groups_of = {"n3": "cfg"}
    ref = judge(runs, ordered, p, groups_of=groups_of, drain_degrading=drain)
    got = judge_packs(runs, packs, p, since=since, groups_of=groups_of, drain_degrading=drain)
    assert got is not None
    _same(got, ref)


def test_a_pack_that_does_not_read_falls_back() -> None:
    runs = [R("n1", 1, "complete")]
    meta, nums, recent = pack_series([("n1", "cpu", "u", True, "g", 1, 0.0, 1.0, "2027-01-14",
                                       "1.0", struct.pack("<d", 1.0))])
    assert judge_packs(runs, [("n1", meta, nums, recent)], StatParams()) is not None
    assert judge_packs(runs, [("n1", meta, nums[:-8], recent)], StatParams()) is None
    assert judge_packs(runs, [("n1", meta, nums, recent + b"x" * 8)], StatParams()) is None
    assert judge_packs(runs, [("n1", "{", nums, recent)], StatParams()) is None
    assert pack_series([("n1", "cpu", "u", True, "g", 1, 0.0, 1.0, "x", "odd", None)]) is None


def test_numpy_judge_on_a_falling_and_a_slow_node() -> None:
    # The table test's fleet (test_burnin_stats.py): n6 falls 5 nights on 2 metrics, n7 is slow.
    # Two metrics of one component each: a trend needs confirm_metrics (2) of them.
    runs = [R(f"n{i}", i, "complete") for i in range(1, 8)]
    rows = [SeriesRow(f"n{i}", m, "GFLOP/s", True, "g", i, 0.0, 100.0, "2027-01-14",
                      "100.0 100.0 100.0 100.0 100.0") for i in range(1, 6) for m in ("host_cpu", "host_mem")]
    rows += [SeriesRow("n6", m, "GFLOP/s", True, "g", 6, 0.0, 93.0, "2027-01-14",
                       "101.0 100.0 99.0 98.0 96.0 93.0") for m in ("host_cpu", "host_mem")]
    rows += [SeriesRow("n7", m, "GFLOP/s", True, "g", 7, 0.0, 50.0, "2027-01-14",
                       "nan 50.0") for m in ("host_cpu", "host_mem")]
    p = StatParams(z_limit=0, trend_nights=4)
    got = judge_rows(runs, rows, p)
    assert {n: v.verdict for n, v in got.nodes.items()} == {
        **{f"n{i}": "pass" for i in range(1, 6)}, "n6": "degrading", "n7": "flagged"}
    assert got.nodes["n6"].scores == {m: (1.0, 0.99, 0.98, 0.96, 0.93) for m in ("host_cpu", "host_mem")}
    assert got.nodes["n7"].reason == "slurmguard: burnin: host_cpu 50 GFLOP/s = 0.50 of group median"


def test_numpy_judge_equals_the_pure_judge_where_tails_are_measured() -> None:
    # 1,000 nodes a group: enough beyond the 0.5 % quantile to take a tail factor (the
    # Hypothesis fleets above are too small to), heavy-tailed noise, planted faults.
    from support.burnin_truth import history

    fleet = history(seed=5, nodes=4000, shape="t4")
    pure = judge(fleet.runs, fleet.rows, StatParams())
    assert any(g.tail > 1.2 for g in pure.groups)
    assert {v.verdict for v in pure.nodes.values()} >= {"pass", "flagged", "suspect"}
    _same(judge_rows(fleet.runs, fleet.rows, StatParams()), pure)


def test_odd_recent_text_falls_back_to_the_pure_judge() -> None:
    runs = [R("n1", 1, "complete")]
    rows = [SeriesRow("n1", "cpu", "u", True, "g", 1, 0.0, 1.0, "2027-01-14", "1.0\t2.0")]
    assert judge_rows(runs, rows, StatParams()) is None


def test_sqlite_reader_reads_what_the_store_reads(tmp_path) -> None:
    from slurmguard.sources.burnin import BurninValue
    from slurmguard.store import Store

    url = f"sqlite:///{tmp_path}/s.db"
    Store.upgrade({"url": url})
    store = Store.open(url=url)
    t0 = 1_800_000_000.0
    for i, node in enumerate(["n2", "n1", "n3"]):
        for day in (13, 14):
            rid = store.burnin.submitted(node, job_id=f"{i}{day}", level="quick",
                                         night=f"2027-01-{day}", at=t0 + day)
            store.burnin.started(node, job_id=f"{i}{day}", group_key="g", at=t0 + day)
            store.burnin.record(rid, [
                BurninValue("host-cpu", "ok", "host_cpu_gflops", 40.0 + i / 3, "GFLOP/s"),
                BurninValue("disk", "ok", "disk_s", 1.5, "s", higher_is_better=False)],
                at=t0 + day)
            if node != "n3" or day == 13:
                store.burnin.finish(rid, "complete", at=t0 + day)
    reader = SqliteBurninReader.open({"path": f"{tmp_path}/s.db"})
    assert reader is not None
    for since in (float("-inf"), t0 + 14):
        assert reader.burnin.latest_runs(since) == store.burnin.latest_runs(since)
        assert reader.burnin.latest_runs(since, ["n1"]) == store.burnin.latest_runs(since, ["n1"])
        assert sorted(reader.burnin.series(since, nights=2)) == \
            sorted(store.burnin.series(since, nights=2))
        assert sorted(reader.burnin.series_raw(since)) == sorted(store.burnin.series_raw(since))
    assert reader.burnin.open_runs() == store.burnin.open_runs() != []
    # burnin_finish rewrote each node's pack with its series rows
    assert reader.burnin.packs() == store.burnin.packs()
    assert sorted(p[0] for p in store.burnin.packs(["n3", "n1"])) == ["n1", "n3"]
    assert sorted(unpack_packs(store.burnin.packs())) == sorted(
        (*r[:3], bool(r[3]), *r[4:]) for r in reader.burnin.series_raw())
    assert len(reader.burnin.series()) == 6
    for row in reader.burnin.series_raw():  # burnin_finish keeps both forms of the values
        text, packed = row[9], row[10]
        assert struct.unpack(f"<{len(packed) // 8}d", packed) == tuple(map(float, text.split()))
        assert len(text.split()) == (2 if row[0] != "n3" else 1)
    reader.close()
    store.close()
    assert SqliteBurninReader.open({"url": "postgresql+psycopg://x@y/z"}) is None


def test_sqlite_reader_refuses_a_missing_or_foreign_file(tmp_path) -> None:
    with pytest.raises(StoreError, match="no such file"):
        SqliteBurninReader(str(tmp_path / "none.db"))
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="no slurmguard schema"):
        SqliteBurninReader(str(tmp_path / "empty.db"))


@settings(max_examples=150, deadline=None)
@given(fleets(), params, st.sampled_from([None, "cpu", "lat"]))
def test_report_json_lines_equal_the_encoder(fleet, p, metric) -> None:
    # `report --json` writes each node's line itself (slurmguard/burnin/render.py, node_line):
    # the same text as json.dumps of the node's dict, keys sorted, nan/inf/None included.
    import json

    from slurmguard.burnin.render import node_json, node_line

    runs, rows = fleet
    rows.append(SeriesRow("n0", "lat", "s", False, "A", 100, 0.0, 0.0, "2027-01-14", ()))
    rep = judge(runs, rows, p, groups_of={"n1": "gr\u00fcppe \"x\""})
    names: dict[str, tuple[str, str]] = {}
    assert rep.nodes  # the fleet's nodes and n0
    for v in rep.nodes.values():
        want = json.dumps(node_json(v, rep.units, metric), sort_keys=True, default=str)
        assert node_line(v, rep.units, metric, names) == want


def test_json_numbers_spell_what_json_spells() -> None:
    import json

    from slurmguard.burnin.render import numbers

    xs = [1.5, math.nan, math.inf, -math.inf, None, 3, 1e-05, 0.1 + 0.2, True, -0.0]
    assert numbers(xs) == [json.dumps(x) for x in xs]
    assert numbers(xs[:-2]) == [json.dumps(x) for x in xs[:-2]]  # the one-repr path
    assert numbers([]) == []


def test_migrations_fill_recent_f8_and_packs_from_stored_rows(tmp_path) -> None:
    # 0005 packs each row's text into float64 bytes; 0006 packs each node's rows into one
    # burnin_packs row, except a node with a row whose text does not parse.
    from slurmguard.store import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    engine = make_engine({"url": f"sqlite:///{tmp_path}/s.db"})
    upgrade(engine, "0004")
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.executemany("INSERT INTO nodes (id, name, first_seen, lemon, burnin_required, "
                         "probation, probation_passes) VALUES (?, ?, 0, 0, 0, 0, 0)",
                         [(1, "n1"), (2, "n2")])
        conn.executemany("INSERT INTO burnin_series (node_id, metric, unit, higher_is_better, "
                         "group_key, last_run_id, last_at, last_value, last_night, recent) "
                         "VALUES (?, ?, 'u', ?, 'g', 1, 0, 2.5, '2027-01-14', ?)",
                         [(1, "a", 1, "1.0 nan 2.5"), (1, "b", 1, "2.5"),
                          (1, "c", 1, "not a number"), (2, "b", 0, "2.5"),
                          (2, "a", 1, "3.0 2.5")])
    from slurmguard.store.version import HEAD

    assert upgrade(engine, "head") == ("0004", HEAD)  # 0005 and 0006 ran on these rows
    engine.dispose()
    store = Store.open(url=f"sqlite:///{tmp_path}/s.db")
    raw = store.burnin.series_raw()
    got = {(r[0], r[1]): r[10] for r in raw}
    assert got["n1", "a"] == struct.pack("<3d", 1.0, math.nan, 2.5)
    assert got["n1", "b"] == struct.pack("<d", 2.5) and got["n1", "c"] is None
    assert store.burnin.packs() is None  # n1 has no pack: the report reads burnin_series
    with sqlite3.connect(tmp_path / "s.db") as conn:
        packs = conn.execute("SELECT n.name, p.meta, p.nums, p.recent FROM burnin_packs p "
                             "JOIN nodes n ON n.id = p.node_id").fetchall()
    store.close()
    assert [p[0] for p in packs] == ["n2"]
    assert unpack_packs(packs) == sorted(r for r in raw if r[0] == "n2")


# One fleet of test_burnin_planted.py's kind per noise shape, at 2,500 nodes (the pure judge
# takes 2-13 s a night at 10,000 on a shared 2-core machine; all nine 10,000-node fleets
# agreed when run once: 14.9 min, load 26).
PLANTED_NODES = 2_500


@pytest.mark.parametrize("shape, seed", [("gauss", 1), ("t5", 2), ("t4", 3)])
def test_both_judges_give_every_planted_node_the_same_verdict(shape: str, seed: int) -> None:
    # The planted fleets (planted slow and worn nodes), tonight and at the
    # re-run, through the two judges as `burnin report` calls them: the columnar one on the
    # stored rows, the pure one (no numpy) on the last trend_nights + 1 nights. Same verdict
    # for every node, and the same report to the last float.
    from support.burnin_truth import history

    p = StatParams()
    k = max(1, p.trend_nights) + 1
    fleet = history(seed=seed, nodes=PLANTED_NODES, shape=shape, rerun=True)
    for runs, rows in ((fleet.runs, fleet.rows), (fleet.rerun_runs, fleet.rerun_rows)):
        pure = judge(runs, [r._replace(recent=r.recent[-k:]) for r in rows], p)
        vec = judge_rows(runs, rows, p)
        assert vec is not None
        differ = {n: (v.verdict, vec.nodes[n].verdict) for n, v in pure.nodes.items()
                  if vec.nodes[n].verdict != v.verdict}
        assert differ == {} and len(vec.nodes) == len(pure.nodes) == PLANTED_NODES, list(differ.items())[:5]
        assert {"pass", "flagged", "suspect"} <= set(pure.counts())
        _same(vec, pure)
