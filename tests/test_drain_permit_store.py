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
