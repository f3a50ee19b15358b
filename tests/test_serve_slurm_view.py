"""One reader of Slurm's node table for every serve replica (serve/slurmview.py, docs/serve.md
"One reader of the node table").

- The store's published view (``store.slurm_views``) on SQLite and PostgreSQL: the body is
  written when the text changes and only the read time moves when it does not; a reader gets
  the text back and the head (read time, digest, publisher) alone.
- Two CachedNodes on one store and one real slurmctld, one leading: slurmctld counts (sdiag)
  one node read per ttl for the two of them, the follower none of its own, and the follower's
  view follows Slurm (a drain shows within a few ttl). The leader stops: the follower goes on
  with the last view until it is ``max_age`` old, then reads Slurm itself once per ttl.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)
from support.wait import wait_for

from slurmguard.serve.slurmview import CachedNodes, SharedView
from slurmguard.store.api import Store


@pytest.mark.postgres
def test_a_published_view_keeps_its_body_until_the_text_changes(store_url: str) -> None:  # noqa: F811
    store = Store.open(url=store_url)
    try:
        views = store.slurm_views
        assert views.head("nodes") is None and views.text("nodes") is None
        text = "NodeName=n1 State=IDLE Partitions=gpu\nNodeName=n2 State=IDLE Partitions=gpu\n"
        assert views.publish("nodes", text, read_at=100.0, publisher="ctl1 a:1") is True
        assert views.publish("nodes", text, read_at=102.0, publisher="ctl1 a:1") is False
        head = views.head("nodes")
        assert head is not None and head.read_at == 102.0 and head.publisher == "ctl1 a:1"
        assert views.text("nodes") == (head.digest, text)
        changed = text.replace("n2 State=IDLE", "n2 State=IDLE+DRAIN")
        assert views.publish("nodes", changed, read_at=104.0, publisher="ctl2 b:2") is True
        head2 = views.head("nodes")
        assert head2 is not None and head2.digest != head.digest and head2.publisher == "ctl2 b:2"
        assert views.text("nodes") == (head2.digest, changed)
    finally:
        store.close()


TTL, MAX_AGE, WINDOW = 1.0, 4.0, 10.0


def counted(c: Any, seconds: float) -> dict[str, int]:
    """slurmctld's RPCs by message type over ``seconds`` (``sdiag --reset`` first)."""
    c.run("sdiag", "--reset")
    time.sleep(seconds)  # the window counted
    part = c.run("sdiag").stdout.split("by message type")[1].split("by user")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)}


def test_the_leader_reads_slurm_for_both_and_the_follower_falls_back_when_it_stops(
        slurm_cluster_factory: Any, tmp_path: Path) -> None:
    c = slurm_cluster_factory(nodes=2)
    url = f"sqlite:///{tmp_path}/store.db"
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    store = Store.open(url=url)
    leads = {"a": True, "b": False}
    views = {}
    try:
        for name in ("a", "b"):
            views[name] = CachedNodes(c.cli(), TTL).share(SharedView(
                store, lambda n=name: leads[n], label=f"test {name}", max_age=MAX_AGE)).start()
        lead, follower = views["a"], views["b"]
        wait_for(lambda: follower.following, 20, what="the follower to take the published view")
        before, stale = follower.reads, follower.stale_looks
        reads = counted(c, WINDOW).get("REQUEST_NODE_INFO", 0)
        own, stale = follower.reads - before, follower.stale_looks - stale
        print(f"\ntwo views, one leading: {reads} node reads in {WINDOW:.0f} s at ttl {TTL} "
              f"(the follower's own: {own}, after {stale} looks that found the published view "
              f"older than max_age; views it took: {follower.adopted})")
        # The follower reads Slurm only when a look found no fresh view: on a host starved
        # of CPU the leader's reads can fall behind max_age (seen at load 850), and the
        # follower then rightly reads itself, once per look at most.
        assert own <= stale, (own, stale)
        assert WINDOW / TTL - 3 - own <= reads <= WINDOW / TTL + 2 + own, (reads, own)
        assert sorted(i.name for i in follower.nodes()) == sorted(c.nodes)

        c.run("scontrol", "update", f"nodename={c.nodes[0]}", "state=drain",
              "reason=slurmguard: test: shared view")
        wait_for(lambda: any(i.name == c.nodes[0] and i.drained for i in follower.nodes()),
                 5 * TTL + 5, what="the follower to see the drain through the published view")

        lead.stop()  # the leader is gone: nobody publishes
        stopped, before = time.monotonic(), follower.reads
        wait_for(lambda: follower.reads > before, MAX_AGE + 10,
                 what="the follower to read Slurm itself past max_age")
        waited = time.monotonic() - stopped
        print(f"the follower read Slurm itself {waited:.1f} s after the leader stopped "
              f"(max_age {MAX_AGE})")
        assert MAX_AGE - 2 * TTL <= waited <= MAX_AGE + 3 * TTL, waited
        assert not follower.following
        alone = counted(c, 5.0).get("REQUEST_NODE_INFO", 0)
        assert 3 <= alone <= 5 / TTL + 2, alone  # once per ttl on its own: never silent
    finally:
        for v in views.values():
            v.stop()
        store.close()


def test_a_larger_table_is_read_proportionally_less_often(slurm_cluster_factory: Any) -> None:
    """``entries_per_ttl``: a table of more entries than one ttl covers is read every ttl x
    entries / entries_per_ttl (here 2 entries, 1 per ttl: every 2 ttl), counted by slurmctld;
    a caller between two reads gets the cached view, not a read of its own."""
    c = slurm_cluster_factory(nodes=2)
    view = CachedNodes(c.cli(), TTL, entries_per_ttl=1)
    try:
        assert view.period == TTL  # nothing read yet: the table's size is not known
        assert sorted(i.name for i in view.nodes()) == sorted(c.nodes)
        assert view.period == 2 * TTL
        view.start()
        reads = counted(c, WINDOW).get("REQUEST_NODE_INFO", 0)
        for _ in range(20):  # callers in between are answered from the view
            view.nodes()
        print(f"\n2 entries, 1 per ttl: {reads} node reads in {WINDOW:.0f} s at ttl {TTL}")
        assert WINDOW / (2 * TTL) - 2 <= reads <= WINDOW / (2 * TTL) + 1, reads
    finally:
        view.stop()
