"""The one permit over the store's ledger (slurmguard.drainguard.decide), on SQLite and on a
real PostgreSQL: what it reads (permits and drains per node and cause, less failed drains)
and what it writes (``permit``; ``drain_refused`` and one alert)."""

from __future__ import annotations

import pytest
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.drainguard import decide, ledger_recent
from slurmguard.policy.blast import DrainRequest
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store

NOW = 1_800_000_000.0
NODES = frozenset(f"n{i}" for i in range(1, 5))
SCOPES = {"fleet": NODES, "partition:gpu": NODES}
P = PolicyParams(blast_max_percent=50.0)  # cap 2 per cause


@pytest.fixture
def store(store_url: str):  # noqa: F811
    s = Store.open(url=store_url)
    yield s
    s.close()


def _ask(store: Store, node: str, cause: str, at: float = NOW):
    return decide(store, DrainRequest(node, cause, f"slurmguard: {cause}: x"), SCOPES, P,
                  via="test", now=at)


def test_permits_fill_the_cap_per_cause_and_write_the_ledger(store: Store) -> None:
    assert _ask(store, "n1", "fs-mount").allowed and _ask(store, "n2", "fs-mount").allowed
    v = _ask(store, "n3", "fs-mount")
    assert not v.allowed and v.alert_created and "fs-mount failing on 3 nodes" in v.alert
    assert not _ask(store, "n4", "fs-mount").allowed  # the same alert, updated
    (alert,) = store.nodes.alerts()
    assert alert.count == 4 and alert.cause == "fs-mount"
    assert _ask(store, "n3", "gpu-xid:79").allowed  # another cause: its own allowance
    assert ledger_recent(store, NOW - 3600) == {"n1": {"fs-mount"}, "n2": {"fs-mount"},
                                               "n3": {"gpu-xid:79"}}
    kinds = sorted(e.kind for e in store.nodes.events())
    assert kinds == ["drain_refused"] * 2 + ["permit"] * 3


def test_a_failed_drain_gives_the_slot_back_and_old_drains_expire(store: Store) -> None:
    store.nodes.record_event("n1", "permit", "slurmguard", "r", source="fs-mount", at=NOW - 10)
    store.nodes.record_event("n1", "drain_failed", "slurmguard", "scontrol: timeout", source="fs-mount",
                       at=NOW - 9)
    store.nodes.record_event("n2", "drain", "slurmguard", "r", source="fs-mount", at=NOW - 4000)
    store.nodes.record_event("n3", "drain", "admin:bob", "r", source="admin", at=NOW - 5)
    assert ledger_recent(store, NOW - 3600) == {}
    assert _ask(store, "n4", "fs-mount").allowed


# -- the second look (slurmguard.policy.blast.second_look; docs/policy.md "Second look") ------
LOOK = PolicyParams(blast_max_percent=50.0, second_look_after=2, second_look_window=120.0,
                    second_look_delay=20.0)


def _look(store: Store, node: str, cause: str, at: float, via: str = "permit"):
    return decide(store, DrainRequest(node, cause, f"slurmguard: {cause}: x"), SCOPES, LOOK,
                  via=via, now=at)


def test_a_brief_shared_fault_drains_only_the_first_nodes(store: Store) -> None:
    """A filer's hang seen by 4 nodes within seconds: 2 drain, the other 2 are held (one
    ``drain_held`` each), and their next checks pass: nothing more drains."""
    assert _look(store, "n1", "fs-mount", NOW).allowed
    assert _look(store, "n2", "fs-mount", NOW + 1).allowed
    v = _look(store, "n3", "fs-mount", NOW + 2)
    assert not v.allowed and v.held and [a.kind for a in v.actions] == ["alert"]
    assert "held for a second look" in v.alert
    assert _look(store, "n4", "fs-mount", NOW + 3).held
    assert _look(store, "n4", "fs-mount", NOW + 4, via="gate").held  # no second event
    kinds = sorted((e.node, e.kind) for e in store.nodes.events())
    assert kinds == [("n1", "permit"), ("n2", "permit"), ("n3", "drain_held"),
                     ("n4", "drain_held")]
    # One fleet alert names the suspect shared cause (what incidents and the lemon rule read),
    # widened by each node held, in the narrowest scope holding them all.
    (alert,) = store.nodes.alerts()
    assert (alert.cause, alert.scope, alert.count) == ("fs-mount", "partition:gpu", 4)
    assert "suspect a shared cause" in alert.message and "second look" in alert.message


