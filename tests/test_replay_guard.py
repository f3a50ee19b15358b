"""`policy replay` decides the blast radius exactly as the live guard did (docs/fleet.md).

The live guard (slurmguard/drainguard.py: Slurm's view, the store's ledger, per cause) drains
nodes of a real 6-node Slurm cluster through a real caller, the allocation gate's drain path,
over a history with mixed causes in one scope: an fs-mount drain, then Xid 79 drains in the
same group up to its cap, then fs-mount again in a small partition up to its cap. Then
`slurmguard policy replay` reads that history from the same store and must give back every
recorded decision: each recorded drain allowed, each recorded refusal refused.

Scopes: partition ``gpu`` (n1-n6), partition ``small`` (n5, n6), group ``rack1`` (n1-n4).
With ``blast_max_percent = 50``: cap 2 in rack1, 1 in small, 3 in gpu.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers import run_sg, sg_env
from support.sgserve import new_port, new_store, write_config

from slurmguard import config
from slurmguard.store import Store

MOUNT = "slurmguard: fs-mount: /shared: not mounted"
XID79 = "slurmguard: gpu-xid: GPU 0 (PCI 0000:3b:00) Xid 79: GPU has fallen off the bus"
# (node, reason, what the live guard decides): the Xid 79 on n3 is allowed although an
# fs-mount drain (n1) and an Xid 79 drain (n2) already sit in rack1 (cap 2): causes count
# apart. The fs-mount on n6 is refused by partition `small` (cap 1), which only a replay that
# knows the partitions sees.
STEPS = [("n1", MOUNT, True), ("n2", XID79, True), ("n3", XID79, True), ("n4", XID79, False),
         ("n5", MOUNT, True), ("n6", MOUNT, False)]


@pytest.mark.slurm
def test_replay_gives_back_the_live_guards_decisions(slurm_cluster_factory, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmguard.gate.answer import _drain  # the gate's drain path: a live guard caller

    c = slurm_cluster_factory(nodes=6, extra_conf=["PartitionName=small Nodes=n[5-6] State=UP"])
    monkeypatch.setenv("SLURM_CONF", c.env["SLURM_CONF"])
    url = new_store(tmp_path)
    path = write_config(tmp_path, store_url=url, port=new_port(), extra="""
[policy]
blast_max_percent = 50.0
blast_max_nodes = 10
# The caps are what replay gives back; a held drain (the second look) is not replayed.
second_look_after = 0
[policy.groups]
rack1 = "n[1-4]"
""")
    cfg = config.load(str(path))
    t0 = time.time()
    live = []
    for node, reason, _ in STEPS:
        live.append(_drain(cfg, {node: reason}, job="7") == [node])
    assert live == [want for _, _, want in STEPS], "the live guard itself decided otherwise"
    store = Store.open(url=url)
    try:  # the ledger holds exactly those decisions
        kinds = {(e.node, e.kind) for e in store.nodes.events(since=t0 - 1)
                 if e.kind in ("drain", "drain_refused")}
    finally:
        store.close()
    assert kinds == {(n, "drain" if ok else "drain_refused") for n, _, ok in STEPS}

    p = run_sg("policy", "replay", "--since", "1h", "--json",
               env=sg_env(SLURMGUARD_CONFIG=str(path), SLURM_CONF=c.env["SLURM_CONF"]))
    assert p.returncode == 0, p.stderr
    blast = json.loads(p.stdout)["current"]["blast"]
    assert (blast["recorded_drains"], blast["recorded_refusals"]) == (4, 2), blast
    # Replay: every recorded drain allowed again, every recorded refusal refused again.
    assert (blast["newly_refused"], blast["newly_allowed"]) == (0, 0), blast
    assert (blast["drains"], blast["refusals"]) == (4, 2), blast
    assert blast["changed"] == [] and blast["partitions"] is True, blast

    # The risk curve on the same real store (docs/fleet.md, "Choosing the level"): of the
    # four drains, those the guard's alerts name are one shared cause each, not the node's
    # failure; the one left is a failure, still out. One failure (15 points) flags its node
    # at level 15, not at 20, and a flag raised while its node is out foresaw nothing
    # (late): no level has a true or false flag to count.
    p = run_sg("fleet", "risk", "--curve", "--since", "1d", "--json",
               env=sg_env(SLURMGUARD_CONFIG=str(path), SLURM_CONF=c.env["SLURM_CONF"]))
    assert p.returncode == 0, p.stderr
    rows = {r["level"]: r for r in json.loads(p.stdout)["levels"]}
    assert rows[15]["failures"] == 1 and rows[15]["nodes_flagged"] == 1, rows[15]
    assert rows[15]["late"] == 1 and rows[20]["nodes_flagged"] == 0, rows
    assert all(r["true"] == r["false"] == 0 and r["precision"] is None for r in rows.values())


PARTS = {**{f"n{i}": ("gpu",) for i in range(1, 5)}, "n5": ("gpu", "small"), "n6": ("gpu", "small")}
CAUSES = ("fs-mount", "gpu-xid:79", "gpu-xid:48")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(sorted(PARTS)), st.sampled_from(CAUSES),
                          st.integers(1, 1500)), min_size=1, max_size=14))
def test_replay_agrees_with_the_permit_on_any_history(asks: list[tuple[str, str, int]]) -> None:
    """Any sequence of drains of mixed causes, decided by the live permit
    (drainguard.decide over a real SQLite store's ledger) and written as guarded_drain writes
    it, comes back from replay (fleet/replay.blast_decisions over the history read back from
    that store) with the same decisions, window edges included."""
    from slurmguard.drainguard import decide
    from slurmguard.fleet.replay import blast_decisions
    from slurmguard.policy.blast import DrainRequest, scopes
    from slurmguard.policy.params import PolicyParams
    from slurmguard.store.fleet import load_history

    p = PolicyParams(blast_max_percent=50.0, blast_max_nodes=3, blast_window=3600.0,
                     groups={"rack1": "n[1-4]"})
    sc = scopes(PARTS, p.groups)
    with tempfile.TemporaryDirectory() as d:
        store = Store.open(url=new_store(Path(d)))
        try:
            at, live = 1_800_000_000.0, []
            for node, cause, dt in asks:
                at += dt
                v = decide(store, DrainRequest(node, cause, f"slurmguard: {cause}: x"), sc, p,
                           via="test", now=at)
                if v.allowed:  # what guarded_drain writes once Slurm has drained
                    store.nodes.record_event(node, "drain", "slurmguard", "x", source=cause, at=at)
                live.append(v.allowed)
            h = load_history(store.engine, since=1_800_000_000.0, until=at)
        finally:
            store.close()
    h.partitions = dict(PARTS)
    decisions, _ = blast_decisions(h, p)
    assert [ok for *_, ok in decisions] == live
    assert [kind for _, _, _, kind, _ in decisions] == [
        "drain" if ok else "drain_refused" for ok in live]
