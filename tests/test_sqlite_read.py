"""Where the store is (one computation) and the read-only stdlib open both light readers use
(the gate and `burnin report`): read-only, schema-checked, one-line errors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from slurmguard.errors import StoreError
from slurmguard.store.sqlite_read import DEFAULT_PATH, open_read_only, sqlite_path, store_url
from slurmguard.store.version import HEAD


@pytest.mark.parametrize("section,url,path", [
    ({}, f"sqlite:///{DEFAULT_PATH}", DEFAULT_PATH),
    ({"path": "/srv/sg.db"}, "sqlite:////srv/sg.db", "/srv/sg.db"),
    ({"url": "sqlite:////x/y.db", "path": "/ignored.db"}, "sqlite:////x/y.db", "/x/y.db"),
    ({"url": "sqlite:///:memory:"}, "sqlite:///:memory:", None),
    ({"url": "postgresql+psycopg://u@h/db"}, "postgresql+psycopg://u@h/db", None),
])
def test_store_location_is_worked_out_once(section, url, path):
    assert store_url(section) == url
    assert sqlite_path(section) == path


def _store(path, revision: str | None) -> None:
    conn = sqlite3.connect(path)
    if revision is not None:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    conn.execute("CREATE TABLE nodes (name TEXT)")
    conn.commit()
    conn.close()


def test_open_is_read_only(tmp_path):
    db = tmp_path / "s.db"
    _store(db, HEAD)
    conn = open_read_only(str(db))
    try:
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (0,)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO nodes VALUES ('n1')")
    finally:
        conn.close()


@pytest.mark.parametrize("revision,says", [
    (None, "has no slurmguard schema"),
    ("9999", "newer than this slurmguard knows"),
])
def test_open_refuses_a_store_of_another_schema(tmp_path, revision, says):
    db = tmp_path / "s.db"
    _store(db, revision)
    with pytest.raises(StoreError, match=says) as e:
        open_read_only(str(db))
    assert "\n" not in str(e.value) and str(db) in str(e.value)


def test_open_never_creates_a_missing_store(tmp_path):
    db = tmp_path / "none.db"
    with pytest.raises(StoreError) as e:
        open_read_only(str(db))
    assert str(e.value) == f"store {db}: no such file; run: slurmguard setup controller"
    assert not db.exists()


def test_the_reader_imports_no_sqlalchemy():
    code = "import sys, slurmguard.store.sqlite_read as m; print('sqlalchemy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
