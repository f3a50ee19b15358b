"""Slow node -> suspect, on the real cluster: a node that makes a job's steps slow (the test job
sleeps longer there) is named by the wrapper, reported to serve as a `suspect` event with the
evidence, and once K jobs named it, `burnin submit` queues it first. Never drained by a job's
word: the node stays in service until burn-in decides, and here its burn-in (a site benchmark
that is slow on that node, tests/support/burninsite.py) drains it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.drain_notice import Job, Setup, sg
from support.sgserve import TOKEN
from support.wait import wait_for

from slurmguard.store import Store

pytestmark = pytest.mark.slurm
K = 2
# The burn-in jobs import the site benchmark from tests/; it is slow on n2 only.
BURNIN_ENV = {"PYTHONPATH": f"{Path(__file__).parent}:{Path(__file__).parents[1]}",
              "FAKE_SLOW_NODE": "n2"}


def test_slow_node_in_k_jobs_is_queued_first_for_burnin(slurm_cluster_factory: Any,
                                                        tmp_path: Path) -> None:
    token = tmp_path / "job-token"
    token.write_text("job-token-0123456789abcdef\n")
    token.chmod(0o644)  # jobs read it: it lets them report slow nodes, nothing else
    s = Setup(slurm_cluster_factory, tmp_path, notice=(
        f'interval = 0.5\njob_token_file = "{token}"\nsuspect_jobs = {K}\n'
        '[burnin]\nsite_modules = ["support.burninsite"]\nmeasurements = ["site-node"]\n'
        'checks = []\ngroup_by = "none"\nmin_group = 3\ntime_limit = "5"\n'
        'wait_timeout = 120.0\n'))
    slow = ""
    try:
        for i in range(K):
            job = Job(s, f"job{i}", steps=12, every=1000, sleep=0.1, wrapper="--no-drain-notice",
                      train="--no-barrier --slow-node n2 --slow-sleep 0.4")
            job.submit()
            job.finish(timeout=120)
            [run] = job.runs()
            assert run["slow_nodes"] == ["n2"], job.output()
            slow = job.output()
            store = Store.open(url=_store_url(s))
            events = store.nodes.events(kinds=("suspect",))
            store.close()
            assert len(events) == i + 1
            ev = events[0]
            assert ev.node == "n2" and ev.details["job"] == job.jid
            assert ev.details["ratio"] > 1.5 and ev.details["ranks"] == [1]
            assert s.c.node("n2").drained is False  # a suspect is never drained by a job
        # One job's word is not enough (checked after the first), K jobs' is.
        from slurmguard import config
        from slurmguard.policy.suspect import from_store, suspects

        assert suspects(events[1:], {}, jobs=K, window=3600, now=time.time()) == {}
        assert list(suspects(events, {}, jobs=K, window=3600, now=time.time())) == ["n2"]
        r = sg(s, "burnin", "submit", "--idle", "--wait", "--json", env=BURNIN_ENV)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)["submitted"]
        assert [d["node"] for d in got] == ["n2", "n1", "n3"]  # first in the queue, said why
        assert got[0]["note"] == "suspect: named slow by several jobs"
        # Burn-in decides: it measured n2 slow too, and drains it (the others stay).
        r = sg(s, "burnin", "report", "--apply", "--json", env=BURNIN_ENV)
        assert r.returncode in (0, 3), r.stderr
        assert s.c.node("n2").drained and s.c.node("n2").reason.startswith("slurmguard: burnin:")
        assert not s.c.node("n1").drained and not s.c.node("n3").drained
        # Its burn-in answers this evidence: it does not put the node first again.
        store = Store.open(url=_store_url(s))
        assert from_store(store, config.load(str(s.cfg), env={}), time.time()) == {}
        store.close()
    finally:
        s.stop()
    assert "slow node(s): n2" in slow


def _store_url(s: Setup) -> str:
    from slurmguard import config

    return str(config.load(str(s.cfg), env={})["store.url"])


def test_suspect_refuses_forged_or_malformed_reports(slurm_cluster_factory: Any,
                                                     tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    token = tmp_path / "job-token"
    token.write_text("job-token-0123456789abcdef\n")
    token.chmod(0o644)
    s = Setup(slurm_cluster_factory, tmp_path, notice=f'job_token_file = "{token}"\n')

    def post(path: str, body: object, tok: str) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(s.serve.url + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {tok}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    # A job may name only nodes of its own allocation, read from Slurm (docs/security.md).
    job = s.c.sbatch("#!/bin/sh\nsleep 300\n", "-w", "n2", "-N", "1")
    s.c.wait_job(job, ("RUNNING",), timeout=60)
    good = {"job": job, "job_median_step_s": 0.1,
            "nodes": [{"node": "n2", "median_step_s": 0.5, "ratio": 5.0, "ranks": [1]}]}
    job_tok = "job-token-0123456789abcdef"
    try:
        assert post("/suspect", good, "wrong-token-0123456789") == (401, {
            "error": "missing or wrong token"})
        # The job token is good for /suspect only: never for ingest (results drain nodes).
        assert post("/ingest", {"records": []}, job_tok)[0] == 401
        for bad, field in [({**good, "job": "7; rm"}, "job"),
                           ({**good, "nodes": [{**good["nodes"][0], "node": "../x"}]}, "nodes[0].node"),
                           ({**good, "nodes": [{**good["nodes"][0], "ratio": 0.5}]}, "nodes[0].ratio"),
                           ({**good, "nodes": []}, "nodes")]:
            code, ans = post("/suspect", bad, job_tok)
            assert code == 400 and ans["error"].startswith(field), ans
        code, ans = post("/suspect", {**good, "nodes": [{**good["nodes"][0], "node": "n1"}]}, job_tok)
        assert code == 403 and ans["error"].startswith("refused (outside-job)"), ans
        code, ans = post("/suspect", {**good, "job": "999999"}, job_tok)
        assert code == 403 and ans["error"].startswith("refused (unknown-job)"), ans
        assert post("/suspect", good, job_tok) == (200, {"recorded": ["n2"], "duplicate": []})
        assert post("/suspect", good, job_tok) == (200, {"recorded": [], "duplicate": ["n2"]})
        # GET /drains shows node state only to a credential: none is refused; the job token
        # reads its job's nodes only; the serve token (admins) reads any. Bad input is one line.
        def get(q: str, tok: str | None) -> tuple[int, dict[str, Any]]:
            req = urllib.request.Request(f"{s.serve.url}/drains?{q}", headers=(
                {"Authorization": f"Bearer {tok}"} if tok else {}))
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        assert get("nodes=n[1-3]&since=0", None)[0] == 401
        assert get("nodes=n[1-3]&since=0", "not-the-token-0123456789")[0] == 401
        code, ans = get("nodes=n[1-3]&since=0", job_tok)
        assert code == 403 and ans["error"].startswith("refused (unknown-job)"), ans
        code, ans = get(f"nodes=n[1-3]&since=0&job={job}", job_tok)
        assert code == 403 and ans["error"].startswith("refused (outside-job)"), ans
        code, ans = get(f"nodes=n2&since=0&job={job}", job_tok)
        assert code == 200 and ans["complete"] is True, ans
        for q, want in [("nodes=n[1-", "nodes:"), ("nodes=n1&since=soon", "since:")]:
            code, ans = get(q, TOKEN)
            assert code == 400 and ans["error"].startswith(want), ans
        s.c.run("scontrol", "update", "nodename=n3", "state=drain", "reason=maintenance")

        def drains() -> dict[str, Any] | None:  # serve's view is at most a ttl old (serve.md)
            ans = get("nodes=n[1-3]&since=0", TOKEN)[1]
            return ans if ans["drains"] else None

        ans = wait_for(drains, 30, what="n3's drain in /drains")
        assert ans["complete"] is True
        assert [(d["node"], d["reason"]) for d in ans["drains"]] == [("n3", "maintenance")]
    finally:
        s.stop()
