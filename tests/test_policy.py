"""Fleet policy: table tests of every rule, and Hypothesis properties of the guard."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard.errors import InputError
from slurmguard.policy.blast import ANY_CAUSE, DrainRequest, caps, guard, ledger, scopes, view_entry
from slurmguard.policy.engine import SlurmState, plan
from slurmguard.policy.lemon import failures, lemon_verdict, transitions
from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.types import NodeView, Sample, worst_health

NOW = 1_800_000_000.0
P = PolicyParams()
U, H, E, D = "unhealthy", "healthy", "error", "degraded"


def view(*runs: tuple[float, str], name: str = "n1", foreign: tuple[float, ...] = (),
         check: str = "gpu-xid", **kw) -> NodeView:
    samples = tuple(Sample(NOW - ago, h, (check,) if h == U else ()) for ago, h in runs)
    return NodeView(name, samples, foreign, **kw)


@pytest.mark.parametrize("runs, foreign, expected", [
    # 3 failure episodes in the hour -> lemon, reason names the count, the window and the check
    ([(3000, U), (2900, H), (2000, U), (1900, H), (100, U)], (),
     "slurmguard: lemon: 3 failures in 1h (gpu-xid)"),
    # one incident seen by many runs (prolog, epilog, health checks) is one failure
    ([(3000, U), (2000, U), (100, U)], (), None),
    ([(3000, U), (2000, H), (1000, U), (10, U)], (), None),
    # two failures are not enough
    ([(3000, U), (2900, H), (100, U)], (), None),
    # an old failure is outside the window
    ([(4000, U), (3900, H), (2000, U), (1900, H), (100, U)], (), None),
    # checker errors never count, nor do they end an episode
    ([(3000, U), (2900, E), (2000, U), (100, E), (50, U)], (), None),
    # drains by an admin/Kubernetes/Slurm count as failures
    ([(100, U)], (NOW - 50, NOW - 30), "slurmguard: lemon: 3 failures in 1h (gpu-xid)"),
    ([(100, U), (90, U), (80, U)], (NOW - 30,), None),
    ([(100, U)], (NOW - 5000, NOW - 30), None),
    # flapping: pass/fail/pass/fail/pass = 4 changes -> counts as failing
    ([(3000, H), (2500, U), (2000, H), (1500, U), (1000, H)], (),
     "slurmguard: flapping: 4 pass/fail changes in 1h (gpu-xid)"),
    # errors between runs do not create or hide changes
    ([(3000, H), (2900, E), (2500, U), (2000, H), (1900, E), (1000, H)], (), None),
    # degraded is a pass
    ([(3000, D), (2500, D), (100, D)], (), None),
])
def test_lemon_table(runs, foreign, expected) -> None:
    v = view(*runs, foreign=foreign)
    got = lemon_verdict(v, NOW, P)
    assert (got.reason if got else None) == expected


@pytest.mark.parametrize("bad, passes, fleet, expected", [
    (6, 5, 0.05, "slurmguard: lemon: failure rate 55% vs fleet 5% in 1h (gpu-xid)"),
    (6, 5, 0.20, None),  # 55 % is under 5x the fleet's 20 %
    (4, 6, 0.01, None),  # below the 50 % floor
    (5, 4, 0.01, None),  # too few runs to judge a rate
])
def test_failure_rate_rule(bad, passes, fleet, expected) -> None:
    # Set K high so that neither the count rule nor flapping fires. Each failure is its own
    # episode (a pass after it): the rate is episodes / (episodes + passes).
    p = PolicyParams(lemon_failures=100, flap_transitions=100)
    seq = [U, H] * min(bad, passes) + [U] * max(0, bad - passes) + [H] * max(0, passes - bad)
    got = lemon_verdict(view(*[(3000 - i * 10, h) for i, h in enumerate(seq)]), NOW, p, fleet)
    assert (got.reason if got else None) == expected


@pytest.mark.parametrize("scopes, pct, max_nodes, expected", [
    ({"fleet": 100, "partition:gpu": 20}, 10.0, 50, {"fleet": 50, "partition:gpu": 2}),
    ({"fleet": 5, "partition:tiny": 5}, 10.0, 50, {"fleet": 50, "partition:tiny": 1}),
    ({"fleet": 1000, "partition:big": 1000}, 10.0, 50, {"fleet": 50, "partition:big": 50}),
    ({"fleet": 40, "group:rack1": 40}, 25.0, 50, {"fleet": 50, "group:rack1": 10}),
])
def test_caps(scopes, pct, max_nodes, expected) -> None:
    sc = {k: frozenset(f"x{i}" for i in range(n)) for k, n in scopes.items()}
    assert caps(sc, PolicyParams(blast_max_percent=pct, blast_max_nodes=max_nodes)) == expected


def _nodes(n: int, prefix: str = "n") -> frozenset[str]:
    return frozenset(f"{prefix}{i}" for i in range(1, n + 1))


def test_an_alert_counts_only_the_nodes_of_its_scope() -> None:
    # fs-mount seen failing on n1 (partition gpu only) and n5, n6 (also in the small
    # partition, cap 1): the refusal's alert names the small partition's two nodes, not n1.
    scopes = {"fleet": _nodes(6), "partition:gpu": _nodes(6), "partition:small": frozenset({"n5", "n6"})}
    req = DrainRequest("n6", "fs-mount", "slurmguard: fs-mount: /shared missing")
    allowed, actions = guard([req], {"n1": {"fs-mount"}, "n5": {"fs-mount"}}, scopes,
                             PolicyParams(blast_max_percent=50),
                             failing={"fs-mount": ["n1", "n5", "n6"]})
    (alert,) = [a for a in actions if a.kind == "alert"]
    assert not allowed and alert.scope == "partition:small"
    assert alert.nodes == ("n5", "n6") and "failing on 2 nodes of partition:small" in alert.reason


def test_twenty_nodes_failing_fs_mount_drain_two_and_raise_one_alert() -> None:
    part = _nodes(20)
    scopes = {"fleet": part, "partition:gpu": part}
    reqs = [DrainRequest(n, "fs-mount", "slurmguard: fs-mount: /shared missing") for n in part]
    allowed, actions = guard(reqs, [], scopes, P)
    assert len(allowed) == 2
    alerts = [a for a in actions if a.kind == "alert"]
    assert len(alerts) == 1 and alerts[0].source == "fs-mount" and alerts[0].scope == "partition:gpu"
    assert "fs-mount failing on 20 nodes of partition:gpu (cap 2 drains per 1h)" in alerts[0].reason
    assert len([a for a in actions if a.kind == "refuse"]) == 18


def test_recent_drains_count_and_a_node_already_counted_is_free() -> None:
    part = _nodes(20)
    scopes = {"fleet": part, "partition:gpu": part}
    allowed, _ = guard([DrainRequest("n3", "gpu-xid", "r")], ["n1", "n2"], scopes, P)
    assert allowed == []
    allowed, _ = guard([DrainRequest("n1", "lemon", "r")], ["n1", "n2"], scopes, P)
    assert [a.node for a in allowed] == ["n1"]


def test_group_cap_is_narrower_than_the_partition() -> None:
    part = _nodes(100)
    rack = frozenset(f"n{i}" for i in range(1, 11))
    scopes = {"fleet": part, "partition:gpu": part, "group:rack1": rack}
    reqs = [DrainRequest(f"n{i}", "ib-link", "r") for i in range(1, 6)]
    allowed, actions = guard(reqs, [], scopes, P)
    assert [a.node for a in allowed] == ["n1"]  # 10 % of a 10-node rack
    (alert,) = [a for a in actions if a.kind == "alert"]
    assert alert.scope == "group:rack1"


def test_fleet_cap_in_absolute_nodes() -> None:
    part = _nodes(1000)
    scopes = {"fleet": part, "partition:gpu": part}
    reqs = [DrainRequest(n, "gpu-xid", "r") for n in sorted(part)][:80]
    allowed, _ = guard(reqs, [], scopes, PolicyParams(blast_max_nodes=30))
    assert len(allowed) == 30


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 60), pct=st.floats(0, 100), max_nodes=st.integers(1, 40),
       recent=st.dictionaries(st.integers(1, 60), st.sampled_from(["fs-mount", "gpu-xid:79", "*"]),
                              max_size=30),
       wanted=st.sets(st.integers(1, 60)),
       causes=st.lists(st.sampled_from(["fs-mount", "gpu-xid:79", "lemon"]), min_size=1))
def test_guard_never_exceeds_any_cap_per_cause(size, pct, max_nodes, recent, wanted, causes) -> None:
    part = _nodes(size)
    scopes = {"fleet": part, "partition:p": part}
    p = PolicyParams(blast_max_percent=pct, blast_max_nodes=max_nodes)
    ledger = {f"n{i}": {c} for i, c in recent.items() if i <= size}
    reqs = [DrainRequest(f"n{i}", causes[i % len(causes)], "r") for i in wanted if i <= size]
    allowed, actions = guard(reqs, ledger, scopes, p)
    cap = caps(scopes, p)
    for cause in set(causes):
        before = {n for n, cs in ledger.items() if cause in cs or "*" in cs}
        new = {a.node for a in allowed if a.cause == cause} - before
        for scope, members in scopes.items():
            assert not new or len((before | new) & members) <= cap[scope], (cause, scope)
        # the floor: a cause with nothing drained in the window always drains its first node
        if not before and any(r.cause == cause for r in reqs):
            assert new
    refused = {a.node for a in actions if a.kind == "refuse"}
    assert refused | {a.node for a in allowed} == {r.node for r in reqs}
    assert not refused & {a.node for a in allowed}
    # one alert per (cause, scope), and only when something was refused; "shared" only when
    # at least two nodes have that cause
    alerts = [a for a in actions if a.kind == "alert"]
    keys = [(a.source, a.scope) for a in alerts]
    assert len(keys) == len(set(keys)) and bool(keys) == bool(refused)
    assert all(len(a.nodes) >= 2 for a in alerts if "shared cause" in a.reason)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7200), st.sampled_from([U, H, E, D, "unsupported"])),
                max_size=30))
def test_checker_errors_never_change_the_verdict(runs) -> None:
    with_errors = view(*runs)
    without = view(*[(a, h) for a, h in runs if h != E])
    a, b = lemon_verdict(with_errors, NOW, P), lemon_verdict(without, NOW, P)
    assert (a.reason if a else None) == (b.reason if b else None)
    assert failures(with_errors, NOW, P.window) == failures(without, NOW, P.window)
    assert transitions(with_errors, NOW, P.window) == transitions(without, NOW, P.window)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3599), st.sampled_from([U, H])), max_size=20))
def test_more_failures_never_unmake_a_lemon(runs) -> None:
    base = lemon_verdict(view(*runs), NOW, P)
    # three more episodes (each ended by a pass), newer than every run of `runs`
    more = lemon_verdict(view(*runs, (0.6, U), (0.5, H), (0.4, U), (0.3, H), (0.2, U)), NOW, P)
    assert more is not None
    if base is not None and base.source == "lemon":
        assert more.source == "lemon"


def test_plan_marks_lemon_and_drains_when_slurm_shows_it_running() -> None:
    v = view((3000, U), (2900, H), (2000, U), (1900, H), (100, U))
    acts = plan({"n1": v}, NOW, P, slurm={"n1": SlurmState(drained=False, ours=False)})
    assert [(a.kind, a.node, a.reason) for a in acts] == [
        ("lemon", "n1", "slurmguard: lemon: 3 failures in 1h (gpu-xid)"),
        ("drain", "n1", "slurmguard: lemon: 3 failures in 1h (gpu-xid)")]


def test_plan_keeps_a_lemon_drained_after_a_passing_run_and_an_undrain() -> None:
    v = view((10, H), lemon=True, lemon_reason="slurmguard: lemon: 3 failures in 1h (gpu-xid)")
    acts = plan({"n1": v}, NOW, P, slurm={"n1": SlurmState(drained=False, ours=False)})
    assert [(a.kind, a.reason) for a in acts] == [
        ("drain", "slurmguard: lemon: 3 failures in 1h (gpu-xid)")]
    # already drained (by us or anyone), DOWN, or unknown to Slurm: nothing to do
    for st_ in (SlurmState(True, True), SlurmState(True, False), SlurmState(False, False, down=True)):
        assert plan({"n1": v}, NOW, P, slurm={"n1": st_}) == []
    assert plan({"n1": v}, NOW, P, slurm={}) == []


@pytest.mark.parametrize("passes, expected", [(2, []), (3, ["probation_end"]), (5, ["probation_end"])])
def test_probation_ends_after_m_passing_jobs(passes, expected) -> None:
    v = view((10, H), probation=True, probation_passes=passes)
    assert [a.kind for a in plan({"n1": v}, NOW, P)] == expected


def test_worst_health_and_windows() -> None:
    assert worst_health([H, U, E]) == U
    assert worst_health([E, E]) == E
    assert worst_health(["unsupported"]) == H
    assert worst_health([H, D]) == D
    assert [human_window(s) for s in (3600, 5400, 86400, 45, 90)] == ["1h", "90m", "1d", "45s", "90s"]


def test_history_before_an_admin_return_is_forgiven() -> None:
    v = view((3000, U), (2000, U), (100, U), reset_at=NOW - 50)
    assert lemon_verdict(v, NOW, P) is None
    v = view((3000, U), (2000, U), (100, U), (40, U), (35, H), (30, U), (25, H), (20, U),
             reset_at=NOW - 50)
    assert lemon_verdict(v, NOW, P).reason == "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


def test_scopes_are_fleet_partitions_and_groups() -> None:
    """One definition of the guard's scopes (serve, the reconciler and burn-in use it)."""
    got = scopes({"n1": ("gpu",), "n2": ("gpu", "debug"), "n3": ()}, {"rack1": "n[1-3]"},
                 fleet=["k8s-only"])
    assert got == {"fleet": frozenset({"n1", "n2", "n3", "k8s-only"}),
                   "partition:gpu": frozenset({"n1", "n2"}), "partition:debug": frozenset({"n2"}),
                   "group:rack1": frozenset({"n1", "n2", "n3"})}
    assert scopes({"n1": ()}, [("r", "n[1-2]")])["group:r"] == frozenset({"n1", "n2"})
    with pytest.raises(InputError, match=r"^policy\.groups\.bad: not a node set"):
        scopes({}, {"bad": "n[1-"})
    # Slurm's nodes as the adapter gives them (name, partitions) build the same scopes.
    nodes = [SimpleNamespace(name="n1", partitions=("gpu",)),
             SimpleNamespace(name="n2", partitions=("gpu", "debug")),
             SimpleNamespace(name="n3", partitions=())]
    assert scopes(nodes, {"rack1": "n[1-3]"}, fleet=["k8s-only"]) == got


