"""Each node speaks only for itself, on a real Slurm cluster (docs/security.md).

Three nodes with their own loopback addresses (NodeAddr 127.0.0.2-4), a munged per node
stamping that address into its credentials (support/mungenode.py), and a real `slurmguard
serve` in its default mode (serve.auth = munge) reading Slurm's node and job tables. Each
hostile write is refused with one line, counted, and changes nothing in the store or in
Slurm; the same writes for the sender's own node go through.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from support import mungenode
from support.helpers import require, run_sg, sg_env
from support.reliability import record
from support.sgserve import TOKEN, Serve, new_port, new_store, write_config
from support.wait import wait_for

from slurmguard.adapters.serve_client import munge_signer, post_json
from slurmguard.contract import CheckResult, Health
from slurmguard.job import notice
from slurmguard.node.record import make_record
from slurmguard.serve.identity import body_digest
from slurmguard.store.api import Store

pytestmark = pytest.mark.slurm

ADDRS = {"n1": "127.0.0.2", "n2": "127.0.0.3", "n3": "127.0.0.4"}
XID = "slurmguard: gpu-xid: Xid 79 on GPU 3 (fell off the bus)"


def _rec(node: str, healthy: bool) -> dict[str, Any]:
    res = CheckResult("gpu-xid", Health.HEALTHY if healthy else Health.UNHEALTHY,
                      "" if healthy else "Xid 79 on GPU 3")
    return make_record(node, "healthcheck", [res], "pass" if healthy else "drain",
                       "" if healthy else XID)


def _body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Client:
    """Posts as root on a node would: from that node's address (n1's unless told)."""

    def __init__(self, port: int, sockets: dict[str, str]) -> None:
        self.port, self.sockets = port, sockets

    def sign(self, node: str, body: bytes) -> str:
        return munge_signer(self.sockets[node])(body)

    def post(self, path: str, body: bytes, auth: str,
             source: str = ADDRS["n1"]) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20,
                                          source_address=(source, 0))
        try:
            conn.request("POST", path, body=body, headers={"Authorization": auth,
                                                           "Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()


def _as_nobody(sock: str, body: bytes) -> str:
    """A credential minted by uid 65534 through the node's munged (a user on that node)."""
    out = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          "/usr/bin/munge", "--socket", sock, "--string", body_digest(body)],
                         capture_output=True, text=True, timeout=20, check=True)
    return "MUNGE " + out.stdout.strip()


