"""Straggler statistics and verdicts: pure code, table-tested and Hypothesis-tested."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurmguard.burnin.stats import (
    StatParams,
    confirmed,
    degrading_nodes,
    hinge_drop,
    judge_group,
    mad,
    median,
    nightly_scores,
    previous_out,
    robust_z,
    score,
    tail_factor,
    worst,
)
from slurmguard.burnin.verdict import fmt_value, judge, straggler_reason

P = StatParams()


@pytest.mark.parametrize("values, med, spread", [
    ([1.0], 1.0, 0.0),
    ([1.0, 3.0], 2.0, 1.0),
    ([5.0, 1.0, 3.0], 3.0, 2.0),
    ([1.0, 2.0, 3.0, 4.0, 100.0], 3.0, 1.0),  # one outlier moves neither
    ([10.0] * 7, 10.0, 0.0),
])
def test_median_and_mad(values, med, spread):
    assert median(values) == med
    assert mad(values) == spread


def test_median_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        median([])


@pytest.mark.parametrize("value, med, higher, expected", [
    (90.0, 100.0, True, 0.90),
    (110.0, 100.0, True, 1.10),
    (125.0, 100.0, False, 0.80),  # lower is better: 25 % slower is 0.80
    (80.0, 100.0, False, 1.25),
    (5.0, 0.0, True, 1.0),  # no median to compare with
    (0.0, 10.0, False, math.inf),
])
def test_score(value, med, higher, expected):
    assert score(value, med, higher) == pytest.approx(expected)


@pytest.mark.parametrize("value, med, spread, higher, floor, expected", [
    (90.0, 100.0, 10.0, True, 0.01, -0.6745),
    (110.0, 100.0, 10.0, False, 0.01, -0.6745),  # lower is better: above median is worse
    (99.0, 100.0, 0.0, True, 0.01, -0.6745),  # MAD 0 floored at 1 % of the median
    (100.0, 100.0, 0.0, True, 0.0, 0.0),
])
def test_robust_z(value, med, spread, higher, floor, expected):
    assert robust_z(value, med, spread, higher, floor) == pytest.approx(expected)


# name, values, higher_is_better, params, flagged nodes
CASES = [
    ("one slow node of eight", {f"n{i}": 100.0 for i in range(1, 8)} | {"n8": 70.0}, True, P,
     {"n8"}),
    ("lower is better (seconds)", {f"n{i}": 10.0 for i in range(1, 8)} | {"n8": 13.0}, False, P,
     {"n8"}),
    ("fast node never flagged", {f"n{i}": 100.0 for i in range(1, 8)} | {"n8": 300.0}, True, P,
     set()),
    ("just above threshold, z off", {f"n{i}": 100.0 for i in range(1, 8)} | {"n8": 91.0}, True,
     StatParams(z_limit=0), set()),
    ("just above threshold, z catches a tight group",
     {f"n{i}": 100.0 + i * 0.1 for i in range(1, 8)} | {"n8": 92.0}, True, P, {"n8"}),
    ("noisy group: z stays quiet",
     {"n1": 80.0, "n2": 120.0, "n3": 95.0, "n4": 105.0, "n5": 88.0, "n6": 112.0, "n7": 100.0,
      "n8": 91.0}, True, StatParams(threshold=0.85, score_z=0), {"n1"}),
    ("noisy small group: a score below threshold counts whatever the spread (score_z needs "
     "a group large enough to measure its noise)",
     {"n1": 80.0, "n2": 120.0, "n3": 95.0, "n4": 105.0, "n5": 88.0, "n6": 112.0, "n7": 100.0,
      "n8": 91.0}, True, StatParams(threshold=0.85), {"n1"}),
    ("two stragglers", {f"n{i}": 50.0 for i in range(1, 7)} | {"n7": 10.0, "n8": 20.0}, True, P,
     {"n7", "n8"}),
    ("unusable values ignored", {"n1": 100.0, "n2": 100.0, "n3": 100.0, "n4": 100.0,
                                 "n5": None, "n6": float("nan"), "n7": -1.0}, True, P, set()),
]


@pytest.mark.parametrize("name, values, higher, params, flagged", CASES, ids=[c[0] for c in CASES])
def test_judge_group_table(name, values, higher, params, flagged):
    stats, js = judge_group("g", "m", values, params, higher)
    assert stats.verdict
    assert {j.node for j in js if j.flagged} == flagged
    for j in js:
        assert j.flagged == bool(j.why)


def test_small_group_gives_no_verdict_and_says_so():
    stats, js = judge_group("g", "m", {"a": 100.0, "b": 100.0, "c": 10.0}, P)
    assert not stats.verdict and "fewer than min_group 4" in stats.why
    assert all(not j.flagged and j.score is None for j in js)


@pytest.mark.parametrize("scores, expected", [
    ([1.0, 1.0, 1.0, 0.98, 0.96], 0.04),  # flat, then 2 nights of -0.02: all of it
    ([1.0, 1.0, 1.0, 1.0, 0.99, 0.98, 0.97, 0.96], 0.04),  # 8 nights: the last 4 fall
    ([1.0, 0.98, 0.96, 0.94, 0.92], 0.0625),  # a fall older than the window reads less
    ([0.97] * 5, 0.0),  # steadily below the median: its own level, no fall
    ([1.0, 1.0, 1.0, 1.0, 0.80], 0.175),  # least squares: one odd night counts, 0.875 of it
    ([0.9, 0.95, 1.0, 1.05, 1.1], -0.15625),  # rising
    ([1.0, 0.9], 0.1),  # two nights: their difference
    ([1.0], 0.0),
])
def test_hinge_drop(scores, expected):
    assert hinge_drop(scores) == pytest.approx(expected, abs=1e-12)


def _fleet(falling: dict[str, tuple[float, ...]], flat: int = 8) -> dict[str, tuple[int, tuple]]:
    series = {f"n{i}": (20, (100.0 + i * 0.1,) * 5) for i in range(flat)}
    return series | {n: (20, v) for n, v in falling.items()}


# Five nights (trend_nights 4) and a 0.05 floor: the table's series are five nights long.
P5 = replace(P, trend_nights=4, trend_min_drop=0.05)


@pytest.mark.parametrize("falling, p, expected", [
    ({"x": (100.0, 100.0, 100.0, 96.0, 92.0)}, P5, {"x"}),  # 0.08 in 2 nights: z 5.4
    ({"x": (100.0, 98.0, 96.0, 94.0, 92.0)}, P5, set()),  # a line over all 5 reads 0.0625: z 4.2
    ({"x": (100.0, 98.0, 96.0, 94.0, 92.0)}, replace(P5, trend_sigmas=4.0), {"x"}),
    ({"x": (100.0, 99.0, 98.5, 98.0, 97.0)}, P5, set()),  # 0.022: less than trend_min_drop
    ({"x": (100.0, 100.0, 100.0, 100.0, 85.0)}, P5, set()),  # crossed the threshold
    ({"x": (100.0, 97.0, 94.0, 91.0, 88.0)}, P5, set()),  # crossed the threshold: a straggler
    ({"x": (100.0, 100.0, 100.0, 96.0, 92.0)}, replace(P5, min_group=20), set()),  # too few
    ({"x": (100.0, 100.0, 100.0, 96.0, 92.0)}, replace(P5, trend_sigmas=9.0), set()),  # z 5.4
])
def test_degrading_nodes_table(falling, p, expected):
    assert set(degrading_nodes(_fleet(falling), True, p)) == expected


def test_previous_night_out_of_bounds():
    series = _fleet({"x": (100.0, 100.0, 100.0, 70.0, 70.0), "y": (100.0,) * 4 + (70.0,)})
    assert previous_out(series, True, 1.0, P) == {"x"}
    assert previous_out(series, False, 1.0, P) == set()  # lower is better: 70 s is faster


def test_previous_out_is_the_run_before_whatever_night_it_was():
    # A suspect's re-run may come nights later (the node was busy): the run before counts.
    nan = float("nan")
    series = _fleet({"x": (100.0, 100.0, 70.0, nan, 70.0), "y": (100.0, 70.0, 100.0, nan, 70.0)})
    assert previous_out(series, True, 1.0, P) == {"x"}


def test_confirmed_needs_two_metrics_two_nights_or_a_clear_drop():
    _, a = judge_group("g", "a", {f"n{i}": 100.0 + i for i in range(8)} | {"x": 85.0}, P)
    _, b = judge_group("g", "b", {f"n{i}": 100.0 + i for i in range(8)} | {"x": 80.0}, P)
    xa, xb = (next(j for j in js if j.node == "x") for js in (a, b))
    assert xa.flagged and xb.flagged and -11 < xa.z < -5
    assert not confirmed([xa], (), P)  # one metric, one night, not clear: a suspect
    assert confirmed([xa, xb], (), P)
    assert confirmed([xa], ("a",), P) and not confirmed([xa], ("b",), P)
    assert confirmed([xa], (), StatParams(clear_z=5.0))
    # in a heavy-tailed group the clear bar is clear_z x its tail factor
    assert not confirmed([xa], (), StatParams(clear_z=5.0), {"a": 3.0})
    assert confirmed([xa], (), StatParams(clear_z=5.0), {"b": 3.0})
    assert not confirmed([], ("a",), P)


def test_nightly_scores_use_each_nights_median():
    series = {"a": (11, (100.0, 50.0)), "b": (11, (100.0, 50.0)), "c": (11, (100.0, 25.0)),
              "d": (11, (float("nan"), 50.0)),  # a gap: no trend for d
              "e": (10, (100.0,))}  # its last night is night 10: counts in night 10's median
    out = nightly_scores(series, True, 2)
    # night 11 was slow for everyone: a and b keep 1.0, c halves
    assert out == {"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [1.0, 0.5]}


def test_worst_names_lowest_score():
    _, js = judge_group("g", "m", {f"n{i}": 100.0 for i in range(6)} | {"x": 50.0}, P)
    _, js2 = judge_group("g", "k", {f"n{i}": 100.0 for i in range(6)} | {"x": 80.0}, P)
    w = worst([*js, *js2])
    assert w is not None and w.node == "x" and w.metric == "m"


def test_reason_format():
    _, js = judge_group("g", "host_cpu_gflops", {f"n{i}": 40.0 for i in range(6)} | {"x": 3.14159}, P)
    j = next(j for j in js if j.node == "x")
    assert straggler_reason(j, "GFLOP/s") == \
        "slurmguard: burnin: host_cpu_gflops 3.14 GFLOP/s = 0.08 of group median"
    assert fmt_value(12800.4) == "12800" and fmt_value(0.000123) == "0.000123"


@dataclass(frozen=True)
class R:
    node: str
    id: int
    status: str
    reason: str = ""
    group_key: str = "8x H100"


@dataclass(frozen=True)
class S:
    node: str
    metric: str
    last_value: float
    last_run_id: int
    unit: str = "GFLOP/s"
    higher_is_better: bool = True
    group_key: str = "8x H100"
    last_night: str = "2027-01-14"
    recent: tuple = ()


def test_judge_verdicts_per_node():
    runs = [R(f"n{i}", i, "complete") for i in range(1, 7)]
    runs += [R("n7", 7, "failed", "gpu-ecc: GPU 2 uncorrectable ECC"), R("n8", 8, "partial", "cancelled"),
             R("n9", 9, "running")]
    series = [S(f"n{i}", "cpu", 100.0, i) for i in range(1, 6)] + [S("n6", "cpu", 50.0, 6)]
    series += [S("n7", "cpu", 100.0, 7), S("n8", "cpu", 1.0, 8)]
    rep = judge(runs, series, P)
    v = {n: x.verdict for n, x in rep.nodes.items()}
    assert v == {"n1": "pass", "n2": "pass", "n3": "pass", "n4": "pass", "n5": "pass",
                 "n6": "flagged", "n7": "failed", "n8": "partial", "n9": "pending"}
    assert rep.nodes["n6"].reason == "slurmguard: burnin: cpu 50 GFLOP/s = 0.50 of group median"
    assert rep.nodes["n7"].reason == "slurmguard: burnin: gpu-ecc: GPU 2 uncorrectable ECC"
    assert rep.nodes["n8"].reason == "" and rep.nodes["n9"].reason == ""


def test_judge_ignores_values_of_older_runs_and_other_groups():
    runs = [R(f"n{i}", 10 + i, "complete") for i in range(1, 5)] + [R("a1", 20, "complete", group_key="A100")]
    series = [S(f"n{i}", "cpu", 100.0, 10 + i) for i in range(1, 4)] + [S("n4", "cpu", 1.0, 4)]
    series += [S("a1", "cpu", 1.0, 20, group_key="A100")]
    rep = judge(runs, series, P)
    # n4's value is from an older run: n1..n3 are a group of 3 -> no verdict for anyone
    assert {n: v.verdict for n, v in rep.nodes.items()} == {
        "n1": "no_verdict", "n2": "no_verdict", "n3": "no_verdict", "n4": "no_verdict",
        "a1": "no_verdict"}


def test_judge_degrading_reported_and_drained_only_when_configured():
    runs = [R(f"n{i}", i, "complete") for i in range(1, 7)]

    def fleet(metrics: tuple[str, ...]) -> list:
        flat = [S(f"n{i}", m, 100.0, i, recent=(100.0,) * 5) for i in range(1, 6) for m in metrics]
        return flat + [S("n6", m, 93.0, 6, recent=(100.0, 99.0, 98.0, 96.0, 93.0)) for m in metrics]

    series = fleet(("gpu_tflops", "gpu_membw_gbs"))
    z35 = replace(P5, z_limit=3.5)  # a tight group: a z rule of 3.5 flags 0.93 already
    assert judge(runs, series, z35).nodes["n6"].verdict == "flagged"
    assert judge(runs, series, P5).nodes["n6"].verdict == "degrading"
    # one metric falling is no trend (confirm_metrics 2)
    assert judge(runs, fleet(("gpu_tflops",)), P5).nodes["n6"].verdict == "pass"
    # nor are two metrics of two components (a GPU and the host's memory): chance pairs
    assert judge(runs, fleet(("gpu_tflops", "host_membw_gbs")), P5).nodes["n6"].verdict == "pass"
    # two of one component falling add up (Stouffer): 4.0 z each (a 0.06 fall over the last
    # 2 nights, the MAD floored at 0.01), neither a trend at 5.5 by itself, 2 x 4.0 / sqrt 2
    # = 5.7 together
    p6 = replace(P5, trend_sigmas=5.5)
    assert not degrading_nodes({r.node: (20, r.recent) for r in series
                                if r.metric == "gpu_tflops"}, True, p6)
    assert judge(runs, series, p6).nodes["n6"].verdict == "degrading"
    v = judge(runs, series, P5, drain_degrading=True).nodes["n6"]
    assert v.verdict == "flagged" and v.reason == ("slurmguard: burnin: gpu_membw_gbs degrading: "
                                                   "scores 1.00 0.99 0.98 0.96 0.93 of group median")


def test_judge_suspect_is_confirmed_by_the_next_night():
    runs = [R(f"n{i}", i, "complete") for i in range(1, 9)]
    series = [S(f"n{i}", "cpu", 100.0 + i, i, recent=(100.0 + i,) * 2) for i in range(1, 8)]
    tonight = judge(runs, [*series, S("n8", "cpu", 85.0, 8, recent=(100.0, 85.0))], P)
    assert tonight.nodes["n8"].verdict == "suspect" and tonight.nodes["n8"].reason == ""
    again = judge(runs, [*series, S("n8", "cpu", 85.0, 8, recent=(85.0, 85.0))], P)
    assert again.nodes["n8"].verdict == "flagged"
    assert again.nodes["n8"].reason.startswith("slurmguard: burnin: cpu 85")


# ------------------------------------------------------------------------- properties

values_st = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4),
                            st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
                            min_size=0, max_size=40)
params_st = st.builds(StatParams, threshold=st.floats(0.0, 1.0), z_limit=st.floats(0.0, 10.0),
                      mad_floor=st.floats(0.0, 0.5), min_group=st.integers(1, 10))


@settings(max_examples=300, deadline=None)
@given(values_st, params_st, st.booleans())
def test_property_never_flags_a_node_at_least_as_good_as_the_median(values, p, higher):
    stats, js = judge_group("g", "m", values, p, higher)
    flagged = [j for j in js if j.flagged]
    assert all(stats.verdict and j.score is not None and j.score < 1.0 for j in flagged)
    assert all((j.value < stats.median) if higher else (j.value > stats.median) for j in flagged)


@settings(max_examples=300, deadline=None)
@given(values_st, params_st, st.booleans(), st.floats(0.01, 100.0))
@example(values={"a": 0.0010000000000000002, "aa": 0.001},
         p=StatParams(threshold=0.0, z_limit=1.0, mad_floor=0.0, min_group=1), higher=False,
         k=0.01171875)  # one ulp apart: found by CI, 2026-12-03
def test_property_verdicts_are_scale_invariant(values, p, higher, k):
    sa, a = judge_group("g", "m", values, p, higher)
    _, b = judge_group("g", "m", {n: v * k for n, v in values.items()}, p, higher)
    # A spread at float-rounding level (values one ulp apart, mad_floor 0) has no unit-free z:
    # scaling the values rounds it differently. Judge invariance only above that noise.
    spread_is_noise = (sa.median is not None and sa.mad is not None
                       and max(sa.mad, abs(sa.median) * p.mad_floor) <= 1e-9 * abs(sa.median))
    assert [x.node for x in a] == [y.node for y in b]
    for x, y in zip(a, b, strict=True):
        if x.score is not None:
            assert y.score == pytest.approx(x.score, rel=1e-6)
            # far from the edges the flag does not move with the unit
            if (not spread_is_noise and abs(x.score - p.threshold) > 1e-6
                    and (x.z is None or abs(abs(x.z) - p.z_limit) > 1e-6)):
                assert x.flagged == y.flagged


@settings(max_examples=200, deadline=None)
@given(values_st, params_st)
def test_property_small_groups_never_judge(values, p):
    stats, js = judge_group("g", "m", values, p)
    small = len(values) < p.min_group
    assert not small or (not stats.verdict and not any(j.flagged for j in js))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text("abc", min_size=1, max_size=3),
                       st.lists(st.floats(0.1, 100.0), min_size=1, max_size=6), max_size=10),
       st.floats(0.1, 10.0), st.integers(1, 6))
def test_property_nightly_scores_are_scale_invariant(values, k, nights):
    series = {n: (100, tuple(v)) for n, v in values.items()}
    a = nightly_scores(series, True, nights)
    b = nightly_scores({n: (d, tuple(x * k for x in v)) for n, (d, v) in series.items()}, True, nights)
    assert a.keys() == b.keys()
    for n in a:
        assert b[n] == pytest.approx(a[n], rel=1e-6)
        assert len(a[n]) == nights


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.001, 1e6), min_size=1, max_size=50))
def test_property_median_is_a_middle_value(xs):
    m = median(xs)
    assert min(xs) <= m <= max(xs)
    assert sum(1 for x in xs if x < m) <= len(xs) / 2 and sum(1 for x in xs if x > m) <= len(xs) / 2
    assert mad(xs) >= 0


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("abcd", min_size=1, max_size=2),
                       st.tuples(st.integers(95, 100),
                                 st.lists(st.one_of(st.floats(0.5, 1.5), st.just(float("nan"))),
                                          min_size=1, max_size=8)), max_size=12),
       params_st, st.integers(1, 5), st.floats(0.0, 0.3), st.booleans())
def test_property_a_falling_node_falls_as_a_line_above_threshold(series, p, k, drop, higher):
    from dataclasses import replace

    p = replace(p, trend_nights=k, trend_min_drop=drop)
    series = {n: (d, tuple(v)) for n, (d, v) in series.items()}
    scores = nightly_scores(series, higher, k + 1)
    falling = degrading_nodes(series, higher, p)
    assert set(falling) <= set(series)
    for node, sc in falling.items():
        assert sc == scores[node] and len(sc) == k + 1
        assert hinge_drop(sc) >= drop and sc[-1] >= p.threshold


@pytest.mark.parametrize("nodes,awaiting,probation,want", [
    (["n3", "n1", "n2"], set(), set(), ["n1", "n2", "n3"]),
    (["n3", "n1", "n2"], {"n3"}, set(), ["n3", "n1", "n2"]),
    # returned by `resume --force` (probation) right after the nodes awaiting burn-in
    (["n4", "n3", "n2", "n1"], {"n4"}, {"n2"}, ["n4", "n2", "n1", "n3"]),
    (["n2", "n1"], {"n1"}, {"n1"}, ["n1", "n2"]),
])
def test_submit_order(nodes: list[str], awaiting: set[str], probation: set[str],
                      want: list[str]) -> None:
    from slurmguard.burnin.submit import submit_order

    assert submit_order(nodes, awaiting, probation) == want


def test_submit_order_puts_nodes_at_risk_after_those_awaiting_burnin() -> None:
    """risk.burnin_first (docs/fleet.md): at-risk nodes, riskiest first, before probation."""
    from slurmguard.burnin.submit import submit_order

    assert submit_order(["n5", "n4", "n3", "n2", "n1"], {"n5"}, {"n1"},
                        {"n3": 45.0, "n4": 80.0}) == ["n5", "n4", "n3", "n1", "n2"]


def test_a_burnin_suspect_is_due_its_rerun() -> None:
    """`burnin submit` takes a node whose latest run was judged a suspect first (with the
    suspects named slow by jobs): that run is the re-run that confirms or clears it."""
    from types import SimpleNamespace as NS

    from slurmguard.burnin.submit import rerun_due

    latest = [NS(node="n1", verdict="suspect"), NS(node="n2", verdict="pass"),
              NS(node="n3", verdict=None), NS(node="n4", verdict="flagged")]
    assert rerun_due(latest) == {"n1"}


def _tail(values: list[float], higher: bool = True, q: float = 0.005) -> float:
    srt = sorted(values)
    med = median(srt)
    return tail_factor(srt, med, mad(srt, med), higher, q)


def test_tail_factor_tells_heavy_tails_from_gaussian_noise() -> None:
    # 4,000 nodes at 2 % noise: Gaussian about 1; Student-t with 4 degrees of freedom (a
    # normal over sqrt(chi2_4 / 4)) about 1.6 (its z at the 0.5 % quantile: 4.2 against 2.58).
    rng = random.Random(7)
    gauss = [100 + rng.gauss(0, 2) for _ in range(4000)]
    heavy = [100 + 2 * rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4)
             for _ in range(4000)]
    assert 1.0 <= _tail(gauss) < 1.15
    assert _tail(heavy) > 1.4
    # slow nodes lie on the worse side: they do not make the noise look heavier
    assert _tail(gauss + [60.0] * 200) < 1.15
    # lower is better: the better side is the low one
    assert _tail([200 - v for v in heavy], higher=False) == pytest.approx(_tail(heavy))
    # too few nodes beyond the quantile to say anything, or the factor off
    assert _tail(heavy[:999]) == 1.0 and _tail(heavy, q=0.0) == 1.0


def test_heavy_tails_raise_the_bar_for_one_metric_alone() -> None:
    # A node 30 % below a heavy-tailed 4,000-node group: at 14 robust z a single-metric drain
    # under a Gaussian reading, under 11 once the z is divided by the group's tail factor.
    rng = random.Random(3)
    vals = {f"n{i}": 100 + 2 * rng.gauss(0, 1) / math.sqrt(
        sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4) for i in range(4000)}
    vals["n0"] = 70.0
    off, on = (judge_group("g", "m", vals, StatParams(tail_quantile=q))
               for q in (0.0, 0.005))
    z_off = next(j.z for j in off[1] if j.node == "n0")
    z_on = next(j.z for j in on[1] if j.node == "n0")
    assert on[0].tail > 1.3 and z_on == pytest.approx(z_off / on[0].tail)
    assert z_off < -11 < z_on


def test_score_z_asks_only_a_large_group_for_its_noise() -> None:
    """In a 1,000-node group a score below threshold that lies within the group's noise is no
    evidence (score_z); the same score in an 8-node group is (a node at a tenth of its
    peers' speed drains the same night, tests/test_burnin_cluster.py)."""
    from slurmguard.burnin.stats import NOISE_MIN_GROUP, score_z_of

    rng = random.Random(3)
    big = {f"n{i}": 100 + rng.gauss(0, 8) for i in range(NOISE_MIN_GROUP)} | {"low": 84.0}
    _, js = judge_group("g", "m", big, StatParams(threshold=0.85), True)
    low = next(j for j in js if j.node == "low")
    assert low.score < 0.85 and low.z > -4 and not low.flagged
    assert score_z_of(NOISE_MIN_GROUP - 1, P) == 0.0 and score_z_of(NOISE_MIN_GROUP, P) == P.score_z


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["gpu_tflops", "gpu_membw_gbs", "gpu_power_w",
                                           "host_cpu", "host_mem", "disk_read", "nccl_busbw"]),
                          st.floats(1.0, 12.0), st.floats(-2.0, 8.0)),
                unique_by=lambda t: t[0], max_size=7),
       st.integers(1, 3), st.floats(0.0, 12.0))
def test_property_a_trend_is_a_component_whose_falls_add_up(falls_, need, sigmas):
    from slurmguard.burnin.stats import LINE_Z, stouffer
    from slurmguard.burnin.verdict import component, one_component

    p = replace(P, confirm_metrics=need, trend_sigmas=sigmas)
    falling = [(m, [1.0], z, lz) for m, z, lz in sorted(falls_)]
    kept = one_component(falling, p)
    assert kept == [f for f in falling if f in kept]  # a subset, in order
    for c in {component(f[0]) for f in falling}:
        fs = [f for f in falling if component(f[0]) == c]
        whole = (len(fs) >= need and stouffer([f[2] for f in fs]) >= sigmas
                 and stouffer([f[3] for f in fs]) >= LINE_Z)
        # a component is kept whole or not at all, and only when its falls add up, both
        # the hinge's and the lines'
        assert [f for f in kept if component(f[0]) == c] == (fs if whole else [])
