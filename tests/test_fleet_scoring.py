"""The one scorer of predictions: true, false, late and open flags, recall, lead (pure;
slurmguard/fleet/scoring.py, docs/fleet.md "Policy replay")."""

from __future__ import annotations

from slurmguard.fleet.scoring import DAY, alarms, pieces, score

H = 7 * DAY
FAIL = {"n1": [(20 * DAY, 21 * DAY)]}  # n1 fails on day 20, back on day 21


def _s(flags, failures=FAIL, **kw):
    return score(flags, failures, 0.0, 60 * DAY, H, **kw)


def test_a_flag_before_the_failure_within_the_horizon_is_true_with_its_lead() -> None:
    r = _s({"n1": [(15 * DAY, 16 * DAY)]})
    assert (r["true"], r["false"], r["precision"]) == (1, 0, 1.0)
    assert (r["failures"], r["caught"], r["recall"], r["lead_days_median"]) == (1, 1, 1.0, 5.0)
    assert r["ahead"] == 1


def test_a_flag_too_early_is_false_and_catches_nothing() -> None:
    r = _s({"n1": [(5 * DAY, 6 * DAY)]})  # 14 days before: beyond the horizon
    assert (r["true"], r["false"], r["caught"], r["precision"]) == (0, 1, 0, 0.0)


def test_a_flag_after_the_failure_counts_for_nothing() -> None:
    r = _s({"n1": [(20.5 * DAY, 20.5 * DAY)]})  # raised while the node was out
    assert (r["true"], r["false"], r["late"], r["precision"], r["caught"]) == (0, 0, 1, None, 0)
    r = _s({"n1": [(20.5 * DAY, 20.5 * DAY)]}, while_out="next")  # lemon: names the next one
    assert (r["late"], r["false"]) == (0, 1)


def test_a_flag_whose_horizon_runs_past_the_history_is_open() -> None:
    r = _s({"n2": [(58 * DAY, 58 * DAY)]})
    assert (r["open"], r["false"], r["precision"]) == (1, 0, None)


def test_a_standing_alarm_renews_its_prediction_every_horizon() -> None:
    assert pieces([(0.0, 20 * DAY)], H) == [(0.0, H - 1), (H, 2 * H - 1), (2 * H, 20 * DAY)]
    r = _s({"n2": [(0.0, 30 * DAY)]})  # a month raised, never failed: 5 false flags
    assert (r["false"], r["open"]) == (5, 0)
    r = _s({"n2": [(30 * DAY, 60 * DAY)]})  # the last piece's horizon runs past the end
    assert (r["false"], r["open"]) == (3, 2)


def test_a_flag_one_hour_ahead_is_caught_but_not_a_day_ahead() -> None:
    r = _s({"n1": [(20 * DAY - 3600, 20 * DAY - 3600)]})
    assert (r["caught"], r["ahead"], r["recall_ahead"]) == (1, 0, 0.0)


def test_recall_among_some_failures_only() -> None:
    fails = {"n1": FAIL["n1"], "n2": [(30 * DAY, 31 * DAY)]}
    r = _s({"n1": [(19 * DAY, 19 * DAY)]}, fails, among={("n1", 20 * DAY)})
    assert (r["failures"], r["caught"], r["recall"]) == (1, 1, 1.0)


def test_alarms_are_runs_of_consecutive_flagged_days() -> None:
    days = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert alarms(days, [True, True, False, True, False]) == [(1.0, 2.0), (4.0, 4.0)]