def test_ledger_counts_drains_per_cause_in_the_window() -> None:
    """One definition of the guard's ledger: permits and drains take a cause's slot, a failed
    drain gives it back, entries before the window are gone."""
    entries = [(NOW - 10, "n1", "permit", "fs-mount"), (NOW - 9, "n1", "drain", "fs-mount"),
               (NOW - 8, "n2", "permit", "gpu-xid:79"), (NOW - 7, "n2", "drain_failed", "gpu-xid:79"),
               (NOW - 5000, "n3", "drain", "fs-mount"), (NOW - 6, "n4", "drain", ANY_CAUSE),
               (NOW - 5, "n1", "drain", "gpu-xid:79")]
    assert ledger(entries, NOW - 3600) == {"n1": {"fs-mount", "gpu-xid:79"}, "n4": {ANY_CAUSE}}
    assert view_entry("n5", "slurmguard: gpu-xid: GPU 0 Xid 79: fallen off", NOW) == (
        NOW, "n5", "drain", "gpu-xid:79")


@given(st.lists(st.tuples(st.integers(0, 100), st.sampled_from(["n1", "n2", "n3"]),
                          st.sampled_from(["permit", "drain", "drain_failed"]),
                          st.sampled_from(["fs-mount", "gpu-xid:79"])), max_size=30),
       st.randoms())
def test_ledger_reads_entries_in_time_order_whatever_order_they_come_in(entries, rnd) -> None:
    timed = [(float(i * 1000 + t), n, k, c) for i, (t, n, k, c) in enumerate(entries)]
    shuffled = list(timed)
    rnd.shuffle(shuffled)
    assert ledger(shuffled, 0.0) == ledger(timed, 0.0)
    # A cause is held exactly when its last permit/drain on the node came after its last failure.
    for node in ("n1", "n2", "n3"):
        for cause in ("fs-mount", "gpu-xid:79"):
            last = [k for _, n, k, c in timed if n == node and c == cause]
            held = bool(last) and last[-1] != "drain_failed"
            assert (cause in ledger(timed, 0.0).get(node, set())) == held
