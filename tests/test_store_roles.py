"""Least-privilege PostgreSQL roles on a real server (`slurmguard db roles`, docs/store.md
"Roles"): the owner migrates; serve's role (the writer) ingests, turns switches and records
events but cannot ALTER, DROP or TRUNCATE; the read-only role runs the admins' reads
(`nodes`, `node show`, `goodput`, `fleet report`, `events`) and cannot write."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from support.helpers import run_sg
from support.pgserver import pg_server  # noqa: F401  (fixture)
from support.sgserve import TOKEN, Serve, new_port, write_config

from slurmguard.adapters import serve_client
from slurmguard.errors import InputError
from slurmguard.node.record import make_record
from slurmguard.store.roles import sql

pytestmark = pytest.mark.postgres


@pytest.fixture
def roles(pg_server):  # noqa: F811
    db = pg_server.create_db()
    sfx = uuid.uuid4().hex[:8]
    names = {"owner": f"sgo_{sfx}", "writer": f"sgw_{sfx}", "reader": f"sgr_{sfx}"}
    script = sql(db, **names)
    with psycopg.connect(f"host=127.0.0.1 port={pg_server.port} user=postgres dbname={db}",
                         autocommit=True) as conn:
        conn.execute(script)
        conn.execute(script)  # idempotent: a second run changes nothing and fails nothing
    urls = {k: f"postgresql+psycopg://{v}@127.0.0.1:{pg_server.port}/{db}"
            for k, v in names.items()}
    return pg_server, db, names, urls


def _as(server, db: str, role: str, statement: str) -> None:
    with psycopg.connect(f"host=127.0.0.1 port={server.port} user={role} dbname={db}",
                         autocommit=True) as conn:
        conn.execute(statement)


def test_the_writer_writes_rows_but_not_the_schema_and_the_reader_only_reads(roles, tmp_path):
    server, db, names, urls = roles
    r = run_sg("db", "upgrade", "--url", urls["owner"])
    assert r.returncode == 0 and "schema (empty) ->" in r.stdout, r.stderr
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the writer cannot migrate
        _as(server, db, names["writer"], "CREATE TABLE sneaky (x int)")

    # serve as the writer: records stored, the leader's heartbeat written
    port = new_port()
    cfg = write_config(tmp_path, store_url=urls["writer"], port=port)
    s = Serve(cfg, port, "--no-policy").start()
    try:
        recs = [make_record(n, "healthcheck", [], "pass", "", job_id=None, started=time.time(),
                            duration=0.01) for n in ("n1", "n2")]
        answer = serve_client.post_records(f"http://127.0.0.1:{port}/ingest", TOKEN, recs, 10)
        assert len(answer["stored"]) == 2, answer
    finally:
        s.stop()
    writer_cfg = tmp_path / "writer.toml"
    writer_cfg.write_text(f'[store]\nurl = "{urls["writer"]}"\n[repair]\n'
                          f'pause_file = "{tmp_path}/paused"\n')
    assert run_sg("-c", str(writer_cfg), "repair", "pause", "--reason", "t").returncode == 0
    for statement in ("ALTER TABLE runs ADD COLUMN x int", "DROP TABLE runs",
                      "TRUNCATE runs", "ALTER TABLE nodes OWNER TO CURRENT_USER"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _as(server, db, names["writer"], statement)

    # the reader: the admins' reads answer; a write is refused by PostgreSQL
    reader_cfg = tmp_path / "reader.toml"
    reader_cfg.write_text(f'[store]\nurl = "{urls["reader"]}"\n[slurm]\n'
                          f'scontrol = "{tmp_path}/no-scontrol"\nsinfo = "{tmp_path}/no-sinfo"\n'
                          f'[repair]\npause_file = "{tmp_path}/paused2"\n')
    nodes = run_sg("-c", str(reader_cfg), "nodes", "--json")
    assert nodes.returncode == 0, nodes.stderr
    assert sorted(n["name"] for n in json.loads(nodes.stdout)["nodes"]) == ["n1", "n2"]
    show = run_sg("-c", str(reader_cfg), "node", "show", "n1", "--json")
    assert show.returncode == 0, show.stderr
    assert len(json.loads(show.stdout)["timeline"]) == 1
    for args in (("fleet", "report", "--json"), ("goodput", "--json"), ("events", "--json")):
        r = run_sg("-c", str(reader_cfg), *args)
        assert r.returncode == 0, (args, r.stderr)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _as(server, db, names["reader"], "DELETE FROM runs")
    denied = run_sg("-c", str(reader_cfg), "repair", "resume")
    assert denied.returncode == 5 and "permission denied" in denied.stderr, denied.stderr
    assert len(denied.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kwargs,field", [({"database": "db;drop"}, "--database"),
                                          ({"database": "db", "owner": "Robert'"}, "--owner"),
                                          ({"database": "db", "reader": "slurmguard"}, "--reader")])
def test_role_names_are_checked(kwargs, field):
    with pytest.raises(InputError) as err:
        sql(**kwargs)
    assert field in err.value.message
