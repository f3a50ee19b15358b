"""The node risk score: each factor, its weight and cap, the sum (pure; docs/fleet.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.errors import ConfigError
from slurmguard.fleet.history import Run
from slurmguard.fleet.params import FACTORS, RiskParams
from slurmguard.fleet.risk import DAY, NodeSignals, RiskInputs, rising, score

P = RiskParams()


@pytest.mark.parametrize("inputs, expected, top", [
    (RiskInputs(), 0.0, None),
    (RiskInputs(failures=1), 15.0, "failures"),
    (RiskInputs(failures=2), 30.0, "failures"),  # two by chance: not at risk alone
    (RiskInputs(failures=3), 45.0, "failures"),
    (RiskInputs(failures=5), 50.0, "failures"),  # capped
    (RiskInputs(warning_days={"gpu_memory": 3}), 15.0, "gpu_memory"),
    (RiskInputs(warning_days={"gpu_memory": 9}), 25.0, "gpu_memory"),
    (RiskInputs(warning_days={"thermal": 2}), 6.0, "thermal"),
    (RiskInputs(warning_days={"links": 4}, recent_warning_days=4), 45.0, "rising"),  # + rising
    (RiskInputs(warning_days={"links": 3}, recent_warning_days=3), 40.0, "rising"),
    (RiskInputs(recent_warning_days=3, earlier_warning_days=20), 0.0, None),  # always warns: flat
    (RiskInputs(burnin_flagged=1), 10.0, "burnin"),
    (RiskInputs(burnin_failed=1), 25.0, "burnin"),
    (RiskInputs(failed_jobs=2), 10.0, "failed_jobs"),
    (RiskInputs(failures=2, warning_days={"gpu_memory": 5, "links": 5, "xid": 4},
                recent_warning_days=7, failed_jobs=4), 100.0, "failures"),  # the sum is capped
])
def test_score_table(inputs, expected, top):
    r = score(inputs, P)
    assert r.score == expected
    assert (r.factors[0].name if r.factors else None) == top
    assert r.score == min(100.0, sum(f.points for f in r.factors))
    for f in r.factors:  # each factor says how it got its points
        assert f.points == min(FACTORS[f.name][1], f.count * f.weight)
        assert f.line().startswith(f"{f.name} {f.count:g} x {f.weight:g} = +")


def test_rising_needs_three_recent_days_and_twice_the_earlier_rate():
    assert rising(RiskInputs(recent_warning_days=3), P)
    assert not rising(RiskInputs(recent_warning_days=2), P)
    # 3 days in 10 is 0.3/day; 3 in the 20 before is 0.15/day: not more than twice.
    assert not rising(RiskInputs(recent_warning_days=3, earlier_warning_days=3), P)
    assert rising(RiskInputs(recent_warning_days=3, earlier_warning_days=2), P)


def test_weights_come_from_config_and_bad_ones_name_the_key(tmp_path):
    from slurmguard import config

    cfg = tmp_path / "sg.toml"
    cfg.write_text("[risk]\nlevel = 30\n[risk.weights]\nfailures = 10\n")
    rp = RiskParams.from_section(config.load(str(cfg)).section("risk"))
    assert rp.level == 30 and rp.weight("failures") == 10 and rp.weight("links") == 5
    assert score(RiskInputs(failures=2), rp).score == 20.0
    cfg.write_text("[risk.weights]\nfailures = \"many\"\n")
    with pytest.raises(ConfigError, match=r"risk\.weights\.failures: expected a number"):
        config.load(str(cfg))
    cfg.write_text("[risk.weights]\nluck = 3\n")
    with pytest.raises(ConfigError, match=r"risk\.weights\.luck"):
        config.load(str(cfg))


def test_signals_count_days_in_the_lookback_only():
    now = 100 * DAY
    runs = [Run(now - 40 * DAY, "degraded", warnings=("gpu-ecc",)),  # before the lookback
            Run(now - 12 * DAY, "degraded", warnings=("gpu-ecc",)),
            Run(now - 12 * DAY + 60, "degraded", warnings=("gpu-remap",)),  # same day: one day
            Run(now - 2 * DAY, "degraded", warnings=("ib-counters",)),
            Run(now - 1 * DAY, "degraded", warnings=("host-edac",)),  # no area: not counted
            Run(now - 1 * DAY, "unhealthy", "epilog", "77", checks=("gpu-xid",)),
            Run(now + DAY, "degraded", warnings=("gpu-ecc",))]  # after now: not yet known
    sig = NodeSignals.build(runs, [now - 45 * DAY, now - 3 * DAY], [(now - 5 * DAY, "failed")])
    inp = sig.inputs(now, P)
    assert inp.failures == 1
    assert dict(inp.warning_days) == {"gpu_memory": 1, "links": 1}
    assert (inp.recent_warning_days, inp.earlier_warning_days) == (1, 1)
    assert (inp.burnin_failed, inp.burnin_flagged, inp.failed_jobs) == (1, 0, 1)
    assert score(inp, P).score == 15 + 5 + 5 + 25 + 5


@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 30), st.integers(0, 10))
def test_score_is_bounded_and_never_falls_with_more_failures(f, w, recent, jobs):
    a = score(RiskInputs(failures=f, warning_days={"links": w}, recent_warning_days=recent,
                         failed_jobs=jobs), P)
    b = score(RiskInputs(failures=f + 1, warning_days={"links": w}, recent_warning_days=recent,
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
