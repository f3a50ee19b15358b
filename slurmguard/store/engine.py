"""Engines for the store: SQLite (default, WAL + busy timeout) or PostgreSQL via psycopg 3.

``store.url`` picks the engine (``postgresql+psycopg://user@host/db``); empty means SQLite at
``store.path``. Every database failure leaves this module as a one-line
:class:`~slurmguard.errors.StoreError` (exit code EXIT_STORE), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as TimeoutError_

from slurmguard.errors import StoreError
from slurmguard.store.sqlite_read import store_url
from slurmguard.store.version import schema_problem


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable store url>"


# serve's PostgreSQL pool, from serve.workers (docs/serve.md "PostgreSQL connections"): a
# few connections of serve's own threads (the batch writer, the policy pass, the gate socket,
# a metrics scrape) plus one per 8 request threads, as many again as overflow, each at most
# POOL_MAX. Ingest requests never hold a connection (the one writer thread writes for all);
# a /permit does, but permits for one cause queue on the database's lock anyway
# (store/serial.py), so a connection per worker would buy idle backends, not answers.
POOL_OWN = 4
POOL_PER_WORKERS = 8
POOL_MAX = 24


def pool_for_workers(workers: int) -> tuple[int, int]:
    """(pool_size, max_overflow) of serve's PostgreSQL pool for ``serve.workers`` request
    threads: 64 workers (the default) -> (12, 8), at most 20 connections per replica."""
    share = -(-max(1, int(workers)) // POOL_PER_WORKERS)
    return min(POOL_OWN + share, POOL_MAX), min(share, POOL_MAX)


def make_engine(section: Mapping[str, Any], *, workers: int | None = None) -> Engine:
    """Create the engine for the ``store`` config section (nothing is connected yet).

    ``workers``: serve's request threads (``serve.workers``); a PostgreSQL pool is then sized
    by :func:`pool_for_workers` (else SQLAlchemy's default, 5 + 10 overflow)."""
    url = store_url(section)
    busy = float(section.get("busy_timeout", 5.0))
    connect_timeout = float(section.get("connect_timeout", 5.0))
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"store.url: not a database URL: {url!r}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = parsed.database
        if path and path != ":memory:":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise StoreError(f"store {path}: directory {parent} does not exist; "
                                 "run: slurmguard setup controller")
        engine = create_engine(url, connect_args={"timeout": busy})
        event.listen(engine, "connect", _sqlite_pragmas(busy))
        return engine
    if backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            raise StoreError(f"store.url: use postgresql+psycopg://..., got {describe(url)}")
        sizing: dict[str, int] = {}
        if workers is not None:
            sizing["pool_size"], sizing["max_overflow"] = pool_for_workers(workers)
        return create_engine(url, pool_pre_ping=True, **sizing,
                             connect_args={"connect_timeout": max(1, int(connect_timeout))})
    raise StoreError(f"store.url: unsupported database {backend!r} (use sqlite or postgresql+psycopg)")


def _sqlite_pragmas(busy: float) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        # WAL: readers (the gate) never block the writer (serve) and vice versa.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
        # NORMAL is durable across process crashes in WAL mode; only power loss can lose the
        # last commits, and nodes keep their spool until serve acknowledged the record.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision of the store, or None for an empty database."""
    with guard(engine):
        with engine.connect() as conn:
            has = engine.dialect.has_table(conn, "alembic_version")
            if not has:
                return None
            row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
            return row[0] if row else None


def check_schema(engine: Engine) -> None:
    """Refuse a store that is empty, older or newer than this slurmguard's schema."""
    problem = schema_problem(current_revision(engine), describe(str(engine.url)))
    if problem:
        raise StoreError(problem)


@contextmanager
def guard(engine: Engine | None = None, what: str = "") -> Iterator[None]:
    """Turn any SQLAlchemy/driver error into a one-line StoreError."""
    try:
        yield
    except StoreError:
        raise
    except SQLAlchemyError as exc:
        err = StoreError(one_line_error(exc, engine, what))
        # Locked, down, unreachable: retrying later helps. Bad data or a bug does not.
        err.transient = isinstance(exc, (OperationalError, InterfaceError, TimeoutError_))
        raise err from None
    except OSError as exc:  # e.g. an unreadable SQLite file
        where = describe(str(engine.url)) if engine is not None else "store"
        err = StoreError(f"store {where}: {exc.strerror or exc}")
        err.transient = True
        raise err from None


def one_line_error(exc: SQLAlchemyError, engine: Engine | None, what: str = "") -> str:
    orig = getattr(exc, "orig", None) or exc
    msg = " ".join(str(orig).split()) or type(orig).__name__
    # psycopg repeats the connection attempt per address; the first sentence is enough.
    if len(msg) > 240:
        msg = msg[:237] + "..."
    where = describe(str(engine.url)) if engine is not None else "store"
    return f"store {where}{': ' + what if what else ''}: {msg}"