def test_a_node_writes_only_for_itself(slurm_cluster_factory: Any, tmp_path: Path) -> None:
    require(mungenode.usable(), "munged and a readable munge.key (run as root)")
    c = slurm_cluster_factory(nodes=3, node_addrs=ADDRS)
    # Outside pytest's 0700 tmp dir: a user on the node must reach its munged's socket.
    mdir = Path(tempfile.mkdtemp(prefix="sg-munge-"))
    mdir.chmod(0o755)
    mungeds = {n: mungenode.NodeMunged(mdir, n, ADDRS[n]) for n in ADDRS}
    # Root on n1 runs a munged of its own with the site's key, stamping n2's address.
    mungeds["rogue"] = mungenode.NodeMunged(mdir, "rogue", ADDRS["n2"])
    for m in mungeds.values():
        m.start()
    port = new_port()
    url = new_store(tmp_path)
    cfg = write_config(tmp_path, store_url=url, port=port, auth="munge",
                       serve_extra="policy_interval = 1.0")
    srv = Serve(cfg, port, env={"SLURM_CONF": str(c.conf_path)}).start()
    store = Store.open(url=url)
    tried: list[str] = []
    try:
        cl = Client(port, {n: m.socket for n, m in mungeds.items()})

        def refused(what: str, path: str, body: bytes, auth: str, code: int, reason: str,
                    source: str = ADDRS["n1"]) -> None:
            status, answer = cl.post(path, body, auth, source)
            assert status == code and f"({reason})" in answer["error"], (what, status, answer)
            assert "\n" not in answer["error"]
            tried.append(f"{what}: {status} {answer['error'][:70]}")

        # The sender's own writes go through (and show the mode works at all).
        own = _body({"records": [_rec("n1", True)]})
        own_auth = cl.sign("n1", own)
        status, answer = cl.post("/ingest", own, own_auth)
        assert status == 200 and len(answer["stored"]) == 1, answer
        before = store.counts()

        # n1 writes n2's failing record, then its healthy one.
        for healthy in (False, True):
            body = _body({"records": [_rec("n2", healthy)]})
            refused(f"n1 posts n2's {'healthy' if healthy else 'failing'} record", "/ingest",
                    body, cl.sign("n1", body), 403, "other-node")
        # The attack: a credential from the rogue munged says "n2" over n2's failing
        # gpu-lost record, POSTed from n1's own address.
        lost = CheckResult("gpu-lost", Health.UNHEALTHY, "GPU 3 fell off the bus")
        body = _body({"records": [make_record("n2", "healthcheck", [lost], "drain",
                                              "slurmguard: gpu-lost: GPU 3 fell off the bus")]})
        refused("root on n1 forges n2's origin over n2's gpu-lost record", "/ingest", body,
                cl.sign("rogue", body), 403, "wrong-peer")
        refused("n1's credential sent from another host (127.0.0.1)", "/ingest", own,
                cl.sign("n1", own), 403, "wrong-peer", source="127.0.0.1")
        # One of its own and one of n2's in one request: the whole request is refused.
        body = _body({"records": [_rec("n1", True), _rec("n2", False)]})
        refused("n1's record with n2's in one request", "/ingest", body, cl.sign("n1", body),
                403, "other-node")
        refused("the stored request replayed byte for byte", "/ingest", own, own_auth, 403, "replayed")
        swapped = _body({"records": [_rec("n1", False)]})
        fresh = _body({"records": [_rec("n1", True)]})
        refused("a body swapped under n1's valid credential", "/ingest", swapped,
                cl.sign("n1", fresh), 403, "body-mismatch")
        body = _body({"records": [_rec("n1", True)]})
        refused("a user (uid 65534) on n1", "/ingest", body, _as_nobody(mungeds["n1"].socket, body),
                403, "wrong-uid")
        refused("the shared token sniffed and reused from n2", "/ingest", body, f"Bearer {TOKEN}",
                401, "missing")
        body = _body({"node": "n2", "check": "gpu-xid", "reason": XID})
        refused("n1 asks a drain permit for n2", "/permit", body, cl.sign("n1", body), 403,
                "other-node")
        body = _body({"node": "n2"})
        refused("n1 asks for n2's state", "/nodestate", body, cl.sign("n1", body), 403,
                "other-node")
        # A job on n1 names n2 (outside its allocation) as slow.
        job = c.sbatch("#!/bin/sh\nsleep 120\n", "-w", "n1", "-N", "1")
        c.wait_job(job, ("RUNNING",), timeout=60)
        time.sleep(2.5)  # serve's job table is read at most every 2 s
        suspect = {"job": job, "job_median_step_s": 1.0,
                   "nodes": [{"node": "n2", "median_step_s": 2.0, "ratio": 2.0, "ranks": [1]}]}
        body = _body(suspect)
        refused("job on n1 names n2 as slow", "/suspect", body, cl.sign("n1", body), 403,
                "outside-job")
        # Nothing of that reached the store or Slurm.
        after = store.counts()
        assert {k: v for k, v in after.items() if k != "events"} == \
            {k: v for k, v in before.items() if k != "events"}
        assert store.nodes.events(node="n2") == []
        assert not c.node("n2").drained and c.node("n2").state == "idle"
        kinds = {e.kind for e in store.nodes.events(node="n1")}
        assert kinds == {"security"}, kinds

        # The same writes for the sender's own node stand.
        body = _body({"node": "n1", "check": "gpu-xid", "reason": XID})
        status, answer = cl.post("/permit", body, cl.sign("n1", body))
        assert status == 200 and answer["allow"] is True, answer
        body = _body({"node": "n1"})
        status, answer = cl.post("/nodestate", body, cl.sign("n1", body))
        assert status == 200 and answer["node"]["name"] == "n1", answer
        assert "DRAIN" not in answer["node"]["flags"] and not answer["node"]["reason"], answer
        suspect["nodes"][0]["node"] = "n1"
        body = _body(suspect)
        status, answer = cl.post("/suspect", body, cl.sign("n1", body))
        assert status == 200 and answer["recorded"] == ["n1"], answer

        # A flood of refusals: each counted, the ledger one row per (sender, reason) a minute.
        flood = 40
        for _ in range(flood):
            body = _body({"records": [_rec("n2", False)]})
            assert cl.post("/ingest", body, cl.sign("n1", body))[0] == 403
        want = {"other-node": 1, "replayed": 1, "body-mismatch": 1, "wrong-uid": 1,
                "outside-job": 1, "wrong-peer": 1}

        def by_reason() -> dict[str, int]:
            out: dict[str, int] = {}
            for e in store.nodes.events(node="n1", kinds=("security",)):
                out[e.details["reason"]] = out.get(e.details["reason"], 0) + 1
            return out
        # Refusals from the head are written by serve's ledger thread, a moment later.
        wait_for(lambda: by_reason() == want, 10, what=f"ledger rows {want}, have {by_reason()}")
        assert srv.metric("slurmguard_auth_refusals_total", reason="other-node") == flood + 5
        assert srv.metric("slurmguard_auth_refusals_total", reason="missing") == 1
        assert srv.metric("slurmguard_auth_refusals_total", reason="wrong-peer") == 2
        assert store.nodes.events(node="n2", kinds=("security",)) == []
        assert not c.node("n2").drained and store.nodes.events(node="n2") == []
        c.run("scancel", job)

        # Every node's honest writes, through the nodes' own client (which sends from its
        # munged's origin address): records, permits, and a job's suspects.
        job = c.sbatch("#!/bin/sh\nsleep 120\n", "-w", "n2,n3", "-N", "2")
        c.wait_job(job, ("RUNNING",), timeout=60)
        time.sleep(2.5)
        url = f"http://127.0.0.1:{port}"
        for node in ADDRS:
            signer = munge_signer(mungeds[node].socket)
            assert signer.source_address() == ADDRS[node]
            answer = post_json(f"{url}/ingest", signer, {"records": [_rec(node, True)]}, 20)
            assert len(answer["stored"]) == 1, (node, answer)
            # Answered by the guard (n1 holds the one slot of the hour): a 403 would raise.
            answer = post_json(f"{url}/permit", signer,
                               {"node": node, "check": "gpu-xid", "reason": XID}, 20)
            assert answer["allow"] is (node == "n1") and "refused" not in str(answer), answer
            if node != "n1":
                report = dict(suspect, job=job, nodes=[dict(suspect["nodes"][0], node=node)])
                answer = post_json(f"{url}/suspect", signer, report, 20)
                assert answer["recorded"] == [node], (node, answer)
        # Node state is shown only to a credential (the wrapper's own client, notice.py): the
        # job reads its nodes from a node of the job; root on n1 reads n1, not the job's.
        nodes, since = ["n2", "n3"], time.time() - 600
        signer = {n: munge_signer(mungeds[n].socket) for n in ADDRS}
        assert notice.serve_asker(url, 20, auth=signer["n2"], job=job)(nodes, since) == []
        assert notice.serve_asker(url, 20, auth=signer["n1"])(["n1"], since) == []
        for what, ask, reason in (
                ("no credential", notice.serve_asker(url, 20, job=job), "401"),
                ("root on n1 reads the job's nodes", notice.serve_asker(
                    url, 20, auth=signer["n1"], job=job), "403"),
                ("root on n1 reads n2's", notice.serve_asker(url, 20, auth=signer["n1"]), "403")):
            with pytest.raises(notice.AskError, match=f"serve answered {reason}"):
                ask(nodes, since)
            tried.append(f"/drains, {what}: {reason}")
        body = _body(dict(suspect, job=job, nodes=[dict(suspect["nodes"][0], node="n2")]))
        status, answer = cl.post("/suspect", body, cl.sign("n1", body))
        assert status == 403 and "(not-job-node)" in answer["error"], answer
        tried.append(f"root on n1 reports n2 slow in a job on n2,n3: {answer['error'][:60]}")
        assert srv.metric("slurmguard_auth_refusals_total", reason="not-job-node") == 2
        c.run("scancel", job)

        # doctor on a node: its munged's origin must be one of this host's NodeAddr.
        env = sg_env(SLURM_CONF=str(c.conf_path))
        for sock, status in (("", "FAIL"), (mungeds["n1"].socket, "pass")):
            d = tmp_path / f"doctor{status}"
            d.mkdir()
            ncfg = write_config(d, store_url=url, port=port, auth="munge",
                                extra=f'munge_socket = "{sock}"')
            out = run_sg("-c", str(ncfg), "doctor", "node", "--json", env=env)
            item = {i["name"]: i for i in json.loads(out.stdout)["items"]}["serve.auth"]
            assert item["status"] == status, item
            assert ("the NodeAddr of n1" in item["detail"]) == (status == "pass"), item
    finally:
        store.close()
        srv.stop()
        for m in mungeds.values():
            m.stop()
        shutil.rmtree(mdir, ignore_errors=True)
    record("node-identity", store="SQLite", mode="munge", bad_inputs="; ".join(tried), lost=0, duplicated=0,
           figures=f"{len(tried)} hostile writes refused (the forged-origin attack among them), "
                   f"0 rows or Slurm changes; every node's records, permits, suspects pass; "
                   f"a flood of {flood}: 1 ledger row")
