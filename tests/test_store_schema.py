"""The models, the Alembic migrations and the DDL in sql/ describe the same schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

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


def test_new_migration_draft_adds_what_the_models_add_and_runs(tmp_path: Path) -> None:
    """`python -m slurmguard.store.ddl --new-migration MSG`: the draft is what the models
    have and head lacks, it chains onto head, and applied it yields the models' schema."""
    import shutil

    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.config import Config as AlembicConfig
    from alembic.migration import MigrationContext
    from sqlalchemy import Column, Integer, MetaData, String, Table

    from slurmguard.store.ddl import add_known_revision, draft_migration
    from slurmguard.store.migrate import MIGRATIONS

    md = MetaData(naming_convention=Base.metadata.naming_convention)
    for t in Base.metadata.tables.values():
        t.to_metadata(md)
    Table("example_widgets", md, Column("id", Integer, primary_key=True),
          Column("node", String(128), nullable=False))
    scripts = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    path, rev, changed = draft_migration("Add example widgets", metadata=md,
                                         versions_dir=scripts / "versions")
    text = path.read_text()
    assert changed and rev == f"{int(HEAD) + 1:04d}" and path.name == f"{rev}_add_example_widgets.py"
    assert "op.create_table('example_widgets'" in text and f"down_revision = {HEAD!r}" in text
    assert "op.drop_table('example_widgets')" in text

    engine = make_engine({"url": f"sqlite:///{tmp_path}/s.db"})
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(scripts))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), md) == []
    engine.dispose()

    path2, _, changed2 = draft_migration("nothing", versions_dir=tmp_path)
    assert not changed2 and "pass" in path2.read_text()
    vf = tmp_path / "version.py"
    vf.write_text('KNOWN_REVISIONS: tuple[str, ...] = ("0001",)\nHEAD = KNOWN_REVISIONS[-1]\n')
    add_known_revision("0002", vf)
    assert 'KNOWN_REVISIONS: tuple[str, ...] = ("0001", "0002")' in vf.read_text()


def test_ddl_check_names_the_stale_file(tmp_path: Path) -> None:
    from slurmguard.store.ddl import stale_sql, write_sql

    write_sql(tmp_path)
    assert stale_sql(tmp_path) == []
    (tmp_path / "schema-postgresql.sql").write_text(ddl("postgresql").replace("SERIAL", "INTEGER"))
    assert stale_sql(tmp_path) == [tmp_path / "schema-postgresql.sql"]
