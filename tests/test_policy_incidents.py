"""Incidents, not sightings; caps per cause; "shared" only when shared (docs/policy.md).

Table tests of failure episodes and of the per-cause blast-radius guard, with Hypothesis
properties, and the worked examples of docs/policy.md (4 nodes, 1,000 nodes)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmguard.policy.blast import DrainRequest, caps, cause_key, guard
from slurmguard.policy.lemon import episodes, failures, lemon_verdict, transitions
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.types import NodeView, Sample

NOW = 1_800_000_000.0
P = PolicyParams()
U, H, E, D = "unhealthy", "healthy", "error", "degraded"


def runs(*items: tuple[float, str, tuple[str, ...]], hook: str = "healthcheck") -> tuple[Sample, ...]:
    return tuple(Sample(NOW - ago, h, checks, hook) for ago, h, checks in items)


GPU = ("gpu-count",)
XID = ("gpu-xid",)


@pytest.mark.parametrize("samples, expected", [
    # the lost GPU of the issue: prolog drains, the epilog of the same job and the health
    # checks see the same fault, then the GPU is back: one incident
    (runs((600, U, GPU), (596, U, GPU), (590, U, GPU), (300, U, GPU), (10, H, ())), [("gpu-count", 600)]),
    # fail, pass, fail: two incidents (what flapping is made of)
    (runs((600, U, GPU), (500, H, ()), (400, U, GPU)), [("gpu-count", 600), ("gpu-count", 400)]),
    # two causes at once: two incidents; a later run failing one of them starts nothing new
    (runs((600, U, GPU + XID), (500, U, XID)), [("gpu-count", 600), ("gpu-xid", 600)]),
    # a run failing another check does not end an episode (it may not have run that check)
    (runs((600, U, GPU), (500, U, XID), (400, U, GPU)), [("gpu-count", 600), ("gpu-xid", 500)]),
    # degraded is a pass: it ends the episode
    (runs((600, U, GPU), (500, D, ()), (400, U, GPU)), [("gpu-count", 600), ("gpu-count", 400)]),
    # an unhealthy run without a named check is its own cause
    (runs((600, U, ())), [("unhealthy", 600)]),
    ((), []),
])
def test_failure_episodes_table(samples, expected) -> None:
    assert [(c, NOW - at) for c, at in episodes(samples)] == expected


def test_one_lost_gpu_seen_by_every_hook_is_not_a_lemon() -> None:
    """The issue's scenario in the pure rule: prolog + epilog + 3 health checks within
    seconds, then the GPU is back: one failure, no lemon (it was "3 failures in 1h")."""
    seen = (runs((30, U, GPU), hook="prolog") + runs((29, U, GPU), hook="epilog")
            + runs((26, U, GPU), (20, U, GPU), (14, U, GPU), (8, H, ()), (2, H, ())))
    v = NodeView("n1", tuple(sorted(seen, key=lambda s: s.at)))
    assert failures(v, NOW, P.window) == 1
    assert lemon_verdict(v, NOW, P) is None


def test_three_separate_incidents_still_make_a_lemon_and_flapping_is_still_caught() -> None:
    v = NodeView("n1", runs((3000, U, GPU), (2900, U, GPU), (2800, H, ()), (2000, U, GPU),
                            (1900, H, ()), (100, U, GPU)))
    assert lemon_verdict(v, NOW, P).reason == "slurmguard: lemon: 3 failures in 1h (gpu-count)"
    flap = NodeView("n1", runs((3000, H, ()), (2500, U, XID), (2000, H, ()), (1500, U, XID),
                               (1000, H, ())))
    assert lemon_verdict(flap, NOW, PolicyParams(lemon_failures=5)).source == "flapping"


def test_a_long_incident_is_not_a_high_failure_rate() -> None:
    """A node drained for one fault and checked every minute for an hour: 60 sightings, one
    episode; the rate rule (episodes against passes) does not call it a lemon."""
    v = NodeView("n1", runs(*[(3500 - i * 60, U, GPU) for i in range(50)],
                            *[(400 - i * 60, H, ()) for i in range(5)]))
    assert lemon_verdict(v, NOW, P, fleet_rate=0.01) is None


samples_st = st.lists(st.tuples(st.integers(0, 3599), st.sampled_from([U, H, E, D]),
                                st.sets(st.sampled_from(["gpu-count", "gpu-xid", "fs-mount"]))),
                      max_size=25)


def _view(items) -> NodeView:
    ss = [Sample(NOW - ago, h, tuple(sorted(c)) if h == U else ()) for ago, h, c in items]
    return NodeView("n1", tuple(sorted(ss, key=lambda s: s.at)))


@settings(max_examples=200, deadline=None)
@given(samples_st, st.integers(0, 24), st.sampled_from(["prolog", "epilog", "healthcheck", "agent"]))
def test_another_sighting_of_an_open_incident_changes_nothing(items, at, hook) -> None:
    """Repeat any failing run right after itself (the epilog, the next health check, an agent
    run seeing the same fault): the failures, the transitions and the verdict stay."""
    base = _view(items)
    ss = list(base.samples)
    i = min(at, len(ss) - 1)
    assume(ss and ss[i].health == U)
    ss.insert(i + 1, Sample(ss[i].at, U, ss[i].checks, hook))  # right after it, same time
    more = NodeView("n1", tuple(ss))
    assert failures(more, NOW, P.window) == failures(base, NOW, P.window)
    assert transitions(more, NOW, P.window) == transitions(base, NOW, P.window)
    a, b = lemon_verdict(more, NOW, P), lemon_verdict(base, NOW, P)
    assert (a.reason if a else None) == (b.reason if b else None)


@settings(max_examples=200, deadline=None)
@given(samples_st)
def test_one_episode_per_cause_between_passes(items) -> None:
    v = _view(items)
    bad = [s for s in v.samples if s.health == U]
    eps = episodes([s for s in v.samples if s.health != E])
    assert len(eps) <= sum(max(1, len(s.checks)) for s in bad)
    # exactly one episode per cause seen failing between two passes
    segments: list[set[str]] = [set()]
    for s in v.samples:
        if s.health == E:
            continue
        if s.health != U:
            segments.append(set())
        else:
            segments[-1] |= set(s.checks or ("unhealthy",))
    assert len(eps) == sum(len(seg) for seg in segments)


@pytest.mark.parametrize("check, reason, expected", [
    ("fs-mount", "slurmguard: fs-mount: /shared is not mounted", "fs-mount"),
    ("gpu-xid", "slurmguard: gpu-xid: Xid 79 on GPU 3 (fallen off the bus)", "gpu-xid:79"),
    ("gpu-xid", "slurmguard: gpu-xid: xid 48 on GPU 0", "gpu-xid:48"),
    ("gpu-xid", "slurmguard: gpu-xid: latched", "gpu-xid"),
    ("", "", "unknown"),
    ("lemon", "slurmguard: lemon: 3 failures in 1h (gpu-xid, ib-link)", "gpu-xid"),
    ("flapping", "slurmguard: flapping: 4 pass/fail changes in 1h (fs-mount)", "fs-mount"),
    ("lemon", "slurmguard: lemon: flagged", "lemon"),
])
def test_cause_is_the_check_or_the_xid_class(check, reason, expected) -> None:
    assert cause_key(check, reason) == expected


def _part(n: int) -> frozenset[str]:
    return frozenset(f"n{i}" for i in range(1, n + 1))


FOUR = {"fleet": _part(4), "partition:gpu": _part(4)}


@pytest.mark.parametrize("recent, request_, pct, allowed", [
    # the small partition: one node drained for a lost GPU, an unrelated Xid 79 on
    # another node is allowed (per-cause caps; the old guard refused it as "shared")
    ({"n1": {"gpu-count"}}, ("n2", "gpu-xid:79"), 10.0, True),
    # the same cause again in a 4-node partition at 10 %: cap 1, refused (and only now shared)
    ({"n1": {"gpu-xid:79"}}, ("n2", "gpu-xid:79"), 10.0, False),
    # another Xid class is another cause
    ({"n1": {"gpu-xid:79"}}, ("n2", "gpu-xid:48"), 10.0, True),
    # a node already counted for its cause costs nothing
    ({"n1": {"fs-mount"}}, ("n1", "fs-mount"), 10.0, True),
    # drains of unknown cause (Slurm's view only) count against every cause
    (["n1"], ("n2", "fs-mount"), 10.0, False),
    # cap 2 of 4 (50 %): the third node of a cause is refused
    ({"n1": {"fs-mount"}, "n2": {"fs-mount"}}, ("n3", "fs-mount"), 50.0, False),
    ({"n1": {"fs-mount"}}, ("n3", "fs-mount"), 50.0, True),
    # the floor: 0 % still lets a cause drain its first node
    ({}, ("n3", "fs-mount"), 0.0, True),
])
def test_caps_are_per_cause_with_a_floor(recent, request_, pct, allowed) -> None:
    node, cause = request_
    p = PolicyParams(blast_max_percent=pct)
    got, actions = guard([DrainRequest(node, cause, f"slurmguard: {cause}: x")], recent, FOUR, p)
    assert bool(got) == allowed
    alerts = [a for a in actions if a.kind == "alert"]
    assert len(alerts) == (0 if allowed else 1)
    for a in alerts:
        # "shared" is said only when at least two nodes have that cause
        assert ("shared cause" in a.reason) == (len(a.nodes) >= 2), a


def test_a_fault_on_one_node_is_never_called_shared() -> None:
    # Two drains of unknown cause fill a cap of 2; the third node's fault is alone.
    got, actions = guard([DrainRequest("n3", "gpu-xid:79", "r")], ["n1", "n2"], FOUR,
                         PolicyParams(blast_max_percent=50.0))
    (alert,) = [a for a in actions if a.kind == "alert"]
    assert not got and "shared" not in alert.reason and "causes unknown" in alert.reason


def test_worked_example_four_nodes() -> None:
    """docs/policy.md: 4 nodes, a mount missing on all, cap 2 (50 %): 2 drains, one alert
    naming 4 nodes; a lost GPU on one of the spared nodes still drains (its own cause)."""
    p = PolicyParams(blast_max_percent=50.0)
    assert caps(FOUR, p) == {"fleet": 50, "partition:gpu": 2}
    reqs = [DrainRequest(n, "fs-mount", "slurmguard: fs-mount: /shared") for n in sorted(FOUR["fleet"])]
    got, actions = guard(reqs, {}, FOUR, p)
    assert [r.node for r in got] == ["n1", "n2"]
    (alert,) = [a for a in actions if a.kind == "alert"]
    assert alert.nodes == ("n1", "n2", "n3", "n4") and "fs-mount failing on 4 nodes" in alert.reason
    recent = {"n1": {"fs-mount"}, "n2": {"fs-mount"}}
    got, _ = guard([DrainRequest("n3", "gpu-count", "r")], recent, FOUR, p)
    assert [r.node for r in got] == ["n3"]


def test_worked_example_a_thousand_nodes() -> None:
    """docs/policy.md: 1,000 nodes in 4 partitions of 250 and 25 racks of 40 (groups),
    defaults (50 a fleet, 10 %): a dead switch (ib-link) under rack r7 drains 4 of its 40;
    a shared filesystem lost everywhere drains 25 in each of two partitions (4 a rack) and
    stops at the fleet's 50; Xid 79 on 30 scattered nodes drains all 30 (no scope reaches a
    cap); unrelated causes are untouched by either."""
    nodes = [f"g{i:04d}" for i in range(1000)]
    sc: dict[str, frozenset[str]] = {"fleet": frozenset(nodes)}
    for k in range(4):
        sc[f"partition:p{k}"] = frozenset(nodes[k * 250:(k + 1) * 250])
    for r in range(25):
        sc[f"group:r{r}"] = frozenset(nodes[r * 40:(r + 1) * 40])
    c = caps(sc, P)
    assert c["fleet"] == 50 and c["partition:p0"] == 25 and c["group:r0"] == 4
    rack7 = sorted(sc["group:r7"])
    got, acts = guard([DrainRequest(n, "ib-link", "r") for n in rack7], {}, sc, P)
    assert len(got) == 4 and [a.scope for a in acts if a.kind == "alert"] == ["group:r7"]
    got, acts = guard([DrainRequest(n, "fs-mount", "r") for n in nodes], {}, sc, P)
    assert len(got) == 50
    assert sorted(len({r.node for r in got} & sc[f"partition:p{k}"]) for k in range(4)) == [0, 0, 25, 25]
    assert all(len(set(r.node for r in got) & m) <= 4 for s, m in sc.items() if s.startswith("group:"))
    xid = [nodes[i * 33] for i in range(30)]  # one per rack at most: scattered
    got, _ = guard([DrainRequest(n, "gpu-xid:79", "r") for n in xid], {}, sc, P)
    assert len(got) == 30
    recent = {n: {"fs-mount"} for n in nodes[:50]}
    got, _ = guard([DrainRequest(nodes[999], "gpu-count", "r")], recent, sc, P)
    assert len(got) == 1  # the fleet's fs-mount allowance spent; a lost GPU still drains


def _s(ago: float, health: str, failing: tuple[str, ...] = (), passed: tuple[str, ...] | None = None,
       hook: str = "healthcheck") -> Sample:
    return Sample(NOW - ago, health, failing, hook, None, passed)


@pytest.mark.parametrize("samples, expected", [
    # a prolog that ran only gpu-count passes on a node whose fs-mount failed: still one
    # incident (the prolog did not look)
    ([_s(600, U, ("fs-mount",), ("gpu-count",)), _s(500, H, (), ("gpu-count",), "prolog"),
      _s(400, U, ("fs-mount",), ("gpu-count",))], ["fs-mount"]),
    # the check itself passed in between: two incidents
    ([_s(600, U, ("fs-mount",), ("gpu-count",)), _s(500, H, (), ("fs-mount", "gpu-count")),
      _s(400, U, ("fs-mount",), ("gpu-count",))], ["fs-mount", "fs-mount"]),
    # a failing run in which the check passed ends its episode too
    ([_s(600, U, ("fs-mount",), ()), _s(500, U, ("gpu-xid",), ("fs-mount",)),
      _s(400, U, ("fs-mount",), ())], ["fs-mount", "gpu-xid", "fs-mount"]),
    # a pass whose checks are not known closes everything
    ([_s(600, U, ("fs-mount",)), _s(500, H), _s(400, U, ("fs-mount",))], ["fs-mount", "fs-mount"]),
])
def test_an_episode_ends_when_its_check_passes(samples, expected) -> None:
    assert [c for c, _ in episodes(samples)] == expected
