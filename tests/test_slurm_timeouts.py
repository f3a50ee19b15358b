"""doctor's judgement of Slurm's hook time limits, over real `scontrol show config` output of
22.05, 24.11 and 26.05 (tests/data/slurm/) and a table of the shapes around it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard.adapters.slurm.conf import parse_show_config
from slurmguard.errors import ParseError
from slurmguard.install.slurm_timeouts import hook_limits

DATA = Path(__file__).parent / "data" / "slurm"


def _judge(name: str, budget: float = 20.0) -> dict[str, tuple[bool | None, str]]:
    conf = parse_show_config((DATA / name).read_text())
    return {f.name: (f.ok, f.detail) for f in hook_limits(conf, budget)}


@pytest.mark.parametrize("name,want", [
    # 22.05 / 24.11: one combined limit
    ("show-config-docker-22.05.8.txt", {"PrologEpilogTimeout": True}),
    ("show-config-docker-24.11.5.txt", {"PrologEpilogTimeout": True}),
    # 26.05 with the test image's slurm.conf: the combined limit, HealthCheckTimeout unset (0)
    ("show-config-docker-26.05.5.txt", {"PrologEpilogTimeout": True, "HealthCheckTimeout": True}),
    # 26.05 with PrologTimeout=40, EpilogTimeout=50, HealthCheckTimeout=20, interval 60
    ("show-config-newer-26.05.5.txt", {"PrologTimeout": True, "EpilogTimeout": True,
                                       "HealthCheckTimeout": False}),
])
def test_real_configs(name: str, want: dict[str, bool]) -> None:
    got = _judge(name)
    assert {k: ok for k, (ok, _) in got.items()} == want
    if "HealthCheckTimeout" in want and not want["HealthCheckTimeout"]:
        # 20 s is not longer than the 20 s budget: Slurm would kill a slow healthcheck first
        assert got["HealthCheckTimeout"][1].startswith("HealthCheckTimeout=20 s, hooks.budget=20 s")


def test_real_newer_config_passes_with_a_shorter_budget() -> None:
    assert {k: ok for k, (ok, _) in _judge("show-config-newer-26.05.5.txt", 15).items()} == {
        "PrologTimeout": True, "EpilogTimeout": True, "HealthCheckTimeout": True}
    got = _judge("show-config-newer-26.05.5.txt", 45)
    assert got["PrologTimeout"] == (False, "PrologTimeout=40 s, hooks.budget=45 s")
    assert got["EpilogTimeout"][0] is True


# conf -> {key: ok}; budget 20 s
TABLE = [
    ({}, {"PrologEpilogTimeout": True}),  # unset: no limit
    ({"prologepilogtimeout": "10"}, {"PrologEpilogTimeout": False}),
    ({"prologepilogtimeout": "65534"}, {"PrologEpilogTimeout": True}),
    ({"prologtimeout": "30", "epilogtimeout": "15"}, {"PrologTimeout": True, "EpilogTimeout": False}),
    ({"prologtimeout": "30"}, {"PrologTimeout": True}),
    ({"healthchecktimeout": "0 sec", "healthcheckinterval": "60 sec"},
     {"PrologEpilogTimeout": True, "HealthCheckTimeout": True}),
    ({"healthchecktimeout": "30 sec", "healthcheckinterval": "60 sec"},
     {"PrologEpilogTimeout": True, "HealthCheckTimeout": True}),
    ({"healthchecktimeout": "60 sec", "healthcheckinterval": "60 sec"},  # not below the interval
     {"PrologEpilogTimeout": True, "HealthCheckTimeout": False}),
    ({"healthchecktimeout": "15 sec", "healthcheckinterval": "60 sec"},  # under the budget
     {"PrologEpilogTimeout": True, "HealthCheckTimeout": False}),
    ({"healthchecktimeout": "30 sec", "healthcheckinterval": "0 sec"},  # no periodic run
     {"PrologEpilogTimeout": True, "HealthCheckTimeout": True}),
]


@pytest.mark.parametrize("conf,want", TABLE)
def test_table(conf: dict[str, str], want: dict[str, bool]) -> None:
    assert {f.name: f.ok for f in hook_limits(conf, 20.0)} == want


def test_garbage_names_the_setting() -> None:
    with pytest.raises(ParseError, match=r"^EpilogTimeout: expected seconds, got 'soon'$"):
        hook_limits({"epilogtimeout": "soon"}, 20.0)


@given(limit=st.integers(1, 3600), interval=st.integers(0, 3600),
       budget=st.floats(0.5, 600, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_health_check_rule(limit: int, interval: int, budget: float) -> None:
    (_, hc) = hook_limits({"healthchecktimeout": f"{limit} sec",
                           "healthcheckinterval": f"{interval} sec"}, budget)
    assert hc.ok is (limit > budget and (interval == 0 or limit < interval))
    assert hc.ok or hc.fix
