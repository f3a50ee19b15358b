"""PostgreSQL roles for least privilege: who may change the schema, who may write, who may read.

* **owner** (``slurmguard_owner``): owns the tables; ``slurmguard db upgrade --url`` connects
  as it and is the only thing that does. Nothing running all day holds it.
* **writer** (``slurmguard``): what ``serve`` (and the requeue watcher, burn-in, admin
  commands that change things) use in ``store.url``: SELECT, INSERT, UPDATE, DELETE on every
  table and the sequences, nothing else: no ALTER, DROP, TRUNCATE, CREATE.
* **reader** (``slurmguard_read``): SELECT only, for the admins' reads (``nodes``, ``node
  show``, ``goodput``, ``fleet report``, ``events``) from their own config.

:func:`sql` writes the statements a database superuser runs once (``slurmguard db roles |
psql``); default privileges make every table a later migration creates carry the same grants.
Passwords are the DBA's business (``ALTER ROLE ... PASSWORD`` or a pg_hba.conf rule); the SQL
creates the roles without one.
"""

from __future__ import annotations

import re

from slurmguard.errors import InputError

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _check(option: str, name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InputError(f"{option}: expected a PostgreSQL role or database name "
                         f"([a-z_][a-z0-9_]*, at most 63), got {name[:70]!r}")
    return name


def sql(database: str, owner: str = "slurmguard_owner", writer: str = "slurmguard",
        reader: str = "slurmguard_read", schema: str = "public") -> str:
    """The role set-up, idempotent (roles created only when missing), as one script."""
    db, o, w, r, s = (_check(opt, v) for opt, v in (
        ("--database", database), ("--owner", owner), ("--writer", writer),
        ("--reader", reader), ("--schema", schema)))
    if len({o, w, r}) != 3:
        raise InputError(f"--owner, --writer, --reader: three different roles, got {o}, {w}, {r}")
    create = "\n".join(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{n}') THEN "
        f"CREATE ROLE {n} LOGIN; END IF; END $$;" for n in (o, w, r))
    dml = "SELECT, INSERT, UPDATE, DELETE"
    return f"""-- slurmguard's PostgreSQL roles (docs/store.md "Roles"); run once as a superuser:
--   slurmguard db roles --database {db} | psql -v ON_ERROR_STOP=1 -d {db}
{create}
REVOKE ALL ON DATABASE {db} FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {o}, {w}, {r};
REVOKE CREATE ON SCHEMA {s} FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA {s} TO {o};
GRANT USAGE ON SCHEMA {s} TO {w}, {r};
-- tables that exist already (a store migrated before the roles) change hands to the owner
DO $$ DECLARE t record; BEGIN
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = '{s}' LOOP
    EXECUTE format('ALTER TABLE {s}.%I OWNER TO {o}', t.tablename);
  END LOOP;
  FOR t IN SELECT sequencename FROM pg_sequences WHERE schemaname = '{s}' LOOP
    EXECUTE format('ALTER SEQUENCE {s}.%I OWNER TO {o}', t.sequencename);
  END LOOP;
END $$;
GRANT {dml} ON ALL TABLES IN SCHEMA {s} TO {w};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {s} TO {w};
GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r};
-- and every table a later `db upgrade` (as {o}) creates
ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {s} GRANT {dml} ON TABLES TO {w};
ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {s} GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {w};
ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {s} GRANT SELECT ON TABLES TO {r};
"""
