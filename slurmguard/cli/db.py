"""`slurmguard db upgrade|current`: migrate the node-state store and show its schema."""

from __future__ import annotations

import click

from slurmguard.errors import StoreError
from slurmguard.output import Result, emit


def _cfg(ctx: click.Context) -> object:
    from slurmguard import config

    return config.load((ctx.find_root().obj or {}).get("config_path"))


@click.group("db")
def db_cmd() -> None:
    """Manage the node-state store (SQLite or PostgreSQL).

    \b
    Example:
      slurmguard db upgrade          # create or migrate the store of store.url / store.path
      slurmguard db current --json   # its schema revision and row counts
    """


@db_cmd.command("upgrade")
@click.option("--url", metavar="URL", help="Database URL (default: store.url, else SQLite at store.path).")
@click.pass_context
def upgrade_cmd(ctx: click.Context, url: str | None) -> None:
    """Create or migrate the store to this slurmguard's schema (refuses a newer store).

    \b
    Example:
      slurmguard db upgrade
      slurmguard db upgrade --url postgresql+psycopg://slurmguard@db/slurmguard
    """
    from slurmguard.store.api import Store, describe_section

    section = dict(_cfg(ctx).section("store"))  # type: ignore[attr-defined]
    if url:
        section["url"] = url
    before, after = Store.upgrade(section)
    where = describe_section(section)
    if before == after:
        click.echo(f"{where}: already at schema {after}")
    else:
        click.echo(f"{where}: schema {before or '(empty)'} -> {after}")


@db_cmd.command("current")
@click.option("--url", metavar="URL", help="Database URL (default: store.url, else SQLite at store.path).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def current_cmd(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """Show the store's schema revision, whether it is current, and its row counts.

    \b
    Example:
      slurmguard db current
      slurmguard db current --json
    """
    from slurmguard.store.api import Store

    section = dict(_cfg(ctx).section("store"))  # type: ignore[attr-defined]
    if url:
        section["url"] = url
    st = Store.status(section)
    where, rev, head, problem, counts = st.where, st.revision, st.head, st.problem, st.counts
    emit(Result({"store": where, "revision": rev, "head": head, "current": problem is None,
                 "problem": problem, "rows": counts},
                [f"store:    {where}\nrevision: {rev or '(none)'} (head {head})",
                 *(f"{table + ':':<13} {n}" for table, n in counts.items())]), as_json)
    if problem is not None:
        raise StoreError(problem)


@db_cmd.command("expire")
@click.option("--url", metavar="URL", help="Database URL (default: store.url, else SQLite at store.path).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def expire_cmd(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """Delete the history store.retention no longer keeps, in small transactions.

    serve's leader does this every store.retention.interval seconds; run it by hand (or
    from cron with that interval at 0) to expire now. Ingest goes on meanwhile.

    \b
    Example:
      slurmguard db expire
      slurmguard db expire --json
    """
    from slurmguard.store.api import Store
    from slurmguard.store.retention import RetentionPolicy

    cfg = _cfg(ctx)
    section = dict(cfg.section("store"))  # type: ignore[attr-defined]
    if url:
        section["url"] = url
    policy = RetentionPolicy.from_section(cfg.section("store.retention"))  # type: ignore[attr-defined]
    store = Store.open(section=section)
    try:
        st = store.retention.expire(policy).as_dict()
    finally:
        store.close()
    emit(Result({"store": store.where, **st},
                [f"store: {store.where}",
                 *(f"{table + ':':<15} {n} deleted" for table, n in st["deleted"].items()),
                 f"{st['transactions']} transactions in {st['seconds']} s (largest "
                 f"{st['largest_transaction']} rows, longest {st['longest_transaction_s']} s)"]),
         as_json)


@db_cmd.command("roles")
@click.option("--database", required=True, metavar="NAME", help="The store's database.")
@click.option("--owner", default="slurmguard_owner", show_default=True, metavar="ROLE",
              help="Owns the schema; only `db upgrade --url` connects as it.")
@click.option("--writer", default="slurmguard", show_default=True, metavar="ROLE",
              help="serve's role (store.url): rows only, no ALTER/DROP.")
@click.option("--reader", default="slurmguard_read", show_default=True, metavar="ROLE",
              help="Read-only, for admins' nodes / node show / goodput / fleet report.")
def roles_cmd(database: str, owner: str, writer: str, reader: str) -> None:
    """Print the SQL that sets up least-privilege PostgreSQL roles for the store.

    A superuser runs it once; it is idempotent and grants every table a later migration
    creates alike (docs/store.md "Roles"). Migrate as the owner, run serve as the writer.

    \b
    Example:
      slurmguard db roles --database slurmguard | sudo -u postgres psql -v ON_ERROR_STOP=1 -d slurmguard
      slurmguard db upgrade --url postgresql+psycopg://slurmguard_owner@db/slurmguard
    """
    from slurmguard.store.roles import sql

    click.echo(sql(database, owner=owner, writer=writer, reader=reader), nl=False)
