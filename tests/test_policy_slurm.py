"""Fleet policy against a real Slurm cluster: lemons re-drained by serve, the blast-radius cap.

Records arrive the way the hooks send them (delivery.deliver, serve_client.drain_permit); serve is a
real `slurmguard serve` subprocess with the cluster's SLURM_CONF; Slurm state is read back
through the adapter.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.sgserve import Serve, new_port, new_store, write_config
from support.wait import counter_advanced, wait_for

from slurmguard import config
from slurmguard.adapters.serve_client import drain_permit
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.store import Store

pytestmark = pytest.mark.slurm

LEMON = "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


def _store(tmp_path: Path) -> str:
    return new_store(tmp_path)


def _rec(node: str, hook: str, fail: str | None, applied: str, job: str | None = None) -> dict:
    results = [CheckResult("gpu-count", Health.HEALTHY)]
    reason = ""
    if not fail:  # a passing run ran the check that fails elsewhere in these tests
        results.append(CheckResult("gpu-xid", Health.HEALTHY))
    if fail:
        results.append(CheckResult(fail, Health.UNHEALTHY, "broken"))
        reason = f"slurmguard: {fail}: broken"
    r = make_record(node, hook, results, "drain" if fail else "pass", reason, job_id=job)
    r["applied"] = applied
    return r


def test_lemon_is_drained_again_after_a_plain_undrain(slurm_cluster_factory, tmp_path: Path) -> None:
    cluster = slurm_cluster_factory(nodes=4)
    cli = cluster.cli()
    url = _store(tmp_path)
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port)
    text = cfg_path.read_text().replace("batch_interval = 0.05", "batch_interval = 0.05\npolicy_interval = 1.0")
    cfg_path.write_text(text)
    cfg = config.load(str(cfg_path), env={})
    serve = Serve(cfg_path, port, env={"SLURM_CONF": cluster.env["SLURM_CONF"]}).start()
    try:
        # Three prolog failures within the hour, each drained by the node and cleared again by
        # its healthcheck once gpu-xid passed (what the hooks do).
        for i in range(3):
            assert cli.drain("n1", "slurmguard: gpu-xid: broken")
            assert delivery.deliver(_rec("n1", "prolog", "gpu-xid", "drained", str(10 + i)), cfg) == "sent"
            if i < 2:
                assert cli.undrain("n1")
                assert delivery.deliver(_rec("n1", "healthcheck", None, "undrained"), cfg) == "sent"
        store = Store.open(url=url)
        (s,) = wait_for(lambda: [x for x in store.nodes.summary(["n1"]) if x.lemon], 30,
                        what="lemon flag")
        assert s.lemon_reason == LEMON and s.burnin_required
        # The node is still drained for gpu-xid (ours): serve leaves that drain as it is.
        assert cluster.node("n1").reason == "slurmguard: gpu-xid: broken"
        # An admin's plain undrain: serve drains the lemon again, naming the policy.
        cluster.run("scontrol", "update", "nodename=n1", "state=undrain")
        t0 = time.monotonic()
        info = cluster.wait_node("n1", lambda n: n.drained, timeout=30, what="drained again")
        redrain = time.monotonic() - t0
        assert info.reason == LEMON, info
        ev = store.nodes.events(node="n1", kinds=["drain"])
        assert ev[0].reason == LEMON and ev[0].who == "slurmguard" and ev[0].details["via"] == "policy"
        # The nodes' own drains are in the ledger too (from the records' "applied").
        assert sum(1 for e in ev if e.reason == "slurmguard: gpu-xid: broken") == 3
        # An admin returns it on purpose (what `slurmguard resume --force` does): it stays up,
        # on probation with the sg_probation feature, until 3 passing jobs.
        sg = sg_env(SLURMGUARD_CONFIG=str(cfg_path), SLURM_CONF=cluster.env["SLURM_CONF"],
                    SUDO_USER="alice")
        p = run_sg("resume", "n1", env=sg)  # a plain resume of a lemon is refused
        assert p.returncode == 7 and "lemon" in (p.stdout + p.stderr), p
        assert cluster.node("n1").drained
        p = run_sg("resume", "n1", "--force", env=sg)
        assert p.returncode == 0, p
        info = cluster.wait_node("n1", lambda n: "sg_probation" in n.features, timeout=30,
                                 what="probation feature")
        assert not info.drained
        # Two policy passes (counted by serve, policy_interval = 1 s): no re-drain.
        counter_advanced(serve.policy_passes, by=2, timeout=30, what="policy passes")
        assert not cluster.node("n1").drained
        kinds = {(e.kind, e.who) for e in store.nodes.events(node="n1")}
        assert ("lemon_cleared", "admin:alice") in kinds and ("probation_start", "admin:alice") in kinds
        for j in range(3):
            assert delivery.deliver(_rec("n1", "epilog", None, "none", str(100 + j)), cfg) == "sent"
        cluster.wait_node("n1", lambda n: "sg_probation" not in n.features, timeout=30,
                          what="probation feature removed")
        (s,) = store.nodes.summary(["n1"])
        assert not s.probation and s.probation_passes == 3
        store.close()
        print(f"lemon re-drained {redrain:.1f} s after the admin's undrain")
    finally:
        serve.stop()


def test_twenty_nodes_failing_fs_mount_drain_at_most_the_cap(slurm_cluster_factory,
                                                             tmp_path: Path) -> None:
    cluster = slurm_cluster_factory(nodes=20, timeout=120)
    cli = cluster.cli()
    url = _store(tmp_path)
    port = new_port()
    # A permit that does not answer in report_timeout fails open (by design): on a loaded
    # 2-core CI machine 20 simultaneous permits can take seconds, so give them time here.
    # policy_interval 1 s: the full passes after the permits are what the end of the test counts.
    # second_look_delay 1 s: the nodes' second look (docs/policy.md) one round later.
    cfg_path = write_config(tmp_path, store_url=url, port=port, report_timeout=60.0,
                            serve_extra="policy_interval = 1.0",
                            extra="[policy]\nsecond_look_delay = 1.0\n")
    cfg = config.load(str(cfg_path), env={})
    serve = Serve(cfg_path, port, env={"SLURM_CONF": cluster.env["SLURM_CONF"]}).start()
    reason = "slurmguard: fs-mount: /shared is not mounted"
    try:
        def node_hook(node: str) -> str:
            # What the prolog does on a fs-mount failure: ask, drain if allowed, report.
            allowed, why = drain_permit(node, "fs-mount", reason, cfg)
            applied = "drained" if allowed and cli.drain(node, reason) else "refused by guard"
            delivery.deliver(_rec(node, "prolog", "fs-mount", applied), cfg)
            return applied if not allowed or why == "allowed" else f"{applied} ({why})"

        with ThreadPoolExecutor(20) as pool:  # all at once
            applied = list(pool.map(node_hook, cluster.nodes))
        drained = [(n.name, n.reason) for n in cli.nodes() if n.drained]
        assert len(drained) == 2 == applied.count("drained"), (drained, applied)
        store = Store.open(url=url)
        # The 18 others were held for a second look (2 drained for the cause just before),
        # not refused: no alert yet. Their next check, still failing, is the second look.
        assert len(store.nodes.events(kinds=["drain_held"])) == 18
        assert not store.nodes.events(kinds=["drain_refused"])
        assert [(a.cause, a.count) for a in store.nodes.alerts()] == [("fs-mount", 20)]
        time.sleep(1.0)
        spared = sorted(set(cluster.nodes) - {n for n, _ in drained})
        with ThreadPoolExecutor(18) as pool:
            again = list(pool.map(node_hook, spared))
        assert again.count("drained") == 0, again
        alerts = store.nodes.alerts()
        assert len(alerts) == 1, alerts
        (a,) = alerts
        assert a.cause == "fs-mount" and a.scope == "partition:gpu" and a.count == 20
        assert "fs-mount failing on" in a.message and "shared cause" in a.message
        assert len(store.nodes.events(kinds=["drain_refused"])) == 18
        # Later policy passes do not drain more for the same cause.
        counter_advanced(serve.policy_passes, by=2, timeout=30, what="policy passes")
        assert len([n for n in cli.nodes() if n.drained]) == 2
        store.close()
    finally:
        serve.stop()


def test_risk_probation_mark_puts_at_risk_nodes_last(slurm_cluster_factory, tmp_path: Path) -> None:
    """risk.probation_mark (docs/fleet.md): a node with three failure episodes this month gets
    the probation feature at serve's next policy pass; a healthy one does not."""
    cluster = slurm_cluster_factory(nodes=2)
    url = _store(tmp_path)
    store = Store.open(url=url)
    now = time.time()
    for days_ago in (20, 12, 5):  # three episodes: drain -> return, as the ledger records them
        at = now - days_ago * 86400
        store.nodes.record_event("n1", "drain", "slurmguard", "slurmguard: gpu-xid: Xid 79",
                           source="gpu-xid", at=at)
        store.nodes.record_event("n1", "clear", "admin:ops", "repaired", at=at + 3600)
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port)
    cfg_path.write_text(cfg_path.read_text().replace(
        "batch_interval = 0.05", "batch_interval = 0.05\npolicy_interval = 1.0")
        + "\n[risk]\nprobation_mark = true\n")
    cfg = config.load(str(cfg_path), env={})
    serve = Serve(cfg_path, port, env={"SLURM_CONF": cluster.env["SLURM_CONF"]}).start()
    try:
        for node in ("n1", "n2"):  # a record makes serve look at the node
            assert delivery.deliver(_rec(node, "healthcheck", None, "none"), cfg) == "sent"
        info = cluster.wait_node("n1", lambda n: "sg_probation" in n.features, timeout=30,
                                 what="probation feature on the at-risk node")
        assert not info.drained  # a mark, never a drain
        time.sleep(2.5)  # two more policy passes
        assert "sg_probation" not in cluster.node("n2").features
        (s,) = store.nodes.summary(["n1"])
        assert not s.probation  # the store's probation is untouched: the mark is risk's
    finally:
        serve.stop()
        store.close()
