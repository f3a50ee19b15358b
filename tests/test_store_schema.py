"""The models, the Alembic migrations and the DDL in sql/ describe the same schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_sg, sg_env
from pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.store.ddl import ddl
from slurmguard.store.engine import make_engine
from slurmguard.store.models import Base
from slurmguard.store.version import HEAD, KNOWN_REVISIONS

pytestmark = pytest.mark.postgres
SQL = Path(__file__).resolve().parents[1] / "sql"


def _diff(url: str) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = make_engine({"url": url})
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                Base.metadata)
    engine.dispose()
    return diff


def test_known_revisions_are_the_packaged_migrations() -> None:
    from alembic.script import ScriptDirectory

    from slurmguard.store.migrate import MIGRATIONS

    script = ScriptDirectory(str(MIGRATIONS))
    chain = [r.revision for r in script.walk_revisions()][::-1]
    assert tuple(chain) == KNOWN_REVISIONS and script.get_current_head() == HEAD


def test_migrated_store_equals_models(store_url: str) -> None:  # noqa: F811
    assert _diff(store_url) == []


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_sql_ddl_files_are_generated_from_models(dialect: str) -> None:
    assert (SQL / f"schema-{dialect}.sql").read_text() == ddl(dialect), \
        "run `python -m slurmguard.store.ddl` to regenerate sql/"


def test_sql_ddl_creates_the_model_schema_sqlite(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((SQL / "schema-sqlite.sql").read_text())
    assert _diff(f"sqlite:///{db}") == []
    p = run_sg("db", "current", "--url", f"sqlite:///{db}", env=sg_env(SLURMGUARD_CONFIG="/dev/null"))
    assert p.returncode == 0 and f"revision: {HEAD}" in p.stdout, p.stderr


def test_sql_ddl_creates_the_model_schema_postgresql(pg_server) -> None:  # noqa: F811
    import psycopg

    name = pg_server.create_db()
    with psycopg.connect(f"host=127.0.0.1 port={pg_server.port} user=postgres dbname={name}",
                         autocommit=True) as conn:
        conn.execute((SQL / "schema-postgresql.sql").read_text())
    assert _diff(pg_server.url(name)) == []


def test_db_upgrade_cli_creates_then_is_idempotent(tmp_path: Path) -> None:
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/store.db"\n')
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    p = run_sg("db", "current", env=env)
    assert p.returncode == 5 and "run `slurmguard db upgrade`" in p.stderr
    assert "(on a new controller: `slurmguard setup controller`)" in p.stderr
    p = run_sg("db", "upgrade", env=env)
    assert p.returncode == 0 and f"(empty) -> {HEAD}" in p.stdout, p.stderr
    p = run_sg("db", "upgrade", env=env)
    assert p.returncode == 0 and "already at schema" in p.stdout
    p = run_sg("db", "current", "--json", env=env)
    import json

    out = json.loads(p.stdout)
    assert out["current"] and out["revision"] == HEAD and out["rows"]["nodes"] == 0
