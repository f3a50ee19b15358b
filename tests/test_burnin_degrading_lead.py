"""burn-in's ``degrading`` verdict speaks early and rightly: on fleets whose wearing nodes
wear on night after night (tests/support/burnin_truth.py, ``wearing``: 4,000 nodes, 22
nights, 40 nodes losing 1-3 % a night on a component's 2-3 metrics from a random night),
judged every night on the 8 nights the store keeps, the nodes named degrading are the
wearing ones, named at least 2 nights before the slow rule drains them (docs/burnin.md,
"Degrading").

The rule's defaults (trend_nights 7, trend_min_drop 0.03, FALL_Z 1, trend_sigmas 4.5, the
hinge over the last half of the nights, LINE_Z 3) were chosen on generator seeds 1 and 2 of
each noise (tests/bench/bench_prediction.py --burnin-seeds); the seeds here, 3 and 4, were
held out (and 5 and 6, measured with the bench only). The figures docs/burnin.md publishes for them are the ones computed here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

pytest.importorskip("numpy")  # the generator and the columnar judge use it

from support.burnin_truth import wearing  # noqa: E402
from support.wear_outcome import Outcome, judge_nightly  # noqa: E402

from slurmguard.burnin.stats import StatParams  # noqa: E402
from slurmguard.burnin.vector import judge_rows  # noqa: E402
from slurmguard.burnin.verdict import judge  # noqa: E402

HELD_OUT = (3, 4)  # 5 and 6 too by hand: the bench (75 s of CPU for 12 fleets, not CI's)
SHAPES = ("gauss", "t5", "t4")
DOC = Path(__file__).resolve().parents[1] / "docs" / "burnin.md"
# The goal: precision >= 0.8 and half the wearing nodes named 2 nights before their drain.
# The precision is met on every held-out fleet; the recall on seed 4 of each noise only
# (docs/burnin.md, "Where the goal is not met": a node wearing fast against its noise is
# drained within a few nights, before 8 nights can tell its fall from chance). The floors
# are what each noise measures on seed 3 (k of 40 planted), so that the rule cannot fall
# back unnoticed; the goal stays open.
PRECISION = 0.8
RECALL = {"gauss": 15 / 40, "t5": 17 / 40, "t4": 17 / 40}
FIGURE = re.compile(r"^\| (gauss|t5|t4) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+|-) \| (\d+) \| "
                    r"(\d+) \| ([-\d, ]*) \|$", re.M)


@pytest.fixture(scope="module")
def measured() -> dict[tuple[str, int], Outcome]:
    return {(shape, seed): judge_nightly(wearing(seed=seed, shape=shape), StatParams())
            for shape in SHAPES for seed in HELD_OUT}


def row(shape: str, seed: int, o: Outcome) -> str:
    """The doc's table row for one fleet: noise, seed, precision, recall (lead >= 2), median
    lead, named, planted, every true prediction's lead (nights; never drained: omitted)."""
    p, r, lead, named, planted = o.figures()
    leads = ", ".join(str(v) for v in sorted(v for v in o.leads().values() if v is not None))
    return (f"| {shape} | {seed} | {p:.2f} | {r:.2f} | {'-' if math.isnan(lead) else f'{lead:g}'} "
            f"| {named} | {planted} | {leads} |")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", HELD_OUT)
def test_degrading_names_wearing_nodes_before_they_drain(measured, shape: str, seed: int) -> None:
    o = measured[(shape, seed)]
    precision, recall, lead, named, planted = o.figures()
    assert precision >= PRECISION, (precision, named)
    assert recall >= RECALL[shape], (recall, sorted(o.leads().items()))
    assert lead >= 2, lead  # the median true prediction comes 2 nights or more ahead


def test_the_docs_quote_the_figures_computed_here(measured) -> None:
    quoted = {(m[1], int(m[2])): m[0] for m in FIGURE.finditer(DOC.read_text())}
    computed = {(shape, seed): row(shape, seed, o) for (shape, seed), o in measured.items()}
    assert quoted == computed, "docs/burnin.md, 'Degrading': rows to quote:\n" + "\n".join(
        computed.values())


def test_both_judges_name_the_same_degrading_nodes() -> None:
    # The pure judge (verdict.judge) and the columnar one (vector.judge_rows) on a wearing
    # fleet's nights: the same verdicts, degrading above all (the trend's z from each).
    w = wearing(seed=5, nodes=1200, shape="t4", falling_frac=0.03)
    seen = set()
    for t in (12, 16, 20):
        runs, rows = w.night(t)
        pure, cols = judge(runs, rows, StatParams()), judge_rows(runs, rows, StatParams())
        assert cols is not None
        assert {n: v.verdict for n, v in pure.nodes.items()} == \
            {n: v.verdict for n, v in cols.nodes.items()}
        seen |= {n for n, v in pure.nodes.items() if v.verdict == "degrading"}
    assert seen & w.falling  # the comparison saw trends, not only passes


def test_a_verdict_never_given_fails_the_precision_test() -> None:
    o = Outcome({}, {}, frozenset({"gpu00001"}), 21)
    assert o.figures()[:2] == (0.0, 0.0)
