"""The repair decision core on a fleet with planted truth (tests/support/repairgen.py): 2,000 nodes,
four weeks, 5 faults per 1,000 node-days (transient, reboot-proof, permanent, flapping) and two
switch outages. Every return is scored against the truth: the figures in docs/repair.md."""

from __future__ import annotations

import pytest
from support.repairgen import simulate

from slurmguard import config
from slurmguard.policy.repair_params import RepairParams

P = RepairParams.from_section(config.defaults()["repair"])


@pytest.fixture(scope="module")
def figures():
    return simulate(nodes=2000, days=28, seed=1, params=P)[1]


def test_limits_jobs_and_shared_causes_are_never_crossed(figures):
    assert figures.rungs_on_busy == 0  # never a rung on a node with a running job
    assert figures.rungs_on_shared == 0  # never a rung while the cause's fleet alert is open
    assert 0 < figures.max_in_repair <= P.max_nodes
    assert 0 < figures.max_reboots_hour <= P.reboots_per_hour
    assert 0 < figures.max_attempts <= P.attempts


def test_precision_recall_and_the_repair_loop_guard(figures):
    f = figures
    precision = f.good_returns / f.returns
    recall = f.curable_returned / f.curable
    print(f"\nreturns {f.returns}, precision {precision:.3f}, recall {recall:.3f}, tickets "
          f"{f.tickets}, max attempts {f.max_attempts}, flapper returns in window "
          f"{f.max_returns_flapper}")
    assert f.permanent_returned == 0  # a fault nothing cures is never returned
    # A fault the ladder cures goes to people only when it is the node's second within the
    # week (lemon_repairs = 1): about 1 % of them.
    assert f.tickets_of_curable <= 0.02 * f.curable
    assert recall >= 0.95
    assert precision >= 0.85  # the bad returns are flapping nodes only, each at most K times
    assert f.max_returns_flapper == P.lemon_repairs


def test_a_larger_lemon_budget_buys_recall_with_precision():
    """lemon_repairs = 3 returns every curable fault (no ticket of a curable node) but each
    flapping node three times a week: precision falls (docs/repair.md, the figures)."""
    f = simulate(nodes=2000, days=28, seed=1, params=P._replace(lemon_repairs=3))[1]
    base = simulate(nodes=2000, days=28, seed=1, params=P)[1]
    assert f.max_returns_flapper == 3 and f.tickets_of_curable == 0
    assert f.good_returns / f.returns < base.good_returns / base.returns
    assert f.curable_returned / f.curable >= base.curable_returned / base.curable
