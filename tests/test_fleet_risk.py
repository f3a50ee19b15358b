"""The node risk score: each factor, its weight and cap, the sum (pure; docs/fleet.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.errors import ConfigError
from slurmguard.fleet.history import Run
from slurmguard.fleet.params import FACTORS, RiskParams
from slurmguard.fleet.risk import DAY, NodeSignals, RiskInputs, beyond_chance, score, tail

P = RiskParams()


@pytest.mark.parametrize("inputs, expected, top", [
    (RiskInputs(), 0.0, None),
    (RiskInputs(failures=1), 15.0, "failures"),
    (RiskInputs(failures=2), 30.0, "failures"),  # two by chance: not at risk alone
    (RiskInputs(failures=3), 45.0, "failures"),
    (RiskInputs(failures=5), 50.0, "failures"),  # capped
    (RiskInputs(warning_days={"gpu_memory": 2}), 20.0, "gpu_memory"),
    (RiskInputs(warning_days={"gpu_memory": 9}), 25.0, "gpu_memory"),
    (RiskInputs(warning_days={"thermal": 2}), 6.0, "thermal"),
    (RiskInputs(warning_days={"links": 1.5}), 15.0, "links"),  # beyond the node's own rate
    (RiskInputs(warning_days={"links": 4}, rising=("links",)), 50.0, "links"),  # + rising
    (RiskInputs(warning_days={"links": 2}, rising=("links",)), 45.0, "rising"),
    (RiskInputs(burnin_flagged=1), 10.0, "burnin"),
    (RiskInputs(burnin_failed=1), 25.0, "burnin"),
    (RiskInputs(failed_jobs=2), 10.0, "failed_jobs"),
    (RiskInputs(failures=2, warning_days={"gpu_memory": 5, "links": 5, "xid": 4},
                rising=("links",), failed_jobs=4), 100.0, "failures"),  # the sum is capped
])
def test_score_table(inputs, expected, top):
    r = score(inputs, P)
    assert r.score == expected
    assert (r.factors[0].name if r.factors else None) == top
    assert r.score == min(100.0, sum(f.points for f in r.factors))
    for f in r.factors:  # each factor says how it got its points
        assert f.points == min(FACTORS[f.name][1], f.count * f.weight)
        assert f.line().startswith(f"{f.name} {f.count:g} x {f.weight:g} = +")


def test_rising_is_a_change_beyond_chance_at_the_nodes_own_rate():
    # a node silent for 20 days: 3 warning days in 10 are improbable (p ~ 0.008)
    assert beyond_chance(3, 10, 0, 20)
    assert not beyond_chance(1, 10, 0, 20)
    # a node that warned on 6 of the 20 days before: 6 of 10 is within chance, 9 is not
    assert not beyond_chance(6, 10, 6, 20)
    assert beyond_chance(9, 10, 6, 20)
    assert abs(tail(3, 10, 0.5) - 0.9453125) < 1e-9 and tail(11, 10, 0.5) == 0.0


def test_weights_come_from_config_and_bad_ones_name_the_key(tmp_path):
    from slurmguard import config

    cfg = tmp_path / "sg.toml"
    cfg.write_text("[risk]\nlevel = 30\n[risk.weights]\nfailures = 10\n")
    rp = RiskParams.from_section(config.load(str(cfg)).section("risk"))
    assert rp.level == 30 and rp.weight("failures") == 10 and rp.weight("links") == 10
    assert score(RiskInputs(failures=2), rp).score == 20.0
    cfg.write_text("[risk.weights]\nfailures = \"many\"\n")
    with pytest.raises(ConfigError, match=r"risk\.weights\.failures: expected a number"):
        config.load(str(cfg))
    cfg.write_text("[risk.weights]\nluck = 3\n")
    with pytest.raises(ConfigError, match=r"risk\.weights\.luck"):
        config.load(str(cfg))


def test_signals_count_days_in_the_lookback_only():
    now = 100 * DAY
    runs = [Run(now - 40 * DAY, "degraded", warnings=("ib-counters",)),  # before the lookback
            Run(now - 12 * DAY, "degraded", warnings=("ib-counters",)),  # earlier: 1 in 20 d
            Run(now - 2 * DAY, "degraded", warnings=("ib-counters",)),
            Run(now - 2 * DAY + 60, "degraded", warnings=("gpu-nvlink",)),  # same day: one day
            Run(now - 1 * DAY, "degraded", warnings=("host-edac",)),  # no area: not counted
            Run(now - 1 * DAY, "degraded", warnings=("gpu-remap",),  # a row newly remapped
                counts=(("gpu-remap", 1),)),
            Run(now - 1 * DAY, "unhealthy", "epilog", "77", checks=("gpu-xid",)),
            Run(now - 1 * DAY, "degraded", "epilog", "78", warnings=("gpu-thermal",)),
            Run(now + DAY, "degraded", warnings=("ib-counters",))]  # after now: not yet known
    sig = NodeSignals.build(runs, [now - 45 * DAY, now - 3 * DAY], [(now - 5 * DAY, "failed")])
    inp = sig.inputs(now, P)
    assert inp.failures == 1
    # links: 1 recent day against 1 day in the 20 before (0.5 expected in 10): 0.5 beyond
    assert dict(inp.warning_days) == {"links": 0.5, "thermal": 1.0, "gpu_memory": 1.0}
    assert inp.rising == ()
    # a degraded epilog is not a failed job; an unhealthy one is
    assert (inp.burnin_failed, inp.burnin_flagged, inp.failed_jobs) == (1, 0, 1)
    assert score(inp, P).score == 15 + 5 + 3 + 25 + 5 + 10


def _ecc(at: float, count: int, hook: str = "healthcheck") -> Run:
    return Run(at, "degraded", hook, warnings=("gpu-ecc",), counts=(("gpu-ecc", count),))


def test_a_lifetime_count_is_judged_by_its_growth_not_its_level():
    now = 60 * DAY
    old = [_ecc(t * 6 * 3600.0, 3) for t in range(240)]  # 3 old errors, every run, 60 days
    assert NodeSignals.build(old, []).inputs(now, P).warning_days == {}
    grew = old[:200] + [_ecc(t * 6 * 3600.0, 3 + (t >= 220) + (t >= 230)) for t in range(200, 240)]
    inp = NodeSignals.build(grew, []).inputs(now, P)
    assert inp.warning_days == {"gpu_memory": 2.0} and inp.rising == ("gpu_memory",)
    assert score(inp, P).score == 20 + 25


def test_rows_newly_remapped_count_as_memory_units_once_per_run():
    """gpu-remap's count is already a growth (rows remapped since its last reading): each
    row a unit from the first warning on; a run where gpu-ecc's count grew too counts the
    larger of the two (one memory error grows both counts)."""
    now = 60 * DAY

    def remap(at: float, rows: int, ecc: int | None = None) -> Run:
        if ecc is None:
            return Run(at, "degraded", warnings=("gpu-remap",), counts=(("gpu-remap", rows),))
        return Run(at, "degraded", warnings=("gpu-ecc", "gpu-remap"),
                   counts=(("gpu-ecc", ecc), ("gpu-remap", rows)))

    inp = NodeSignals.build([remap(55 * DAY, 2)], []).inputs(now, P)
    assert inp.warning_days == {"gpu_memory": 2.0} and inp.rising == ("gpu_memory",)
    both = [_ecc(20 * DAY, 1), remap(55 * DAY, 1, ecc=2), remap(56 * DAY, 3, ecc=3)]
    assert NodeSignals.build(both, []).inputs(now, P).warning_days == {"gpu_memory": 4.0}


def test_a_return_from_a_failure_resets_the_warnings_of_what_it_fixed():
    now = 40 * DAY
    ramp = [Run(d * DAY, "degraded", warnings=("ib-counters",)) for d in range(28, 35)]
    hot = [Run(d * DAY, "degraded", warnings=("gpu-thermal",)) for d in range(32, 39)]
    sig = NodeSignals.build(ramp + hot, [35 * DAY], returns=[(36 * DAY, "ib-link")])
    inp = sig.inputs(now, P)
    assert "links" not in inp.warning_days and inp.rising == ("thermal",)  # only links fixed
    before = NodeSignals.build(ramp + hot, [35 * DAY]).inputs(now, P)
    assert before.warning_days["links"] == 2.5  # days 31-34 against 28-30's rate
    passed = NodeSignals.build(ramp + hot, [], [(39 * DAY, "pass")])  # burn-in: all verified
    assert passed.inputs(now, P).warning_days == {}


@given(st.integers(0, 20), st.integers(0, 20), st.booleans(), st.integers(0, 10))
def test_score_is_bounded_and_never_falls_with_more_failures(f, w, up, jobs):
    rising = ("links",) if up else ()
    a = score(RiskInputs(failures=f, warning_days={"links": w}, rising=rising,
                         failed_jobs=jobs), P)
    b = score(RiskInputs(failures=f + 1, warning_days={"links": w}, rising=rising,
                         failed_jobs=jobs), P)
    assert 0.0 <= a.score <= b.score <= 100.0


@pytest.mark.parametrize("probation, at_risk, marked, expected", [
    (set(), {"n1"}, {"n1": False, "n2": False}, {"n1": True}),  # at risk: mark it
    ({"n2"}, set(), {"n1": False, "n2": False}, {"n2": True}),  # probation as before
    (set(), set(), {"n1": True, "n2": False}, {"n1": False}),  # neither any more: mark off
    ({"n1"}, {"n1"}, {"n1": True}, {}),  # already right: nothing to do
    (set(), {"n3"}, {"n1": False}, {}),  # Slurm does not report n3: left alone
])
def test_probation_mark_follows_probation_or_risk(probation, at_risk, marked, expected):
    from slurmguard.fleet.uses import mark_changes

    assert mark_changes(["n1", "n2", "n3"], probation=probation, at_risk=at_risk,
                        marked=marked) == expected
