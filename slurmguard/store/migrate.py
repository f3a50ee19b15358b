"""Run the packaged Alembic migrations (`slurmguard db upgrade`)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from slurmguard.errors import StoreError
from slurmguard.store.engine import current_revision, describe, guard
from slurmguard.store.version import KNOWN_REVISIONS

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(engine: Engine, connection: object | None = None) -> object:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Migrate the store to ``revision``; returns (before, after). Refuses a newer store."""
    from alembic import command

    before = current_revision(engine)
    if before is not None and before not in KNOWN_REVISIONS:
        raise StoreError(f"store {describe(str(engine.url))} has schema revision {before}, "
                         "newer than this slurmguard knows; upgrade slurmguard, not the store")
    with guard(engine, "upgrade"):
        with engine.begin() as conn:
            command.upgrade(alembic_config(engine, conn), revision)  # type: ignore[arg-type]
    return before, current_revision(engine) or ""
