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

from slurmguard.contract import CheckResult, Health
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


OLD = b"old-site-key-0123456789abcdef012345"


def test_a_rotation_takes_keys_of_both_site_keys_until_the_old_one_is_dropped() -> None:
    old = node_key_header(node_secret(OLD, "n1"), "n1", BODY, NOW)
    new = _h()
    for header, keys, reason in ((old, (SITE, OLD), None), (new, (SITE, OLD), None),
                                 (old, (SITE,), "invalid"), (new, (SITE,), None),
                                 (old.replace("node=n1", "node=n2"), (SITE, OLD), "invalid")):
        _, got = identity.node_key_request(header, keys, BODY, ["n1"], NOW, _fresh())
        assert (got.reason if got else None) == reason, (header[:30], keys, got)


def test_fleet_keys_rotation_and_the_doctor_check_on_a_real_serve(tmp_path: Path) -> None:
    """`serve node-keys` writes one key per node; serve takes keys of the old and the new site
    key during a rotation, only the new after; `doctor node` says whether serve takes the
    node's key; n1's own key cannot write n2's failing record or pass as n2's."""
    import os
    import stat

    site, old = tmp_path / "site.key", tmp_path / "old.key"
    for path, key in ((site, SITE), (old, OLD)):
        path.write_text(key.decode() + "\n")
        path.chmod(0o600)
    port = new_port()
    base = dict(store_url=new_store(tmp_path), port=port, auth="node-key")
    cfg = write_config(tmp_path, **base, serve_extra=f'site_key_file = "{site}"\n'
                       f'site_key_previous_file = "{old}"\npolicy = false')
    keys = tmp_path / "keys"
    out = run_sg("-c", str(cfg), "serve", "node-keys", "--out", str(keys), "--nodes", "n[1-3]")
    assert out.returncode == 0 and "3 node keys written" in out.stdout, out
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    for n in ("n1", "n2", "n3"):
        f = keys / f"{n}.key"
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert f.read_text().strip() == node_secret(SITE, n)
    lost = json.dumps({"records": [make_record(
        "n2", "healthcheck", [CheckResult("gpu-lost", Health.UNHEALTHY, "GPU 3 fell off the bus")],
        "drain", "slurmguard: gpu-lost: GPU 3 fell off the bus")]}).encode()

    def post(node: str, secret: str, records: bytes | None = None) -> tuple[int, dict[str, Any]]:
        body = records or json.dumps({"records": [make_record(node, "prolog", [], "pass", "")]}).encode()
        return _post(port, "/ingest", body, node_key_header(secret, node, body, time.time()))

    def doctor(node: str, key_file: Path) -> dict[str, Any]:
        d = tmp_path / f"doctor-{node}-{key_file.stem}"
        d.mkdir()
        ncfg = write_config(d, **base, extra=f'node_key_file = "{key_file}"')
        r = run_sg("-c", str(ncfg), "doctor", "node", "--node", node, "--json", timeout=120)
        return {i["name"]: i for i in json.loads(r.stdout)["items"]}["node key"]

    srv = Serve(cfg, port).start()
    try:
        assert post("n1", node_secret(OLD, "n1"))[0] == 200  # a node not yet given its new key
        assert post("n1", node_secret(SITE, "n1"))[0] == 200
        status, answer = post("n1", node_secret(SITE, "n1"), lost)  # root on n1, its own key
        assert status == 403 and answer["error"].startswith("refused (other-node)"), answer
        status, answer = _post(port, "/ingest", lost, node_key_header(
            node_secret(SITE, "n1"), "n1", lost, time.time()).replace("node=n1", "node=n2"))
        assert status == 403 and answer["error"].startswith("refused (invalid)"), answer
        good = doctor("n1", keys / "n1.key")
        assert good["status"] == "pass" and "takes n1's key" in good["detail"], good
        bad = doctor("n1", keys / "n2.key")
        assert bad["status"] == "FAIL" and "serve node-keys" in bad["fix"], bad
    finally:
        srv.stop()
    # The window ends: serve without the previous key refuses the old keys only.
    cfg.write_text(cfg.read_text().replace(f'site_key_previous_file = "{old}"\n', ""))
    srv = Serve(cfg, port).start()
    try:
        status, answer = post("n3", node_secret(OLD, "n3"))
        assert status == 403 and answer["error"].startswith("refused (invalid)"), answer
        assert post("n3", node_secret(SITE, "n3"))[0] == 200
        assert srv.healthz()["runs"] == 3  # n1 (old key), n1 (new), n3 (new): doctor stores none
    finally:
        srv.stop()
