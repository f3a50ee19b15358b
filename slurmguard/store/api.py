"""The store's API, used by serve, gate, the admin CLI, burn-in, goodput and the reconciler.

    from slurmguard.store import Store
    store = Store.open(cfg)                      # cfg: slurmguard.config.Config ([store])
    store.nodes.record_results(record)           # nodes and events (store/nodes.py)
    store.burnin.latest_runs(since)              # burn-in runs and series (store/burnin.py)
    store.goodput.totals(since=t, by="user")     # goodput accounting (store/goodput.py)

One engine, one object per area, all in one style (docs/store.md "The API by area"); the
``Store`` itself opens, checks and migrates the database. Every method raises
:class:`~slurmguard.errors.StoreError` (one line) when the database cannot be reached, and
:class:`~slurmguard.errors.InputError` for a bad record or name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, select

from slurmguard.store.burnin import Burnin
from slurmguard.store.engine import (
    check_schema,
    current_revision,
    describe,
    guard,
    make_engine,
    store_url,
)
from slurmguard.store.goodput import Goodput
from slurmguard.store.models import (
    BurninPack,
    BurninResult,
    BurninRun,
    BurninSeries,
    Event,
    FleetAlert,
    GoodputJob,
    Node,
    Result,
    Run,
)
from slurmguard.store.nodes import Nodes
from slurmguard.store.replicas import Replicas
from slurmguard.store.retention import Retention
from slurmguard.store.rows import AlertRow, EventRow, NodeSummary, TimelineItem, parse_actor
from slurmguard.store.slurmviews import SlurmViews
from slurmguard.store.switches import Switches

if TYPE_CHECKING:
    from slurmguard.config import Config

__all__ = ["Store", "NodeSummary", "TimelineItem", "EventRow", "AlertRow", "parse_actor"]


def describe_section(section: Mapping[str, Any]) -> str:
    """The store a ``[store]`` section names, without its password, for messages."""
    return describe(store_url(section))


@dataclass(frozen=True)
class StoreStatus:
    where: str  # the URL without its password
    revision: str | None
    head: str
    problem: str | None  # None: the schema is current
    counts: dict[str, int]


class Store:
    """A handle on the node-state store. Cheap to create; thread-safe like its Engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.nodes = Nodes(engine)
        self.burnin = Burnin(engine)
        self.goodput = Goodput(engine)
        self.replicas = Replicas(engine)
        self.switches = Switches(engine)
        self.retention = Retention(engine)
        self.slurm_views = SlurmViews(engine)

    @classmethod
    def open(cls, cfg: Config | None = None, *, url: str | None = None, check: bool = True,
             section: Mapping[str, Any] | None = None, workers: int | None = None) -> Store:
        """Open the configured store (or ``url``); ``check`` refuses a wrong schema.
        ``workers``: serve's request threads, which size a PostgreSQL pool (store/engine.py)."""
        if section is None:
            section = dict(cfg.section("store")) if cfg is not None else {}
        else:
            section = dict(section)
        if url is not None:
            section["url"] = url
        store = cls(make_engine(section, workers=workers))
        if check:
            check_schema(store.engine)
        return store

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def serialized(self, name: str) -> Iterator[Store]:
        """A view of the store inside ONE transaction that holds the database's lock for
        ``name`` (store/serial.py): a capped fleet decision reads and writes through it, and
        no other process or replica decides for ``name`` until it commits."""
        from slurmguard.store.serial import serialized

        with serialized(self.engine, name) as conn:
            view = Store(self.engine)
            view.nodes = Nodes(self.engine, conn)
            yield view

    @property
    def where(self) -> str:
        """The store's URL without its password, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    # ------------------------------------------------------------------ schema

    @staticmethod
    def upgrade(section: Mapping[str, Any]) -> tuple[str | None, str]:
        """Create or migrate the store of a ``[store]`` section; (revision before, after)."""
        from slurmguard.store.migrate import upgrade

        engine = make_engine(section)
        try:
            return upgrade(engine)
        finally:
            engine.dispose()

    @classmethod
    def status(cls, section: Mapping[str, Any], *, counts: bool = True) -> StoreStatus:
        """The schema revision of a ``[store]`` section's store, whether it is current (the
        problem when not), and its row counts when it is (and ``counts``)."""
        from slurmguard.store.version import HEAD, schema_problem

        where = describe_section(section)
        engine = make_engine(section)
        try:
            rev = current_revision(engine)
            problem = schema_problem(rev, where)
            rows = cls(engine).counts() if problem is None and counts else {}
        finally:
            engine.dispose()
        return StoreStatus(where, rev, HEAD, problem, rows)

    def ping(self) -> None:
        """One cheap query that reads the database (not just the connection): raises
        StoreError when the store does not answer (down, locked, unreadable)."""
        with guard(self.engine, "ping"), self.engine.connect() as conn:
            conn.execute(select(Node.id).limit(1)).all()

    def counts(self) -> dict[str, int]:
        """Row counts per table (for `db current` and tests)."""
        with guard(self.engine, "counts"), self.engine.connect() as conn:
            return {t.__tablename__: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                    for t in (Node, Run, Result, Event, FleetAlert, GoodputJob, BurninRun,
                              BurninResult, BurninSeries, BurninPack)}
