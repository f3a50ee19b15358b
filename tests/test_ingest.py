"""Ingest end to end: a real `slurmguard serve`, the node-side delivery.deliver(), the spool."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)
from support.sgserve import TOKEN, Serve, new_port, write_config

from slurmguard import config
from slurmguard.adapters import spool as spool_files
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.store import Store

pytestmark = pytest.mark.postgres


def _rec(node: str = "n1", *fails: str) -> dict:
    results = [CheckResult("gpu-count", Health.HEALTHY)] + [
        CheckResult(f, Health.UNHEALTHY, "broken") for f in fails]
    return make_record(node, "prolog", results, "drain" if fails else "pass", "")


def _post(url: str, body: bytes, token: str | None = TOKEN) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/ingest", data=body, method="POST")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture
def setup(tmp_path: Path, store_url: str):  # noqa: F811
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=store_url, port=port)
    serve = Serve(cfg_path, port, "--no-policy")
    yield tmp_path, config.load(str(cfg_path), env={}), serve, store_url
    serve.stop()


def test_deliver_sends_and_ingest_is_exactly_once(setup) -> None:
    d, cfg, serve, url = setup
    serve.start()
    r = _rec("n1", "gpu-xid")
    assert delivery.deliver(r, cfg) == "sent"
    status, ans = _post(serve.url, json.dumps({"records": [r, r]}).encode())
    assert status == 200 and ans["stored"] == [] and ans["duplicate"] == [r["id"], r["id"]]
    store = Store.open(url=url)
    assert store.counts()["runs"] == 1
    (s,) = store.nodes.summary(["n1"])
    assert s.failing_checks == ("gpu-xid",)
    store.close()
    h = serve.healthz()
    assert h["status"] == "ok" and h["runs"] == 1


def test_requests_without_the_token_are_refused(setup) -> None:
    d, cfg, serve, url = setup
    serve.start()
    body = json.dumps(_rec()).encode()
    assert _post(serve.url, body, token=None)[0] == 401
    assert _post(serve.url, body, token="wrong-token-0123456789")[0] == 401
    assert _post(serve.url, body)[0] == 200
    assert Store.open(url=url).counts()["runs"] == 1


def test_bad_records_are_rejected_one_by_one(setup) -> None:
    d, cfg, serve, url = setup
    serve.start()
    bad = _rec("n2")
    bad["results"][0]["health"] = "sick"
    good = _rec("n1")
    status, ans = _post(serve.url, json.dumps({"records": [good, bad, 42]}).encode())
    assert status == 200 and ans["stored"] == [good["id"]]
    assert ans["rejected"][bad["id"]].startswith("record.results[0].health:")
    assert ans["rejected"]["#2"].startswith("record: expected a JSON object")
    assert _post(serve.url, b"{not json")[0] == 400


def test_serve_refuses_a_world_readable_token(tmp_path: Path) -> None:
    cfg_path = write_config(tmp_path, store_url=f"sqlite:///{tmp_path}/s.db", port=new_port())
    (tmp_path / "token").chmod(0o644)
    p = run_sg("-c", str(cfg_path), "serve", "--no-policy")
    assert p.returncode == 3 and "world-accessible" in p.stderr and "chmod 0600" in p.stderr
    (tmp_path / "token").unlink()
    p = run_sg("-c", str(cfg_path), "serve", "--no-policy")
    assert p.returncode == 3 and "does not exist" in p.stderr


def test_serve_refuses_a_store_without_schema(tmp_path: Path) -> None:
    cfg_path = write_config(tmp_path, store_url=f"sqlite:///{tmp_path}/s.db", port=new_port())
    p = run_sg("-c", str(cfg_path), "serve", "--no-policy")
    assert p.returncode == 5 and "run `slurmguard db upgrade`" in p.stderr


def test_spool_when_serve_is_down_then_replay_exactly_once(setup) -> None:
    d, cfg, serve, url = setup
    recs = [_rec(f"n{i % 7}", *(("fs-mount",) if i % 3 == 0 else ())) for i in range(120)]
    assert {delivery.deliver(r, cfg) for r in recs} == {"spooled"}
    spool = str(d / "spool")
    assert len(spool_files.pending(spool)) == 120
    assert oct(os.stat(spool).st_mode & 0o777) == "0o700"
    serve.start()
    last = _rec("n1")
    assert delivery.deliver(last, cfg) == "sent"
    assert spool_files.pending(spool) == []
    # A second replay of the same records (a crash after the answer, before the unlink).
    for r in recs[:10]:
        spool_files.write(r, spool, 100)
    assert delivery.deliver(_rec("n2"), cfg) == "sent"
    store = Store.open(url=url)
    assert store.counts()["runs"] == 122
    store.close()


def test_spool_is_bounded_oldest_dropped(tmp_path: Path) -> None:
    spool = str(tmp_path / "sp")
    recs = [_rec() for _ in range(15)]
    for r in recs:
        spool_files.write(r, spool, 10)
    names = spool_files.pending(spool)
    assert len(names) == 10
    kept = {json.loads((tmp_path / "sp" / n).read_text())["id"] for n in names}
    assert kept == {r["id"] for r in recs[5:]}


def test_unreadable_token_spools_and_bad_spool_dir_does_not_raise(tmp_path: Path) -> None:
    cfg_path = write_config(tmp_path, store_url="sqlite:////nonexistent", port=new_port())
    cfg = config.load(str(cfg_path), env={})
    (tmp_path / "token").unlink()
    assert delivery.deliver(_rec(), cfg) == "spooled"
    (tmp_path / "blocker").write_text("")
    cfg_path.write_text(cfg_path.read_text().replace(f'spool_dir = "{tmp_path}/spool"',
                                                     f'spool_dir = "{tmp_path}/blocker/spool"'))
    cfg = config.load(str(cfg_path), env={})
    assert delivery.deliver(_rec(), cfg).startswith("lost: spool")


def test_torn_spool_file_is_dropped_not_sent(setup) -> None:
    d, cfg, serve, url = setup
    spool = d / "spool"
    spool.mkdir(mode=0o700)
    (spool / "00000000000000000001-torn.json").write_text('{"id": "abc')
    serve.start()
    assert delivery.deliver(_rec(), cfg) == "sent"
    assert spool_files.pending(str(spool)) == []


def test_store_down_answers_503_and_nodes_keep_their_records(tmp_path: Path) -> None:
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    db = tmp_path / "s.db"
    engine = make_engine({"url": f"sqlite:///{db}"})
    upgrade(engine)
    engine.dispose()
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=f"sqlite:///{db}", port=port)
    serve = Serve(cfg_path, port, "--no-policy").start()
    try:
        import sqlite3

        with sqlite3.connect(db) as conn:  # break the store under the running server
            conn.execute("DROP TABLE results")
        cfg = config.load(str(cfg_path), env={})
        assert delivery.deliver(_rec(), cfg) == "spooled"
        assert len(spool_files.pending(str(tmp_path / "spool"))) == 1
    finally:
        serve.stop()
    assert "store write failed" in serve.log.read_text()


def test_serve_help_has_example() -> None:
    p = run_sg("serve", "--help", env=sg_env())
    assert p.returncode == 0 and "Example" in p.stdout
