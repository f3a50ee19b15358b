"""The one reader of the repair ledger (slurmguard/repair/ledger.py): episodes, outcomes and
reboots from the store's rows, as `node show`, `repair history`, `incident show` and the
harnesses' repair figures read them."""

from __future__ import annotations

from itertools import count

from slurmguard.repair.ledger import episodes, latest
from slurmguard.store.rows import EventRow

NOW = 1_000_000.0
_ids = count(100)


def row(kind: str, at: float, node: str = "n1", actor: str = "slurmguard", source: str = "",
        reason: str = "", **details: object) -> EventRow:
    return EventRow(next(_ids), at, node, kind, actor, actor, source, reason, dict(details))


def test_an_episode_is_a_drain_and_the_repair_steps_that_name_it():
    d1 = row("drain", NOW, source="gpu-xid", reason="slurmguard: gpu-xid: Xid 79")
    d2 = row("drain", NOW + 500, source="gpu-lost")
    admin = row("drain", NOW + 900, actor="admin")  # a person's drain begins no episode
    rows = [d1, row("repair_start", NOW + 10, episode=d1.id, cause="gpu-xid:79"),
            row("repair_rung", NOW + 11, episode=d1.id, rung="reboot"),
            row("repair_outcome", NOW + 60, episode=d1.id, result="transient"),
            row("repair_rung", NOW + 70, episode=d1.id, rung="power-cycle"),
            row("repair_outcome", NOW + 120, episode=d1.id, result="verified"),
            row("repair_return", NOW + 121, episode=d1.id),
            d2, row("repair_start", NOW + 510, episode=d2.id),
            row("repair_ticket", NOW + 511, episode=d2.id), admin,
            row("drain", NOW + 5, node="n2", source="ib-link")]
    got = episodes(reversed(rows))  # any order in, oldest drain first out
    assert [(r.node, r.episode) for r in got] == [("n1", d1.id), ("n2", rows[-1].id),
                                                  ("n1", d2.id)]
    first, waiting, ticketed = got
    assert (first.outcome, first.reboots, first.cause) == ("returned", 2, "gpu-xid:79")
    assert (first.reason, waiting.reason) == ("slurmguard: gpu-xid: Xid 79", "")
    assert (first.drained_at, first.started_at, first.ended_at) == (NOW, NOW + 10, NOW + 121)
    assert [r for _, r in first.rungs] == ["reboot", "power-cycle"]
    assert (waiting.outcome, waiting.cause, waiting.reboots) == ("waiting", "ib-link", 0)
    assert (ticketed.outcome, ticketed.reboots, ticketed.cause) == ("ticketed", 0, "gpu-lost")
    assert first.to_dict()["rungs"][1] == {"at": NOW + 70, "rung": "power-cycle"}


def test_steps_whose_drain_was_not_read_still_make_their_episode():
    got = episodes([row("repair_start", NOW, episode=3), row("repair_rung", NOW + 1, episode=3,
                                                             rung="reboot")])
    assert [(r.episode, r.drained_at, r.first_at, r.outcome, r.state.state) for r in got] == [
        (3, None, NOW, "open", "proving")]


def test_the_latest_episode_is_the_newest_that_repair_touched():
    assert latest([]) is None
    assert latest([row("drain", NOW)]) is None  # a drain repair has not looked at
    got = latest([row("repair_start", NOW - 90, episode=3, cause="gpu-lost"),
                  row("repair_rung", NOW - 80, episode=3, rung="reboot"),
                  row("repair_start", NOW - 9000, episode=1),
                  row("repair_return", NOW - 8000, episode=1)])
    assert got is not None
    assert (got.episode, got.cause, got.state.state, got.last_at, len(got.state.taken)) == (
        3, "gpu-lost", "proving", NOW - 80, 1)
