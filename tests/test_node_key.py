"""serve.auth = "node-key" (sites on auth/slurm, no munged): a node's key writes for that
node only; the decision table and a real serve (docs/security.md, "per-node keys")."""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.helpers import run_sg
from support.sgserve import Serve, new_port, new_store, write_config

from slurmguard.node.record import make_record
from slurmguard.nodekey import node_key_header, node_secret, node_sig
from slurmguard.serve import identity

SITE = b"site-key-0123456789abcdef0123456789"
NOW = 1_800_000_000.0
BODY = b'{"records":[]}'


def _fresh() -> Any:
    used: set[str] = set()

    def seen(sig: str) -> bool:
        hit = sig in used
        used.add(sig)
        return hit
    return seen


def _h(node: str = "n1", body: bytes = BODY, at: float = NOW, key: bytes = SITE) -> str:
    return node_key_header(node_secret(key, node), node, body, at)


def _legacy(node: str = "n1", body: bytes = BODY, at: float = NOW) -> str:
    """The header of a node of an earlier release: no body digest, the same signature."""
    t = int(at)
    return f"SGNODE node={node},t={t},sig={node_sig(node_secret(SITE, node), node, t, body)}"


TABLE = [
    ("own write", _h(), BODY, ["n1"], None),
    ("another node's record", _h(), BODY, ["n2"], "other-node"),
    ("body swapped under the signature", _h(), BODY + b" ", ["n1"], "body-mismatch"),
    ("body and declared digest swapped", re.sub("d=[0-9a-f]{64}", "d=" + identity.body_digest(
        BODY + b" "), _h()), BODY + b" ", ["n1"], "invalid"),
    ("an earlier release's header (no d=), own write", _legacy(), BODY, ["n1"], None),
    ("an earlier release's header, body swapped", _legacy(), BODY + b" ", ["n1"], "invalid"),
    ("n1's signature relabelled as n2", _h().replace("node=n1", "node=n2"), BODY, ["n2"], "invalid"),
    ("a key from another site", _h(key=b"other-site-key-0123456789"), BODY, ["n1"], "invalid"),
    ("signed 10 minutes ago", _h(at=NOW - 600), BODY, ["n1"], "expired"),
    ("no signature at all", "SGNODE node=n1,t=1", BODY, ["n1"], "invalid"),
]


@pytest.mark.parametrize("what,header,body,named,reason", TABLE, ids=[r[0] for r in TABLE])
def test_node_key_table(what: str, header: str, body: bytes, named: list[str],
                        reason: str | None) -> None:
    _, got = identity.node_key_request(header, SITE, body, named, NOW, _fresh())
    assert (got.reason if got else None) == reason, got


def test_a_node_key_signature_is_good_once() -> None:
    seen = _fresh()
    assert identity.node_key_request(_h(), SITE, BODY, ["n1"], NOW, seen)[1] is None
    assert identity.node_key_request(_h(), SITE, BODY, ["n1"], NOW, seen)[1].reason == "replayed"


def test_one_nodes_key_is_not_anothers() -> None:
    keys = {n: node_secret(SITE, n) for n in ("n1", "n2", "gpu001", "gpu0010")}
    assert len(set(keys.values())) == 4 and all(len(k) == 64 for k in keys.values())


def _post(port: int, path: str, body: bytes, auth: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("POST", path, body=body, headers={"Authorization": auth})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_serve_in_node_key_mode_takes_a_nodes_own_records_only(tmp_path: Path) -> None:
    site = tmp_path / "site.key"
    site.write_text(SITE.decode() + "\n")
    site.chmod(0o600)
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port, auth="node-key",
                       serve_extra=f'site_key_file = "{site}"\npolicy = false')
    key = run_sg("-c", str(cfg), "serve", "node-key", "n1").stdout.strip()
    assert key == node_secret(SITE, "n1")
    srv = Serve(cfg, port).start()
    try:
        own = json.dumps({"records": [make_record("n1", "prolog", [], "pass", "")]}).encode()
        auth = node_key_header(key, "n1", own, time.time())
        status, answer = _post(port, "/ingest", own, auth)
        assert status == 200 and len(answer["stored"]) == 1, answer
        assert _post(port, "/ingest", own, auth)[0] == 403  # replayed
        other = json.dumps({"records": [make_record("n2", "prolog", [], "drain", "x")]}).encode()
        status, answer = _post(port, "/ingest", other, node_key_header(key, "n1", other, time.time()))
        assert status == 403 and answer["error"].startswith("refused (other-node)"), answer
        status, answer = _post(port, "/ingest", other, "Bearer test-token-0123456789abcdef")
        assert status == 401 and "(missing)" in answer["error"], answer
        assert srv.healthz()["runs"] == 1
        assert srv.metric("slurmguard_auth_refusals_total", reason="replayed") == 1
    finally:
        srv.stop()


@given(st.text(max_size=200))
def test_any_node_key_header_is_refused_in_one_line_never_raises(junk: str) -> None:
    """Whatever follows the scheme (a newline in the node name included) is one line."""
    _, got = identity.node_key_request("SGNODE " + junk, SITE, BODY, ["n1"], NOW, _fresh())
    assert got is not None and got.reason == "invalid" and "\n" not in got.line()