def test_a_lasting_shared_fault_drains_the_cap_at_the_second_look(store: Store) -> None:
    """The fault stays: each held node's next check, 20 s or more after its hold, is its
    second look, decided by the caps as before (cap 2: refused, one alert)."""
    assert _look(store, "n1", "fs-mount", NOW).allowed
    assert _look(store, "n2", "fs-mount", NOW + 1).allowed
    assert _look(store, "n3", "fs-mount", NOW + 2).held
    assert _look(store, "n3", "fs-mount", NOW + 12).held  # too soon: the same look
    assert _look(store, "n3", "fs-mount", NOW + 30, via="gate").held  # a stored result
    v = _look(store, "n3", "fs-mount", NOW + 30)
    assert not v.held and not v.allowed and [a.kind for a in v.actions] == ["refuse", "alert"]
    assert "fs-mount failing on 3 nodes" in v.alert and "stopped draining" in v.alert
    (alert,) = store.nodes.alerts()  # the hold's alert, now the cap's
    assert alert.count == 3 and "stopped draining" in alert.message


def test_faults_apart_in_time_or_cause_are_never_held(store: Store) -> None:
    def _look(store: Store, node: str, cause: str, at: float, via: str = "permit"):
        return decide(store, DrainRequest(node, cause, f"slurmguard: {cause}: x"), SCOPES,
                      LOOK._replace(blast_max_percent=100.0), via=via, now=at)  # cap 4

    assert _look(store, "n1", "ib-link", NOW).allowed
    assert _look(store, "n2", "ib-link", NOW + 5).allowed
    assert _look(store, "n3", "ib-link", NOW + 200).allowed  # the others' window is past
    assert _look(store, "n4", "gpu-lost", NOW + 201).allowed  # another cause
    assert _look(store, "n4", "fs-mount", NOW + 202, via="policy").allowed  # serve's own pass
    # A node's own hardware is never held: an Xid wave drains at once (within the caps).
    for i, n in enumerate(("n1", "n2", "n3")):
        assert _look(store, n, "gpu-xid:79", NOW + 210 + i).allowed
    off = LOOK._replace(second_look_after=0, blast_max_percent=100.0)
    store.nodes.record_event("n1", "permit", "slurmguard", "r", source="ib-link", at=NOW + 300)
    store.nodes.record_event("n2", "permit", "slurmguard", "r", source="ib-link", at=NOW + 300)
    assert decide(store, DrainRequest("n3", "ib-link", "slurmguard: ib-link: x"), SCOPES, off,
                  via="permit", now=NOW + 301).allowed  # 0: off


@pytest.mark.parametrize("others,held_at,via,now,want", [
    (["n1", "n2"], None, "permit", 10.0, True),
    (["n1", "n4"], None, "gate", 10.0, True),
    (["n1", "n4"], None, "policy", 10.0, False),     # serve's own drains: over history
    (["n1"], None, "permit", 10.0, False),            # one other: not corroborated
    (["n1", "n4"], None, "permit", 10.0, True),
    (["n3", "n1", "n2"], None, "permit", 10.0, True),  # itself among them: not counted
    (["n3", "n1"], None, "permit", 10.0, False),
    (["n1", "n2"], 0.0, "permit", 19.9, True),       # too soon after its hold
    (["n1", "n2"], 0.0, "permit", 20.0, False),      # its second look
    (["n1", "n2"], 0.0, "gate", 50.0, True),         # the gate re-reads a result: no look
])
@pytest.mark.parametrize("cause,listed", [("fs-mount", True), ("ib-link", True),
                                          ("gpu-xid:79", False), ("gpu-lost", False)])
def test_second_look_table(others, held_at, via, now, want, cause, listed) -> None:
    from slurmguard.policy.blast import second_look

    assert bool(second_look("n3", cause, via, others, held_at, now, LOOK)) is (want and listed)
