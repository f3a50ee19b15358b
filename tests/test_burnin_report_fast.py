"""The fast paths of `burnin report` give what the plain code gives (docs/burnin.md,
"Report at fleet scale"): the JSON document, and the inlined score / robust z."""

from __future__ import annotations

import json
import math

import click
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.burnin.stats import StatParams, judge_group, robust_z, score, score_z_of
from slurmguard.output import lines_json

DOC = {"since": "2026-12-01T00:00:00Z", "counts": {"pass": 2, "flagged": 1},
       "groups": [{"group": "8x H100", "metric": "m", "n": 3, "median": 1.5, "mad": 0.1,
                   "unit": "u", "verdict": True, "why": ""}],
       "nodes": [{"node": f"n{i}", "verdict": "pass", "scores": {"m": [1.0, 0.99]},
                  "metrics": [{"metric": "m", "value": 1.0 + i / 3, "score": None, "z": -1.25,
                               "flagged": False, "why": "é \"q\""}]} for i in range(3)],
       "applied": [], "plot": None}


def test_report_json_is_the_same_document_one_node_a_line() -> None:
    @click.command()
    def cmd() -> None:
        click.echo(lines_json(DOC))

    out = CliRunner().invoke(cmd).output
    assert json.loads(out) == json.loads(json.dumps(DOC, indent=2, sort_keys=True))
    lines = out.splitlines()
    node_lines = [ln for ln in lines if ln.lstrip().startswith('{"metrics"')]
    assert len(node_lines) == 3  # each node on one line, keys sorted
    assert [json.loads(ln.strip().rstrip(","))["node"] for ln in node_lines] == ["n0", "n1", "n2"]
    assert lines[0] == "{" and lines[-1] == "}"
    assert '"applied": []' in out and '"plot": null' in out


values = st.dictionaries(st.sampled_from([f"n{i}" for i in range(12)]),
                         st.one_of(st.floats(0, 1e6, allow_nan=False), st.just(0.0)),
                         min_size=4, max_size=12)


@given(values, st.booleans(), st.floats(0, 1, allow_nan=False), st.floats(0, 0.2))
def test_judge_group_equals_score_and_robust_z(vals: dict[str, float], higher: bool,
                                               z_limit: float, floor: float) -> None:
    p = StatParams(z_limit=z_limit * 5, mad_floor=floor)
    gs, js = judge_group("g", "m", vals, p, higher)
    assert sorted(j.node for j in js) == sorted(vals)
    for j in js:
        sc = score(j.value, gs.median, higher)
        z = robust_z(j.value, gs.median, gs.mad, higher, p.mad_floor)
        assert (j.score == sc) or (math.isinf(sc) and math.isinf(j.score))
        assert j.z == z and gs.tail == 1.0  # 12 nodes: too few to measure a tail
        sz = score_z_of(len(vals), p)  # 12 nodes at most: score_z is off (NOISE_MIN_GROUP)
        below = sc < p.threshold and (sz <= 0 or z < -sz)
        why = (f"score {sc:.2f} < {p.threshold:.2f}" if below else
               f"robust z {z:.1f} < -{p.z_limit:g}" if p.z_limit > 0 and z < -p.z_limit else "")
        assert j.why == why and j.flagged == bool(why)


def test_series_nights_keeps_the_last_values(tmp_path) -> None:
    # burnin_series(nights=k), as the report reads it, is the full row with only the last k
    # nightly values parsed (a gap stays nan where it falls).
    from slurmguard.sources.burnin import BurninValue
    from slurmguard.store import Store

    url = f"sqlite:///{tmp_path}/s.db"
    Store.upgrade({"url": url})
    store = Store.open(url=url)
    t0 = 1_800_000_000.0
    for day, value in [(10, 40.0), (11, 39.0), (13, 38.0), (14, 37.5)]:
        rid = store.burnin.started("n1", job_id=None, group_key="g", night=f"2027-01-{day}",
                                   at=t0 + day)
        store.burnin.record(rid, [BurninValue("host-cpu", "ok", "host_cpu_gflops", value,
                                              "GFLOP/s")], at=t0 + day)
        store.burnin.finish(rid, "complete", at=t0 + day)
    (full,) = store.burnin.series()
    assert full.recent[:2] == (40.0, 39.0) and math.isnan(full.recent[2])
    assert full.recent[3:] == (38.0, 37.5)
    for k in (1, 2, 3, 5, 8):
        (part,) = store.burnin.series(nights=k)
        assert part[:-1] == full[:-1]
        assert repr(part.recent) == repr(full.recent[-k:])
    store.close()
