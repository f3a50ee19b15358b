"""Burn-in rows, and the read-only SQLite reader `burnin report` uses (no SQLAlchemy import).

`burnin report` without ``--apply`` only reads: on a SQLite store it reads with the
standard library's sqlite3 (as the gate does, slurmguard/gate/answer.py), because importing
SQLAlchemy and the models costs ~0.5 s of a report that should take about a second at
10,000 nodes (docs/burnin.md, "Report at fleet scale"). The SQL here is the SQL
:class:`slurmguard.store.burnin.Burnin` builds, and tests/test_burnin_vector.py holds the
two readers to the same rows. PostgreSQL stores, and anything that writes, go through
:class:`slurmguard.store.Store`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from slurmguard.errors import StoreError
from slurmguard.store.sqlite_read import open_read_only, sqlite_path


class BurninRunRow(NamedTuple):
    """A burnin_runs row (a NamedTuple: a fleet report reads 10,000 of them)."""

    id: int
    node: str
    job_id: str | None
    level: str
    night: str
    group_key: str
    submitted: float
    started: float | None
    finished: float | None
    status: str
    reason: str
    reservation: str
    verdict: str | None


class SeriesRow(NamedTuple):
    """A burnin_series row. A NamedTuple, not a dataclass: a report builds 100,000 of them
    and a frozen dataclass's ``__init__`` costs several times a tuple's."""

    node: str
    metric: str
    unit: str
    higher_is_better: bool
    group_key: str
    last_run_id: int
    last_at: float
    last_value: float
    last_night: str
    recent: tuple[float, ...]  # one value per night up to last_night, oldest first (nan: none)


RUN_COLUMNS = ("id", "node", "job_id", "level", "night", "group_key", "submitted", "started",
               "finished", "status", "reason", "reservation", "verdict")
_RUN_SELECT = ("SELECT r.id, n.name, r.job_id, r.level, r.night, r.group_key, r.submitted, "
               "r.started, r.finished, r.status, r.reason, r.reservation, r.verdict "
               "FROM burnin_runs r JOIN nodes n ON n.id = r.node_id")
# Each node's newest run since then: one range of the (node_id, submitted) index per node
# (~20 ms over 10,000 nodes x 30 nights), not a GROUP BY over every run (~40 ms).
LATEST_RUNS_SQL = (_RUN_SELECT + " WHERE r.id IN (SELECT (SELECT max(b.id) FROM burnin_runs b "
                   "WHERE b.node_id = m.id AND b.submitted >= ?) FROM nodes m)")
OPEN_RUNS_SQL = _RUN_SELECT + " WHERE r.status IN ('submitted', 'running') ORDER BY r.id"
PACKS_SQL = ("SELECT n.name, p.meta, p.nums, p.recent FROM burnin_packs p "
             "JOIN nodes n ON n.id = p.node_id")
SERIES_COUNT_SQL = "SELECT count(*) FROM burnin_series"
SERIES_SQL = ("SELECT n.name, s.metric, s.unit, s.higher_is_better, s.group_key, "
              "s.last_run_id, s.last_at, s.last_value, s.last_night, s.recent, s.recent_f8 "
              "FROM burnin_series s JOIN nodes n ON n.id = s.node_id WHERE s.last_at >= ?")


def of_nodes(rows: list[Any], nodes: Iterable[str] | None) -> list[Any]:
    """The rows (node name first) of ``nodes``; all of them when ``nodes`` is None."""
    if nodes is None:
        return rows
    wanted = set(nodes)
    return [r for r in rows if r[0] in wanted]


def latest_runs(rows: Iterable[Sequence[Any]], nodes: Iterable[str] | None) -> list[BurninRunRow]:
    """Run rows (RUN_COLUMNS order) as :class:`BurninRunRow`, only ``nodes``, sorted by node."""
    out = [BurninRunRow(*r) for r in rows]
    if nodes is not None:
        wanted = set(nodes)
        out = [r for r in out if r.node in wanted]
    return sorted(out, key=lambda r: r.node)


def series_rows(rows: Iterable[Sequence[Any]], nodes: Iterable[str] | None = None,
                nights: int | None = None) -> list[SeriesRow]:
    """Raw burnin_series rows (SeriesRow order, ``recent`` as stored text, then
    ``recent_f8``) as :class:`SeriesRow`, with only the last ``nights`` values of
    ``recent`` parsed."""
    out = []
    wanted = set(nodes) if nodes is not None else None
    keep = None if nights is None else max(1, nights)
    for name, metric, unit, higher, group, rid, at, value, night, recent, *_ in rows:
        if wanted is not None and name not in wanted:
            continue
        vals = recent.split() if keep is None else recent.rsplit(None, keep)[-keep:]
        out.append(SeriesRow(name, metric, unit, bool(higher), group, rid, at, value, night,
                             tuple(map(float, vals))))
    return out


def pack_recent(recent: str) -> bytes | None:
    """``recent`` (space-separated values) as little-endian float64 bytes (burnin_series.
    recent_f8), None when it does not parse."""
    try:
        vals = [float(x) for x in recent.split()]
    except ValueError:
        return None
    return struct.pack(f"<{len(vals)}d", *vals)


# burnin_packs (revision 0006): one row per node, its burnin_series rows packed, so that
# `burnin report` reads 10,000 rows of a fleet instead of 100,000 (docs/store.md).
#   meta:   JSON, one [metric, unit, higher_is_better, group_key, last_night] per metric,
#           in metric order;
#   nums:   little-endian float64, four per metric: last_run_id, last_at, last_value and
#           the number of recent values;
#   recent: the metrics' recent_f8 bytes, one after the other, in the same order.
PACK_NUMS = 4


def pack_series(rows: Iterable[Sequence[Any]]) -> tuple[str, bytes, bytes] | None:
    """One node's raw burnin_series rows (SeriesRow order, ``recent`` text, ``recent_f8``)
    as a burnin_packs row (meta, nums, recent); None when a row has no float64 values
    (text from before 0005 that does not parse): the report then reads burnin_series."""
    meta, nums, recent = [], [], []
    for _, metric, unit, higher, group, rid, at, value, night, _text, f8 in sorted(
            rows, key=lambda r: r[1]):
        if not isinstance(f8, (bytes, bytearray, memoryview)) or len(f8) % 8:
            return None
        f8 = bytes(f8)
        meta.append([metric, unit, bool(higher), group, night])
        nums += (float(rid), float(at), float(value), float(len(f8) // 8))
        recent.append(f8)
    return (json.dumps(meta, separators=(",", ":")), struct.pack(f"<{len(nums)}d", *nums),
            b"".join(recent))


def packs_covering(packs: list[Any], series_count: int, nodes: Iterable[str] | None
                   ) -> list[tuple[Any, ...]] | None:
    """``packs`` (only ``nodes``' when given) when they hold as many metric rows as
    burnin_series does; None when they do not (a pack not written: read burnin_series)."""
    if sum(len(n) for _, _, n, _ in packs) != series_count * 8 * PACK_NUMS:
        return None
    return of_nodes(packs, nodes)


class SqliteBurninReader:
    """The read side of the burn-in store API over one read-only sqlite3 connection.

    It stands in for a :class:`~slurmguard.store.Store` in `burnin report`, which reads only
    ``store.burnin``: that area is the reader itself."""

    def __init__(self, path: str, busy_timeout: float = 5.0) -> None:
        import sqlite3

        self._sqlite3 = sqlite3
        self.path = path
        self.conn = open_read_only(path, busy_timeout)

    @classmethod
    def open(cls, section: Mapping[str, Any]) -> SqliteBurninReader | None:
        """A reader for a SQLite ``[store]`` section; None for other databases."""
        path = sqlite_path(section)
        if path is None:
            return None
        return cls(path, float(section.get("busy_timeout", 5.0)))

    def _fetch(self, what: str, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self.conn.execute(sql, tuple(args)).fetchall()
        except self._sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: {what}: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    @property
    def burnin(self) -> SqliteBurninReader:
        """The burn-in area, as on a Store (``reader.burnin.latest_runs(since)``)."""
        return self

    def latest_runs(self, since: float, nodes: Iterable[str] | None = None
                    ) -> list[BurninRunRow]:
        """As :meth:`slurmguard.store.burnin.Burnin.latest_runs`."""
        return latest_runs(self._fetch("burn-in runs", LATEST_RUNS_SQL, (since,)), nodes)

    def open_runs(self) -> list[BurninRunRow]:
        """As :meth:`slurmguard.store.burnin.Burnin.open_runs`."""
        return [BurninRunRow(*r) for r in self._fetch("burn-in open runs", OPEN_RUNS_SQL)]

    def packs(self, nodes: Iterable[str] | None = None) -> list[tuple[Any, ...]] | None:
        """As :meth:`slurmguard.store.burnin.Burnin.packs`."""
        packs = self._fetch("burn-in packs", PACKS_SQL)
        (count,), = self._fetch("burn-in series count", SERIES_COUNT_SQL)
        return packs_covering(packs, count, nodes)

    def series_raw(self, since: float = float("-inf"),
                   nodes: Iterable[str] | None = None) -> list[tuple[Any, ...]]:
        """As :meth:`slurmguard.store.burnin.Burnin.series_raw`."""
        return of_nodes(self._fetch("burn-in series", SERIES_SQL, (since,)), nodes)

    def series(self, since: float = float("-inf"), nodes: Iterable[str] | None = None,
               nights: int | None = None) -> list[SeriesRow]:
        """As :meth:`slurmguard.store.burnin.Burnin.series`."""
        return series_rows(self.series_raw(since), nodes, nights)
