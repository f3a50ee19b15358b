"""Alembic migrations of the store (packaged; run with `slurmguard db upgrade`)."""
