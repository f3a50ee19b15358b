"""The gate refuses at-risk nodes to large jobs without draining them (risk.gate_max_nodes,
docs/fleet.md "Uses"): the decision (tables, Hypothesis), the stored scores serve writes, the
ledger the watcher reads, a slurmguard fault that never refuses, the gate's cheap path, and
a real slurmctld running the gate with the requeue watcher."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.gatehook import gate_cluster, gate_heavy_imports, watcher_expedited
from support.helpers import sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)
from support.sgserve import new_store

from slurmguard import config
from slurmguard.errors import EXIT_OK
from slurmguard.fleet.uses import RISK_FRESH_S, RISK_REFUSALS_MAX, at_risk, risk_refusal, risk_room
from slurmguard.gate import answer as gate
from slurmguard.store import Store

NOW = 1_800_000_000.0
JOB3 = ["n1", "n2", "n3"]


def _refused(nodes, scores, max_nodes=2, level=40.0):
    return sorted(risk_refusal(nodes, scores, max_nodes=max_nodes, level=level, now=NOW))


@pytest.mark.parametrize("nodes, scores, max_nodes, expected", [
    (JOB3, {"n1": (60.0, NOW - 10)}, 2, ["n1"]),
    (JOB3, {"n1": (60.0, NOW - 10)}, 0, []),  # 0: off
    (JOB3, {"n1": (60.0, NOW - 10)}, 3, []),  # a job of at most max_nodes: never refused
    (["n1", "n2"], {"n1": (60.0, NOW - 10)}, 2, []),
    (JOB3, {"n1": (40.0, NOW - 10)}, 2, ["n1"]),  # at the level counts
    (JOB3, {"n1": (39.9, NOW - 10)}, 2, []),
    (JOB3, {"n1": (60.0, NOW - RISK_FRESH_S - 1)}, 2, []),  # stale: serve stopped scoring
    (JOB3, {"n1": (None, None)}, 2, []),  # never scored
    (JOB3, {}, 2, []),  # unknown to the store
    (JOB3, {"n1": (60.0, NOW), "n3": (90.0, NOW), "n9": (90.0, NOW)}, 2, ["n1", "n3"]),
])
def test_risk_refusal_table(nodes, scores, max_nodes, expected) -> None:
    assert _refused(nodes, scores, max_nodes) == expected


def test_risk_refusal_reason_names_score_level_and_size() -> None:
    (why,) = risk_refusal(JOB3, {"n2": (55.0, NOW)}, max_nodes=2, level=40.0, now=NOW).values()
    assert why == ("slurmguard: risk: score 55 >= risk.level 40; job of 3 nodes > "
                   "risk.gate_max_nodes 2 (not drained)")


@pytest.mark.parametrize("size, pools, prior, expected", [
    (3, {"gpu": {"n2", "n3", "n4"}}, 0, None),
    (3, {"gpu": {"n2", "n3", "n4"}}, RISK_REFUSALS_MAX - 1, None),
    (3, {"gpu": {"n2", "n3", "n4"}}, RISK_REFUSALS_MAX, "already refused 2 times"),
    (3, {"gpu": {"n2", "n3"}}, 0, "partition gpu has 2 nodes up and not at risk, the job needs 3"),
    # every partition that could be the job's must have room
    (3, {"gpu": {"n2", "n3", "n4"}, "small": {"n2"}}, 0, "partition small has 1 nodes"),
    (3, {}, 0, "no partition holds every node"),
])
def test_risk_room_table(size, pools, prior, expected) -> None:
    why = risk_room(size, pools, prior=prior)
    assert why == expected if expected is None else expected in why


_names = st.sampled_from([f"n{i}" for i in range(1, 9)])
_score = st.tuples(st.one_of(st.none(), st.floats(0, 100)),
                   st.one_of(st.none(), st.floats(NOW - 2 * RISK_FRESH_S, NOW)))


@given(st.lists(_names, min_size=1, max_size=8), st.dictionaries(_names, _score),
       st.integers(0, 9), st.floats(0, 100))
def test_risk_refusal_refuses_only_fresh_at_risk_nodes_of_large_jobs(nodes, scores, max_nodes,
                                                                     level) -> None:
    refused = risk_refusal(nodes, scores, max_nodes=max_nodes, level=level, now=NOW)
    assert set(refused) <= set(nodes)
    if max_nodes == 0 or len(set(nodes)) <= max_nodes:
        assert refused == {}
    else:
        assert set(refused) == at_risk({n: scores[n] for n in set(nodes) if n in scores},
                                       level=level, now=NOW)
    for n in refused:
        score, at = scores[n]
        assert score is not None and score >= level and NOW - at <= RISK_FRESH_S


@given(st.integers(1, 8), st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                          st.sets(_names)), st.integers(0, 5))
def test_risk_room_never_strands_a_job_and_bounds_refusals(size, pools, prior) -> None:
    why = risk_room(size, pools, prior=prior)
    if why is None:  # refusing: room in every candidate partition, and under the bound
        assert pools and all(len(p) >= size for p in pools.values())
        assert prior < RISK_REFUSALS_MAX
    assert prior < RISK_REFUSALS_MAX or why is not None


# -- the store: scores serve writes, refusals the gate ledgers -------------------------------

def _three_episodes(store: Store, node: str, now: float) -> None:
    for days_ago in (20, 12, 5):  # three failure episodes this month: score 45 >= level 40
        at = now - days_ago * 86400
        store.nodes.record_event(node, "drain", "slurmguard", "slurmguard: gpu-xid: Xid 79",
                                 source="gpu-xid", at=at)
        store.nodes.record_event(node, "clear", "admin:ops", "repaired", at=at + 3600)


def _cfg(tmp_path: Path, url: str, extra: str = "", max_nodes: int = 2) -> Path:
    p = tmp_path / "sg.toml"
    p.write_text(f'[store]\nurl = "{url}"\n[gate]\ndrain = false\n'
                 f'[slurm]\nscontrol = "{tmp_path}/no-scontrol"\n'
                 f'[risk]\ngate_max_nodes = {max_nodes}\n{extra}')
    return p


def test_serve_policy_pass_stores_scores_for_the_gate(tmp_path: Path) -> None:
    from slurmguard.serve.fleet import Fleet

    url = new_store(tmp_path)
    store = Store.open(url=url)
    now = time.time()
    _three_episodes(store, "n1", now)
    store.nodes.set_flags("n2", probation=False)  # known, nothing against it
    cfg = config.load(str(_cfg(tmp_path, url)), env={})
    Fleet(cfg, store).evaluate(["n1", "n2"])  # Slurm unreachable: still scores
    got = {r[0]: r[1:] for r in store.nodes.columns(["n1", "n2"], ("name", "risk_score", "risk_at"))}
    assert got["n1"][0] == 45.0 and got["n2"][0] == 0.0
    assert all(now - 1 <= at <= time.time() for _, at in got.values())
    store.close()


def test_serve_stores_no_scores_when_the_use_is_off(tmp_path: Path) -> None:
    from slurmguard.serve.fleet import Fleet

    url = new_store(tmp_path)
    store = Store.open(url=url)
    _three_episodes(store, "n1", time.time())
    cfg = config.load(str(_cfg(tmp_path, url, max_nodes=0)), env={})
    Fleet(cfg, store).evaluate(["n1"])
    assert store.nodes.columns(["n1"], ("risk_score", "risk_at")) == [(None, None)]
    store.close()


@pytest.mark.postgres
def test_risk_refusals_read_back_job_nodes_and_rounds(store_url: str) -> None:  # noqa: F811
    store = Store.open(url=store_url)
    for node, job, rnd in (("n1", "7", 1), ("n3", "7", 2), ("n1", "8", 1)):
        store.nodes.record_event(node, "risk_refused", "slurmguard", "slurmguard: risk: x",
                                 source="risk", at=NOW, details={"job": job, "round": rnd})
    store.nodes.record_event("n2", "risk_refused", "slurmguard", "old", source="risk",
                             at=NOW - 90000, details={"job": "7", "round": 1})
    assert store.nodes.risk_refusals(NOW - 86400) == {"7": {"n1": 1, "n3": 2}, "8": {"n1": 1}}
    assert store.nodes.set_risk({"n1": 60.0, "zz": 99.0}, NOW) == 1  # unknown nodes: no row made
    assert store.nodes.columns(["n1", "zz"], ("name", "risk_score")) == [("n1", 60.0)]
    store.close()


# -- the gate: a slurmguard fault never refuses; the cheap path stays cheap ------------------

def _scored_store(tmp_path: Path) -> str:
    url = new_store(tmp_path)
    store = Store.open(url=url)
    for n in ("n1", "n2"):
        store.nodes.set_flags(n, probation=False)  # the rows serve's scores go into
    assert store.nodes.set_risk({"n1": 60.0, "n2": 0.0}, time.time()) == 2
    store.close()
    return url


def test_gate_keeps_the_node_when_slurm_is_unreachable(tmp_path: Path) -> None:
    url = _scored_store(tmp_path)
    cfg = config.load(str(_cfg(tmp_path, url)), env={})
    env = {"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "n[1-3]"}
    o = gate.run_gate(cfg, env)
    assert o.code == EXIT_OK and not o.refused and not o.drained
    assert "job 41: at-risk n1 kept: not refused (a slurmguard fault never refuses)" in o.message
    assert Store.open(url=url).nodes.risk_refusals(0) == {}  # nothing ledgered
    # a small job is not even looked at
    assert gate.run_gate(cfg, {**env, "SLURM_JOB_NODELIST": "n[1-2]"}).message == ""


def test_gate_risk_check_off_the_refusal_path_imports_no_sqlalchemy(tmp_path: Path) -> None:
    url = _scored_store(tmp_path)
    cfg = _cfg(tmp_path, url)
    assert gate_heavy_imports(cfg, {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[2-4]"}) == (0, [])


# -- a real slurmctld: the gate as PrologSlurmctld, the requeue watcher, no drain ------------

def _gate_cluster(factory, tmp_path: Path) -> tuple[object, str, Path, dict[str, str]]:
    """A 4-node cluster whose PrologSlurmctld is the gate, n1 at risk (60) in the store,
    risk.gate_max_nodes = 2: (cluster, store url, config path, env for slurmguard)."""


    url = new_store(tmp_path)
    store = Store.open(url=url)
    for n in ("n1", "n2", "n3", "n4"):
        store.nodes.set_flags(n, probation=False)
    store.nodes.set_risk({"n1": 60.0, "n2": 0.0, "n3": 0.0, "n4": 0.0}, time.time())
    store.close()
    cfg = tmp_path / "sg.toml"
    (tmp_path / "textfile").mkdir()
    cfg.write_text(f'[store]\nurl = "{url}"\n[gate]\nlog_file = "{tmp_path}/gate.log"\n'
                   f'[metrics]\ntextfile_dir = "{tmp_path}/textfile"\n'
                   f'[requeue]\nstate_file = "{tmp_path}/w.json"\n[risk]\ngate_max_nodes = 2\n')
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    cluster = gate_cluster(factory, tmp_path, cfg, nodes=4)
    env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    return cluster, url, cfg, env


@pytest.mark.slurm
def test_real_cluster_large_job_is_moved_off_an_at_risk_node_small_job_runs_on_it(
        slurm_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    from support.wait import wait_for

    cluster, url, cfg, env = _gate_cluster(slurm_cluster_factory, tmp_path)
    job = cluster.sbatch("#!/bin/sh\necho ran on $SLURM_JOB_NODELIST\n", "-N3")  # n[1-3] first
    events: list[dict] = []
    wait_for(watcher_expedited(env, events), 90, interval=0.3, what="the watcher to move the refused job")
    (exp,) = [e for e in events if e["event"] == "requeue-expedite"]
    assert exp["failed_nodes"] == ["n1"] and exp["exclude"] == "n1", events
    done = cluster.wait_job(job, ["COMPLETED"], timeout=60)
    assert done["ExcNodeList"] == "n1" and done["NodeList"] == "n[2-4]"
    (ev,) = Store.open(url=url).nodes.events(kinds=["risk_refused"])
    assert ev.node == "n1" and ev.details["job"] == job and ev.details["round"] == 1
    moved = time.time() - ev.at
    assert moved < 60, f"refusal to completion on other nodes took {moved:.1f}s"
    info = cluster.node("n1")
    assert not info.drained and not Store.open(url=url).nodes.events(kinds=["drain"])
    assert f"job {job}: refused 1 of 3 nodes for node risk, none drained" in \
        (tmp_path / "gate.log").read_text()
    prom = (tmp_path / "textfile" / "slurmguard_gate.prom").read_text()
    assert 'slurmguard_gate_refusals_total{cause="risk"} 1\n' in prom
    assert "slurmguard_drains_total{" not in prom
    small = cluster.sbatch("#!/bin/sh\necho small on $SLURM_JOB_NODELIST\n", "-N1", "-w", "n1")
    assert cluster.wait_job(small, ["COMPLETED"], timeout=60)["NodeList"] == "n1"
    # A 4-node job needs n1: refusing would leave it no way to run, so it runs there.
    whole = cluster.sbatch("#!/bin/sh\necho whole on $SLURM_JOB_NODELIST\n", "-N4")
    assert cluster.wait_job(whole, ["COMPLETED"], timeout=60)["NodeList"] == "n[1-4]"
    assert f"job {whole}: at-risk n1 kept: partition gpu has 3 nodes up and not at risk, the " \
        "job needs 4" in (tmp_path / "gate.log").read_text()
    assert len(Store.open(url=url).nodes.events(kinds=["risk_refused"])) == 1
    # --dry-run: the refusal is reported, nothing ledgered; and what the refusal path costs
    from slurmguard.errors import EXIT_UNHEALTHY

    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    c = config.load(str(cfg), env={})
    took = {}
    for nl in ("n[1-3]", "n[2-4]"):
        t0 = time.perf_counter()
        o = gate.run_gate(c, {"SLURM_JOB_ID": "999", "SLURM_JOB_NODELIST": nl}, dry_run=True)
        took[nl] = time.perf_counter() - t0
        assert o.code == (EXIT_UNHEALTHY if nl == "n[1-3]" else EXIT_OK) and not o.drained
    assert len(Store.open(url=url).nodes.events(kinds=["risk_refused"])) == 1
    print(f"risk refusal -> job completed elsewhere: {moved:.1f}s; gate refusal path "
          f"{took['n[1-3]'] * 1e3:.0f} ms, allowed {took['n[2-4]'] * 1e3:.1f} ms")
