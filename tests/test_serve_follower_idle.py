"""A serve replica that does not lead sleeps between its looks (serve/fleet.py ``_loop``,
docs/serve.md "One leader").

Two Fleets, each with its real Leader (serve/leader.py), on one real PostgreSQL: the first
leads, the second follows. Past ``policy_interval`` after its start the follower's periodic
thread must still wake at most once per ``leader_retry`` (plus ingest wake-ups: none here).
Before, its full-pass deadline, which only the leader moves, fell into the past, the wait
became 0 and the follower spun: 752,651 looks in 6 s in-process on this host, and at 1,024
nodes the scale harness's second replica used 65 CPU-s in a 120-s phase (docs/scale.md).
The figure asserted is a count of looks, not time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.pgserver import PgServer, pg_server  # noqa: F401  (fixture)
from support.replicas import pg_store
from support.wait import wait_for

from slurmguard.config import load
from slurmguard.serve.fleet import Fleet
from slurmguard.serve.leader import Leader
from slurmguard.store.api import Store

INTERVAL, RETRY, WATCH = 1.0, 0.5, 4.0


@pytest.mark.postgres
def test_a_follower_wakes_once_per_retry_after_policy_interval(pg_server: PgServer,  # noqa: F811
                                                              tmp_path: Path) -> None:
    url = pg_store(pg_server)
    cfg_path = tmp_path / "sg.toml"
    # No Slurm here: a pass that reads it finds it unavailable and drains nothing.
    cfg_path.write_text(f'[store]\nurl = "{url}"\n[slurm]\nscontrol = "/bin/false"\n'
                        f"[serve]\npolicy_interval = {INTERVAL}\nleader_retry = {RETRY}\n")
    cfg = load(str(cfg_path))
    pairs = []
    try:
        for label in ("first", "second"):
            store = Store.open(cfg)
            fleet = Fleet(cfg, store)
            leader = Leader(store, retry=RETRY, label=f"test {label}")
            fleet.start(leader)
            leader.start()
            pairs.append((store, fleet, leader))
            if label == "first":
                wait_for(lambda lead=leader: lead.is_leader, 20, what="the first replica to lead")
        (_, lead, _), (_, follower, fleader) = pairs
        assert not fleader.is_leader
        time.sleep(INTERVAL + 2 * RETRY)  # past the follower's first full-pass deadline
        before, t0 = follower.wakeups, time.monotonic()
        time.sleep(WATCH)
        looks, took = follower.wakeups - before, time.monotonic() - t0
        print(f"\nfollower: {looks} looks in {took:.1f} s (one per {RETRY} s retry); "
              f"leader: {lead.wakeups} looks since its start")
        assert 1 <= looks <= took / RETRY + 3, looks
        assert lead.last_pass is not None  # the leader did run its passes meanwhile
    finally:
        for store, fleet, leader in reversed(pairs):
            fleet.stop()
            leader.stop()
            store.close()
