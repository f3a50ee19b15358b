"""decide(): a table of inputs -> action, plus properties with Hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.contract import CheckResult, Health
from slurmguard.contract import reason_source as reason_check
from slurmguard.node.decide import Action, decide, drain_reason

H, U, D, E, X = Health.HEALTHY, Health.UNHEALTHY, Health.DEGRADED, Health.ERROR, Health.UNSUPPORTED
NODE_CHECKS = frozenset({"gpu-xid", "gpu-ecc", "fs-mount"})


def R(name: str, health: Health, reason: str = "") -> CheckResult:
    return CheckResult(name, health, reason)


TABLE = [
    # (results, hook, kwargs, expected action, reason fragment)
    ([R("gpu-xid", H), R("fs-mount", H)], "prolog", {}, Action.PASS, ""),
    ([R("gpu-xid", U, "GPU 2 Xid 79")], "prolog", {}, Action.DRAIN, "slurmguard: gpu-xid: GPU 2 Xid 79"),
    ([R("gpu-ecc", U, "a"), R("gpu-xid", U, "b")], "epilog", {}, Action.DRAIN, "(+1 more)"),
    ([R("gpu-ecc", X, "NVML library not found")], "prolog", {}, Action.PASS, ""),
    ([R("gpu-ecc", E, "nvml: timed out")], "prolog", {}, Action.CHECKER_ERROR, "gpu-ecc"),
    ([R("gpu-ecc", E), R("fs-mount", U, "hung")], "prolog", {}, Action.DRAIN, "fs-mount"),
    ([R("gpu-ecc", D, "pcie x8")], "prolog", {}, Action.PASS, ""),
    ([R("gpu-ecc", D, "pcie x8")], "prolog", {"drain_on_degraded": True}, Action.DRAIN, "pcie x8"),
    ([R("gpu-ecc", E, "boom")], "prolog", {"drain_on_error": True}, Action.DRAIN, "boom"),
    ([R("gpu-xid", U, "x")], "prolog", {"node_down": True}, Action.LEAVE, "DOWN"),
    ([R("gpu-xid", H)], "healthcheck", {"current_reason": "slurmguard: gpu-xid: GPU 2 Xid 79"},
     Action.UNDRAIN, "gpu-xid"),
    # our reason, but a policy drain (lemon): healthcheck leaves it
    ([R("gpu-xid", H)], "healthcheck", {"current_reason": "slurmguard: lemon: 3 failures"},
     Action.PASS, ""),
    # an admin's reason: never ours
    ([R("gpu-xid", H)], "healthcheck", {"current_reason": "maintenance: gpu-xid: swap"}, Action.PASS, ""),
    # the check that drained did not run this round: no undrain
    ([R("fs-mount", H)], "healthcheck", {"current_reason": "slurmguard: gpu-xid: x"}, Action.PASS, ""),
    # it ran but is unsupported now (library gone): no undrain
    ([R("gpu-xid", X)], "healthcheck", {"current_reason": "slurmguard: gpu-xid: x"}, Action.PASS, ""),
    # an error anywhere blocks the undrain
    ([R("gpu-xid", H), R("fs-mount", E)], "healthcheck", {"current_reason": "slurmguard: gpu-xid: x"},
     Action.CHECKER_ERROR, ""),
    # the prolog never undrains
    ([R("gpu-xid", H)], "prolog", {"current_reason": "slurmguard: gpu-xid: x"}, Action.PASS, ""),
    # down node with our drain: left alone
    ([R("gpu-xid", H)], "healthcheck", {"current_reason": "slurmguard: gpu-xid: x", "node_down": True},
     Action.LEAVE, ""),
]


@pytest.mark.parametrize("results,hook,kwargs,action,fragment", TABLE)
def test_decide_table(results, hook, kwargs, action, fragment):
    d = decide(results, hook=hook, node_checks=NODE_CHECKS, **kwargs)
    assert d.action is action
    assert fragment in d.reason
    if action is Action.DRAIN:
        assert d.reason.startswith("slurmguard: ")


def test_reason_check_parses_only_ours():
    assert reason_check("slurmguard: gpu-xid: GPU 2") == "gpu-xid"
    assert reason_check("slurmguard:fs-mount: x") == "fs-mount"
    assert reason_check("Prolog error") is None
    assert reason_check("slurmguard: no colon after") is None
    assert reason_check(None) is None


healths = st.sampled_from(list(Health))
names = st.sampled_from(["gpu-xid", "gpu-ecc", "fs-mount", "host-cpus"])
results_st = st.lists(st.builds(R, names, healths, st.text(max_size=300)), max_size=8)


@given(results_st, st.sampled_from(["prolog", "epilog", "healthcheck"]),
       st.one_of(st.none(), st.text(max_size=80)))
def test_error_and_unsupported_never_drain(results, hook, current):
    d = decide(results, hook=hook, current_reason=current, node_checks=NODE_CHECKS)
    assert d.action is not Action.DRAIN or any(r.health is Health.UNHEALTHY for r in results)
    if d.action is Action.DRAIN:
        assert d.reason.startswith("slurmguard: ") and "\n" not in d.reason
        assert len(d.reason) <= 160
    if d.action is Action.UNDRAIN:
        assert current is not None and current.startswith("slurmguard:")
        assert not any(r.health in (Health.ERROR, Health.UNHEALTHY) for r in results)


@given(st.text(max_size=500))
def test_drain_reason_is_one_bounded_line(text):
    r = drain_reason("gpu-xid", text)
    assert r.startswith("slurmguard: gpu-xid:") and len(r) <= 160
    assert all(ch.isprintable() for ch in r)
