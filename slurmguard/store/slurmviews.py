"""The store's published Slurm views (``store.slurm_views``): the serve replica that leads
reads Slurm's node table and publishes it here with the time of its read; the others read it
from here instead of asking slurmctld (serve/slurmview.py, docs/serve.md "One reader of the
node table").

    store.slurm_views.publish("nodes", text, read_at=t, publisher="ctl1 10.0.0.1:8742")
    store.slurm_views.head("nodes")   # ViewHead(read_at, digest, publisher), or None
    store.slurm_views.text("nodes")   # (digest, text), or None

A reader looks at the head (one short row) every time and fetches the body only when the
digest moved, so a quiet cluster costs the followers a few bytes a look.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from slurmguard.store.engine import guard
from slurmguard.store.models import SlurmViewRow


@dataclass(frozen=True)
class ViewHead:
    read_at: float  # epoch s the publisher's read began
    digest: str
    publisher: str


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class SlurmViews:
    """Published Slurm views on the store's engine (``store.slurm_views``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def publish(self, name: str, text: str, *, read_at: float, publisher: str,
                digest: str | None = None) -> bool:
        """Publish ``text`` read at ``read_at``; True when the body was (re)written, False
        when only the read time moved (the text was the one already published)."""
        digest = digest or digest_of(text)
        row = SlurmViewRow.__table__
        with guard(self.engine, f"slurm view {name}"):
            with self.engine.begin() as conn:
                done = conn.execute(update(row).where(row.c.name == name,
                                                      row.c.digest == digest)
                                    .values(read_at=read_at, publisher=publisher[:200])).rowcount
                if done:
                    return False
                values = {"read_at": read_at, "changed_at": read_at, "digest": digest,
                          "body": zlib.compress(text.encode(), 1), "publisher": publisher[:200]}
                if conn.execute(update(row).where(row.c.name == name).values(**values)).rowcount:
                    return True
            try:  # the first publication of this view
                with self.engine.begin() as conn:
                    conn.execute(insert(row).values(name=name, **values))
            except IntegrityError:  # another publisher inserted it first: overwrite it
                with self.engine.begin() as conn:
                    conn.execute(update(row).where(row.c.name == name).values(**values))
        return True

    def head(self, name: str) -> ViewHead | None:
        row = SlurmViewRow.__table__
        with guard(self.engine, f"slurm view {name}"), self.engine.connect() as conn:
            r = conn.execute(select(row.c.read_at, row.c.digest, row.c.publisher)
                             .where(row.c.name == name)).first()
        return None if r is None else ViewHead(float(r.read_at), r.digest, r.publisher)

    def text(self, name: str) -> tuple[str, str] | None:
        """(digest, text) of the published view, or None when none was published."""
        row = SlurmViewRow.__table__
        with guard(self.engine, f"slurm view {name}"), self.engine.connect() as conn:
            r = conn.execute(select(row.c.digest, row.c.body).where(row.c.name == name)).first()
        return None if r is None else (r.digest, zlib.decompress(r.body).decode())
