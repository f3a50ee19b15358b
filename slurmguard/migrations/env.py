"""Alembic environment: runs on the connection slurmguard hands it (no alembic.ini needed)."""

from __future__ import annotations

from alembic import context

from slurmguard.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only via `slurmguard db upgrade`
    raise RuntimeError("run migrations with `slurmguard db upgrade`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
# One transaction for the whole upgrade, version stamp included: a failed migration leaves
# the store as it was.
with context.begin_transaction():
    context.run_migrations()
