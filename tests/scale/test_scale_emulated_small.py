"""The scale harness with emulated nodes, small form (docs/scale.md "Emulated nodes"; the
long form is `tests/scale/run.py --nodes 1024 --emulated 8976`): 32 real slurmd and 480 node
entries without one on one slurmctld, two serve replicas on PostgreSQL, the node-traffic
generator (support/nodetraffic.py) sending the emulated nodes' records, drains and gates
through slurmguard's own node code. One module-scoped run (about 2 minutes), then:

- Slurm 22.05 keeps every emulated node UNKNOWN (NOT_RESPONDING from its first failed ping;
  never DOWN, no reason): the state docs/scale.md describes, and what lets their drains
  through (and their undrain, which Slurm answers with an error: support/scaleharness.py);
- every emulated node's records arrived in serve's store, each exactly once, as many per node
  as the generator sent, signed as the real nodes sign (MUNGE, origin 127.0.0.1);
- slurmguard's controller-side RPCs do not follow the emulated nodes' traffic: a few dozen a
  minute (the shared node-table read and the job table) against the emulated nodes' hundreds
  of records a minute; every node-table read grows with the table, not their number;
- a shared fault across real and emulated nodes (every node's fs-mount at once, serve up)
  drains at most the guard's cap of the partition of all 512 entries, and emulated nodes ask
  and are refused like real ones.
"""

from __future__ import annotations

import time

import pytest
from support.loadgen import count_records
from support.scale_controller import SCENARIOS
from support.scaleharness import ScaleHarness, ScaleSpec, require_harness

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

NODES, AGENTS, EMULATED = 32, 8, 480


def _stored_per_node(store_url: str) -> dict[str, int]:
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine

    engine = make_engine({"url": store_url})
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT nodes.name, count(runs.id) FROM runs JOIN nodes "
                                     "ON runs.node_id = nodes.id GROUP BY nodes.name")).all()
    finally:
        engine.dispose()
    return {name: n for name, n in rows}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_harness()
    t0 = time.monotonic()
    h = ScaleHarness.start(tmp_path_factory.mktemp("scale") / "h",
                           ScaleSpec(nodes=NODES, agents=AGENTS, emulated=EMULATED, hc_interval=60,
                                     start_wave=NODES // 2))  # started in waves, as at 10,000
    try:
        assert h.cluster is not None and h.traffic is not None
        out: dict = {"start_s": time.monotonic() - t0}
        out["states"] = {n.name: n for n in h.cluster.cli().nodes() if n.name in h.emulated_nodes}
        out["steady"] = SCENARIOS["steady"](h, minutes=0.4, jobs_per_hour=(1200,), sample=1)
        out["steady_s"] = time.monotonic() - t0 - out["start_s"]
        out["shared_fault"] = SCENARIOS["shared_fault"](h, parallel=16, modes=("serve_up",))
        out["states_after"] = {n.name: n for n in h.cluster.cli().nodes()
                               if n.name in h.emulated_nodes}
        h.traffic.stop()  # nothing more in flight: every record sent is settled
        out["per_node"] = h.traffic.records_per_node()
        out["made"] = h.traffic.made()
        out["traffic"] = h.traffic.figures()
        out["stored_per_node"] = _stored_per_node(h.store_url)
        out["counted"] = count_records(h.store_url, out["made"])
        out["emulated_nodes"] = list(h.emulated_nodes)
    finally:
        h.stop()
    out["wall_s"] = time.monotonic() - t0
    t = out["traffic"]
    print(f"\nscale emulated small form: {NODES}+{EMULATED} nodes, {out['wall_s']:.0f} s "
          f"(start {out['start_s']:.0f} s, steady {out['steady_s']:.0f} s); "
          f"generator: {t['healthcheck']}, gate {t['gate']}, drains {t['drains']}, "
          f"cpu {t['cpu_pct']} %")
    return out


def test_slurm_keeps_the_emulated_nodes_unknown(run):
    # UNKNOWN, NOT_RESPONDING from slurmctld's first failed ping on; never DOWN, no reason.
    for states in (run["states"], run["states_after"]):
        assert len(states) == EMULATED
        for n in states.values():
            assert (n.state, n.drained, n.reason) == ("unknown", False, ""), n
    assert all(n.not_responding for n in run["states_after"].values())


def test_every_emulated_nodes_records_arrive_once(run):
    per_node, stored = run["per_node"], run["stored_per_node"]
    assert set(per_node) == set(run["emulated_nodes"])  # the fault's pass reached every node
    assert {n: stored.get(n, 0) for n in per_node} == per_node
    lost, duplicated, n_stored = run["counted"]
    assert (lost, duplicated, n_stored) == (0, 0, len(run["made"]))
    t = run["traffic"]
    assert t["errors"] == [] and t["behind"] == 0, t
    # A send that timed out on a loaded host is spooled and replayed, as a node's hooks do:
    # none is dropped (every record is stored once, above), whatever the host's load.
    hc = t["healthcheck"]
    assert hc["failed"] == hc["spooled"] and hc["records"] >= EMULATED, t
    assert t["prolog"]["records"] >= 1 and t["gate"]["calls"] == t["prolog"]["records"], t
    (ph,) = run["steady"]["phases"]  # no fault yet: every emulated node's last record healthy
    assert ph["emulated"]["gate"]["calls"] >= 1 and ph["emulated"]["gate"]["refused"] == 0, ph


def test_controller_rpcs_do_not_follow_the_emulated_nodes(run):
    (ph,) = run["steady"]["phases"]
    sent = ph["emulated"]
    records_per_min = 60 * sum(sent[k]["records"] for k in ("healthcheck", "prolog", "epilog")) \
        / sent["seconds"]
    assert records_per_min >= 300, sent  # 480 nodes' checks a minute, their jobs' records
    # The controller side reads the node table once per slurm_view_ttl for both replicas,
    # the job table on demand (at most once per job_cache_s per replica) and the identity
    # map's node table (node_cache_s): per minute, whatever the nodes send.
    assert ph["controller_rpm"] <= 120, (ph["controller_rpm"], ph["rpc_per_min"])
    assert ph["controller_rpm"] <= records_per_min / 4, (ph["controller_rpm"], records_per_min)
    # The generator itself: a fraction of a core for 480 nodes' traffic.
    assert sent["cpu_pct"] <= 25, sent


def test_a_shared_fault_over_real_and_emulated_nodes_drains_at_most_the_cap(run):
    sf = run["shared_fault"]
    up = sf["serve_up"]
    assert sf["cap"] == 50  # blast_max_nodes: 20 % of 512 entries is 102
    assert 0 < up["drained"] <= sf["cap"], up
    assert up["drained"] == up["drained_real"] + up["drained_emulated"]
    drains = up["emulated_pass"]["drains"]
    assert drains.get("refused", 0) >= EMULATED - sf["cap"], drains  # asked, and refused
    assert up["drained_other"] == [], up
