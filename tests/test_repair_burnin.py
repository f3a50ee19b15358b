"""Verification's quick burn-in judged as the nightly report judges (slurmguard/repair/burnin.py):
against the node's peers' latest runs of the week, with the burn-in threshold; its verdict is
written to the run and a `burnin` result record, so the nightly report does not judge it again.
A real SQLite store, no Slurm (the cluster tests submit the real job:
test_repair_verify_cluster.py)."""

from __future__ import annotations

import time

import pytest
from support.sgserve import new_store

from slurmguard import config
from slurmguard.burnin.values import BurninValue
from slurmguard.repair import burnin
from slurmguard.store import Store

PEERS = [f"n{i}" for i in range(1, 7)]


@pytest.fixture
def bed(tmp_path):
    url = new_store(tmp_path)
    cfg_path = tmp_path / "sg.toml"
    cfg_path.write_text(f'[store]\nurl = "{url}"\n')
    return config.load(str(cfg_path), env={}), Store.open(url=url)


def _run(store, node: str, seconds: float, at: float, status: str = "complete",
         reason: str = "") -> int:
    rid = store.burnin.submitted(node, job_id=f"{node}-{at}", level="quick", night="2026-12-03",
                                 reservation="sg_repair_n1" if node == "n1" else "", at=at)
    store.burnin.started(node, job_id=f"{node}-{at}", group_key="8x H100", at=at)
    store.burnin.record(rid, [BurninValue("site-value", "ok", "site_seconds", seconds, "s",
                                          higher_is_better=False)], at=at)
    store.burnin.finish(rid, status, reason, at=at + 60)
    return rid


@pytest.mark.parametrize("seconds,status,want", [
    (10.1, "complete", "pass"),  # within its peers: verified
    (50.0, "complete", "flagged"),  # 0.2 of its peers' speed on the site benchmark
    (10.0, "failed", "failed"),  # a hard failure under load
])
def test_the_quick_burn_in_is_judged_against_its_peers_and_recorded(bed, seconds, status, want):
    cfg, store = bed
    now = time.time()
    for i, n in enumerate(PEERS[1:]):  # the peers' nightly runs of this week
        _run(store, n, 10.0 + 0.05 * i, now - 86400)
    submitted = now - 120
    rid = _run(store, "n1", seconds, submitted, status,
               "site-value: GPU lost under load" if status == "failed" else "")
    got = burnin.judge(cfg, store, None, "n1", submitted - 1, PEERS, now)
    assert got.verdict == want, got
    assert got.run.id == rid
    burnin.settle(store, "n1", got, now)
    (run,) = store.burnin.latest_runs(now - 3600, ["n1"])
    assert run.verdict == want  # the nightly report leaves a judged run alone
    (rec,) = [r for r in store.nodes.history("n1", limit=10) if r.kind == "result"]
    assert rec.health == ("healthy" if want == "pass" else "unhealthy")


def test_a_run_of_a_node_without_peers_has_no_verdict_and_passes(bed):
    cfg, store = bed
    now = time.time()
    _run(store, "n1", 10.0, now - 120)
    got = burnin.judge(cfg, store, None, "n1", now - 121, ["n1"], now)
    assert got.verdict == "no_verdict"  # what the nightly report returns an awaiting node on
