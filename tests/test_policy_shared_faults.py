"""A shared fault makes no lemons and no flapping nodes (docs/policy.md, "Shared faults").

The pure rule (policy/shared.py, policy/lemon.py): failing checks that a fleet alert named a
suspect shared cause of, within the alert's window, in a scope of the node, are not the
node's failures; table tests, Hypothesis properties, and plan() over a fleet."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurmguard.policy.engine import SlurmState, plan
from slurmguard.policy.lemon import failures, lemon_verdict, transitions
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.shared import SharedFault, covering, excuse, from_alert
from slurmguard.policy.types import NodeView, Sample

NOW = 1_800_000_000.0
P = PolicyParams()
U, H = "unhealthy", "healthy"
FS, GPU = ("fs-mount",), ("gpu-count",)
SCOPES = {"fleet": frozenset({"n1", "n2", "n3"}), "partition:gpu": frozenset({"n1", "n2"}),
          "group:rack1": frozenset({"n1"}), "group:rack2": frozenset({"n3"})}


def runs(*items: tuple[float, str, tuple[str, ...]]) -> tuple[Sample, ...]:
    """(seconds ago, health, failing checks), any order -> samples oldest first."""
    return tuple(sorted((Sample(NOW - ago, h, c) for ago, h, c in items), key=lambda s: s.at))


def alert(cause: str, opened_ago: float, updated_ago: float, scope: str = "partition:gpu",
          closed_ago: float | None = None) -> SharedFault:
    return from_alert(cause, scope, NOW - opened_ago, NOW - updated_ago,
                      None if closed_ago is None else NOW - closed_ago, P.blast_window)


# The scale run's history: pass, fail (the filer hangs), pass, fail (it hangs again), pass.
TWICE = runs((3000, H, ()), (2400, U, FS), (2000, H, ()), (1200, U, FS), (600, H, ()))


def test_a_filer_that_hangs_twice_is_not_flapping() -> None:
    bare = NodeView("n1", TWICE)
    assert transitions(bare, NOW, P.window) == 4
    v = lemon_verdict(bare, NOW, P)
    assert v is not None and v.reason == "slurmguard: flapping: 4 pass/fail changes in 1h (fs-mount)"
    # the alert opened at the first hang and was updated at the second
    shared = NodeView("n1", TWICE, shared=covering("n1", [alert("fs-mount", 2400, 1200)], SCOPES))
    assert transitions(shared, NOW, P.window) == 0 and failures(shared, NOW, P.window) == 0
    assert lemon_verdict(shared, NOW, P) is None


def test_another_check_failing_during_the_alert_still_counts() -> None:
    # gpu-count flaps on its own while fs-mount is a shared fault; one run fails both
    own = runs((3000, H, ()), (2400, U, FS + GPU), (2000, H, ()), (1200, U, GPU), (900, U, FS),
               (600, H, ()))
    v = NodeView("n1", own, shared=covering("n1", [alert("fs-mount", 2400, 900)], SCOPES))
    assert transitions(v, NOW, P.window) == 4
    verdict = lemon_verdict(v, NOW, P)
    assert verdict is not None and verdict.reason.endswith("(gpu-count)"), verdict


@pytest.mark.parametrize("fault, changes", [
    (alert("fs-mount", 2400, 1200), 0),
    # opened after the first hang: the window reaches blast_window back (the cap's drains)
    (alert("fs-mount", 1300, 1200), 0),
    # the fleet's alert covers every node; an alert naming the node covers it
    (alert("fs-mount", 2400, 1200, scope="fleet"), 0),
    (SharedFault("fs-mount", "partition:other", NOW - 9000, NOW, frozenset({"n1"})), 0),
    # another cause's alert, another scope's alert: the node's own failures
    (alert("gpu-count", 2400, 1200), 4),
    (alert("fs-mount", 2400, 1200, scope="group:rack2"), 4),
    # closed before the second hang: the second still counts, and so the changes around it
    (alert("fs-mount", 2400, 2300, closed_ago=2200), 2),
])
def test_which_alerts_excuse(fault: SharedFault, changes: int) -> None:
    v = NodeView("n1", TWICE, shared=covering("n1", [fault], SCOPES))
    assert transitions(v, NOW, P.window) == changes
    assert (lemon_verdict(v, NOW, P) is None) == (changes < P.flap_transitions)


def test_an_alert_ends_blast_window_after_its_last_update() -> None:
    fault = alert("fs-mount", 7000, 6000)  # last refusal 100 min ago: over 40 min ago
    assert fault.end == NOW - 6000 + P.blast_window
    kept = excuse(runs((2500, U, FS), (2300, U, FS)), covering("n1", [fault], SCOPES))
    assert [s.at for s in kept] == [NOW - 2300]


def test_plan_marks_no_shared_fault_lemon_and_drains_the_node_flapping_on_its_own() -> None:
    fault = alert("fs-mount", 2400, 1200, scope="fleet")
    views = {n: NodeView(n, TWICE, shared=covering(n, [fault], SCOPES)) for n in ("n1", "n2")}
    own = runs((3000, H, ()), (2400, U, GPU), (2000, H, ()), (1200, U, GPU), (600, H, ()))
    views["n3"] = NodeView("n3", own, shared=covering("n3", [fault], SCOPES))
    up = {n: SlurmState(drained=False, ours=False) for n in views}
    acts = [(a.kind, a.node, a.source) for a in plan(views, NOW, P, slurm=up)]
    assert acts == [("lemon", "n3", "flapping"), ("drain", "n3", "gpu-count")]


# -- properties

_times = st.floats(min_value=1.0, max_value=P.window - 1.0)


@st.composite
def shared_history(draw):
    """Runs of one node, every fs-mount failure inside one of 1-3 fs-mount alert windows
    (in a scope the node is in), passes anywhere; returns (samples, faults)."""
    faults = []
    for _ in range(draw(st.integers(1, 3))):
        opened = draw(st.floats(min_value=0.0, max_value=P.window))
        updated = draw(st.floats(min_value=0.0, max_value=opened))
        scope = draw(st.sampled_from(["fleet", "partition:gpu", "group:rack1"]))
        faults.append(alert("fs-mount", opened, updated, scope=scope))
    items = []
    for _ in range(draw(st.integers(0, 30))):
        if draw(st.booleans()):
            items.append((draw(_times), H, ()))
        else:
            f = draw(st.sampled_from(faults))
            at = draw(st.floats(min_value=max(f.start, NOW - P.window + 1.0), max_value=min(f.end, NOW)))
            items.append((NOW - at, U, FS))
    return runs(*items), faults


_TWICE_FAULTS = [alert("fs-mount", 2400, 1200)]


@settings(max_examples=300, deadline=None)
@given(shared_history())
@example((TWICE, _TWICE_FAULTS))
def test_no_lemon_or_flapping_from_a_shared_fault_and_the_alert_is_what_decides(case) -> None:
    samples, faults = case
    v = NodeView("n1", samples, shared=covering("n1", faults, SCOPES))
    assert lemon_verdict(v, NOW, P, fleet_rate=0.01) is None
    assert failures(v, NOW, P.window) == 0 and transitions(v, NOW, P.window) == 0
    # Without the alert the same history is judged as before: flapping (or a lemon) once it
    # changes flap_transitions times, so the rule, not the history, spared it.
    bare = NodeView("n1", samples)
    if transitions(bare, NOW, P.window) >= P.flap_transitions:
        verdict = lemon_verdict(bare, NOW, P)
        assert verdict is not None and "fs-mount" in verdict.reason


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_times, st.sampled_from([H, U]), st.sampled_from([FS, GPU, FS + GPU])),
                max_size=30))
def test_a_shared_fault_never_hides_another_check(items) -> None:
    """Under an alert for fs-mount that spans the whole window, a node is judged as if
    fs-mount had never failed: the verdict of its history with fs-mount taken out of every
    run (and runs that failed nothing else taken out)."""
    items = [(ago, h, c if h == U else ()) for ago, h, c in items]
    v = NodeView("n1", runs(*items), shared=covering("n1", [alert("fs-mount", P.window, 0.0)], SCOPES))
    stripped = [(ago, h, tuple(x for x in c if x != "fs-mount")) for ago, h, c in items]
    alone = NodeView("n1", runs(*[(ago, h, c) for ago, h, c in stripped if h != U or c]))
    assert lemon_verdict(v, NOW, P) == lemon_verdict(alone, NOW, P)
    assert transitions(v, NOW, P.window) == transitions(alone, NOW, P.window)


def test_policy_replay_judges_lemons_with_the_alerts_known_at_the_time() -> None:
    """`policy replay` (fleet/replay.py:lemons) applies the same rule to a stored history:
    the alert from the store's fleet_alerts, the partition from Slurm's view."""
    from slurmguard.fleet.history import Alert, History, Run
    from slurmguard.fleet.replay import lemons

    def history(*alerts: Alert) -> History:
        h = History(since=NOW - 4000, until=NOW, alerts=list(alerts),
                    partitions={"n1": ("gpu",), "n2": ("gpu",), "n3": ("cpu",)})
        for node in ("n1", "n2", "n3"):
            h.runs[node] = [Run(s.at, U, checks=FS) for s in TWICE if s.health == U]
            h.healthy[node] = [s.at for s in TWICE if s.health == H]
        return h

    flap = "slurmguard: flapping: 4 pass/fail changes in 1h (fs-mount)"
    assert {n: r for n, (_, r) in lemons(history(), [], P).items()} == dict.fromkeys(
        ("n1", "n2", "n3"), flap)
    gpu = Alert(NOW - 2400, NOW - 1200, None, "fs-mount", "partition:gpu", frozenset({"n1", "n2"}))
    assert set(lemons(history(gpu), [], P)) == {"n3"}  # not in partition gpu: its own
    # an alert opened only after the node's last run was not known when it was judged
    late = Alert(NOW - 500, NOW - 500, None, "fs-mount", "fleet", frozenset({"n1", "n2"}))
    assert set(lemons(history(late), [], P)) == {"n1", "n2", "n3"}
