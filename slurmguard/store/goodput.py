"""The store's goodput area, ``store.goodput``: job breakdowns and fleet totals.

Fleet reports are one ``GROUP BY`` over ``goodput_jobs`` (indexed by ``ended``), so
``slurmguard goodput --since 30d`` costs the same whatever the results table holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, case, delete, func, insert, literal, or_, select

from slurmguard.goodput.account import PARTS
from slurmguard.store.engine import guard
from slurmguard.store.models import Event, GoodputJob, GoodputJobNode, Node
from slurmguard.store.noderows import chunks

BY = ("cause", "partition", "user", "node")


def _row(b: Mapping[str, Any], now: float) -> dict[str, Any]:
    parts = b["parts"]
    row = {"job_id": str(b["job_id"])[:64], "user": str(b.get("user") or "")[:64],
           "partition": str(b.get("partition") or "")[:64], "state": str(b.get("state") or "")[:32],
           "nodes": _nodeset(b.get("nodes") or []), "gpus": int(b.get("gpus") or 0),
           "started": float(b["start"]), "ended": float(b["end"]),
           "wall_s": float(b["wall_s"]), "held_s": float(b["held_s"]),
           "unknown": json.dumps(list(b.get("unknown") or [])),
           "unknown_notes": len(b.get("unknown") or []),
           "steps_lost": int(b.get("steps_lost") or 0), "collected": now,
           "details": json.dumps({"runs": b.get("runs") or [], "step_time_s": b.get("step_time_s")},
                                 default=str)}
    for p in PARTS:
        row[f"{p}_s"] = float(parts.get(p, 0.0))
    return row


def _sums(cols: Any, weight: Any) -> list[Any]:
    out = [func.count().label("jobs"), func.sum(cols.wall_s).label("wall"),
           func.sum(cols.held_s * weight).label("held_gpu"),
           func.sum(case((or_(cols.unknown_s > 0, cols.unknown_notes > 0), 1), else_=0)).label("unk")]
    for p in PARTS:
        out.append(func.sum(getattr(cols, f"{p}_s")).label(f"s_{p}"))
        out.append(func.sum(getattr(cols, f"{p}_s") * weight).label(f"g_{p}"))
    return out



class Goodput:
    """Goodput breakdowns of ended jobs: one per store, on its engine (``store.goodput``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, breakdowns: Sequence[Mapping[str, Any]], now: float | None = None) -> int:
        """Store (replace) the breakdowns of these jobs; jobs without a known allocation are
        skipped. Returns how many were stored."""
        now = time.time() if now is None else now
        rows = [_row(b, now) for b in breakdowns if b.get("start") is not None and b.get("end") is not None]
        if not rows:
            return 0
        with guard(self.engine, "record goodput"), self.engine.begin() as conn:
            ids = [r["job_id"] for r in rows]
            for chunk in chunks(ids):
                conn.execute(delete(GoodputJobNode).where(GoodputJobNode.job_row.in_(
                    select(GoodputJob.id).where(GoodputJob.job_id.in_(chunk)))))
                conn.execute(delete(GoodputJob).where(GoodputJob.job_id.in_(chunk)))
            conn.execute(insert(GoodputJob), rows)
            row_ids: dict[str, int] = {}
            for chunk in chunks(ids):
                row_ids.update(conn.execute(select(GoodputJob.job_id, GoodputJob.id).where(
                    GoodputJob.job_id.in_(chunk))).all())
            nodes = []
            kept = [b for b in breakdowns if b.get("start") is not None and b.get("end") is not None]
            for b, b_row in zip(kept, rows, strict=True):
                names = list(dict.fromkeys(n[:128] for n in b.get("nodes") or []))
                nodes += [{"job_row": row_ids[b_row["job_id"]], "node": n, "share": 1.0 / len(names)}
                          for n in names]
            if nodes:
                conn.execute(insert(GoodputJobNode), nodes)
        return len(rows)


    def collected(self, job_ids: Iterable[str]) -> set[str]:
        ids = sorted({str(j) for j in job_ids})
        out: set[str] = set()
        with guard(self.engine, "goodput jobs"), self.engine.connect() as conn:
            for chunk in chunks(ids):
                out.update(conn.execute(select(GoodputJob.job_id).where(
                    GoodputJob.job_id.in_(chunk))).scalars())
        return out


    def job(self, job_id: str) -> dict[str, Any] | None:
        """A stored breakdown in :meth:`Breakdown.to_dict` shape (runs from ``details``)."""
        with guard(self.engine, "goodput job"), self.engine.connect() as conn:
            r = conn.execute(select(GoodputJob.__table__).where(
                GoodputJob.job_id == str(job_id))).first()
            if r is None:
                return None
            nodes = list(conn.execute(select(GoodputJobNode.node).where(
                GoodputJobNode.job_row == r.id).order_by(GoodputJobNode.id)).scalars())
        return _breakdown(r, nodes)

    def jobs(self, *, ended_since: float, started_until: float, nodes: Iterable[str],
             keep: Callable[[str, float, float], bool] | None = None) -> list[dict[str, Any]]:
        """The jobs on ``nodes`` that ended at or after ``ended_since`` and started by
        ``started_until`` (incidents: the jobs a window's faults could have hit), oldest
        first, as ``{job_id, user, partition, state, start, end, runs}`` (the runs of
        :meth:`Breakdown.to_dict`). Only those nodes' jobs, and only the columns needed:
        parsing a job's runs costs ~0.1 ms and a fleet-month holds 10^5 jobs. ``keep(node,
        start, end)``: only the jobs it keeps for one of their nodes among ``nodes``, read
        first without their runs (incidents: the jobs near an episode, a few of a month's)."""
        j, jn = GoodputJob, GoodputJobNode
        cols = (j.id, j.job_id, j.user, j.partition, j.state, j.started, j.ended, j.details)
        rows: dict[int, Any] = {}
        when = (j.ended >= ended_since, j.started <= started_until)
        with guard(self.engine, "goodput jobs"), self.engine.connect() as conn:
            if keep is not None:  # two index reads joined here: cheaper than SQL's join
                kept: set[int] = set()
                for chunk in chunks(sorted(set(nodes))):
                    on: dict[int, list[str]] = {}
                    for row, node in conn.execute(select(jn.job_row, jn.node).where(jn.node.in_(chunk))):
                        on.setdefault(row, []).append(node)
                    ids = select(jn.job_row).where(jn.node.in_(chunk))
                    for r in conn.execute(select(j.id, j.started, j.ended).where(j.id.in_(ids), *when)):
                        if any(keep(n, r.started, r.ended) for n in on.get(r.id, ())):
                            kept.add(r.id)
                for chunk in chunks(sorted(kept)):
                    rows.update((r.id, r) for r in conn.execute(select(*cols).where(j.id.in_(chunk))))
            else:
                for chunk in chunks(sorted(set(nodes))):
                    ids = select(jn.job_row).where(jn.node.in_(chunk))
                    for r in conn.execute(select(*cols).where(j.id.in_(ids), *when)):
                        rows[r.id] = r
        return [{"job_id": r.job_id, "user": r.user, "partition": r.partition, "state": r.state,
                 "start": r.started, "end": r.ended,
                 "runs": json.loads(r.details or "{}").get("runs", [])}
                for r in sorted(rows.values(), key=lambda r: (r.started, r.id))]

    def gpus_seen(self, *, ended_since: float, started_until: float,
                  nodes: Iterable[str]) -> dict[str, int]:
        """Per node of ``nodes``: the most GPUs per node any run on it had
        (fleet.incidents.gpus_seen), over the jobs of :meth:`jobs`' window; the runs' node
        lists and GPUs only (incidents, where ``checks.gpu.expected_count`` is unset)."""
        j, jn = GoodputJob, GoodputJobNode
        wanted = set(nodes)
        out: dict[str, int] = {}
        seen: set[int] = set()
        with guard(self.engine, "goodput GPUs per node"), self.engine.connect() as conn:
            for chunk in chunks(sorted(wanted)):
                ids = select(jn.job_row).where(jn.node.in_(chunk))
                for r in conn.execute(select(j.id, j.details).where(
                        j.id.in_(ids), j.ended >= ended_since, j.started <= started_until)):
                    if r.id in seen:
                        continue
                    seen.add(r.id)
                    for run in json.loads(r.details or "{}").get("runs", []):
                        names = run.get("nodes") or ()
                        if run.get("start") is None or run.get("end") is None or not names:
                            continue
                        per = int(run.get("gpus") or 0) // len(names)
                        for n in names:
                            if n in wanted:
                                out[n] = max(out.get(n, 0), per)
        return out

    def totals(self, *, since: float, until: float | None = None,
               by: str = "cause") -> list[tuple[str, dict[str, Any]]]:
        """Totals of jobs that ended in [since, until], per group (``by`` partition, user, node;
        ``cause``: one group, the fleet). Each value is :func:`slurmguard.goodput.account.totals`.
        By node, a job's time counts once for each of its nodes (GPUs split evenly over them)."""
        from slurmguard.goodput.account import totals as make_totals

        until = time.time() if until is None else until
        j = GoodputJob
        where = [j.ended >= since, j.ended <= until]
        if by == "node":
            weight = j.gpus * GoodputJobNode.share
            stmt = (select(GoodputJobNode.node.label("g"), *_sums(j, weight))
                    .select_from(j).join(GoodputJobNode, GoodputJobNode.job_row == j.id)
                    .where(*where).group_by(GoodputJobNode.node))
        else:
            key = {"cause": literal("fleet"), "partition": j.partition, "user": j.user}[by]
            stmt = select(key.label("g"), *_sums(j, j.gpus)).where(*where)
            if by != "cause":
                stmt = stmt.group_by(key)
        with guard(self.engine, "goodput totals"), self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        out = []
        for r in rows:
            if not r.jobs:
                continue
            m = r._mapping
            out.append((str(r.g), make_totals(
                int(r.jobs), float(r.wall or 0), {p: float(m[f"s_{p}"] or 0) for p in PARTS},
                {p: float(m[f"g_{p}"] or 0) for p in PARTS}, float(r.held_gpu or 0), int(r.unk or 0))))
        return sorted(out)


    def series(self, *, since: float, until: float | None = None,
               bucket: float = 86400.0) -> list[tuple[float, dict[str, float]]]:
        """Badput seconds per cause per time bucket (by job end), oldest first: for ``--plot``."""
        until = time.time() if until is None else until
        j = GoodputJob
        b = func.floor((j.ended - since) / bucket).label("b")
        stmt = (select(b, *[func.sum(getattr(j, f"{p}_s")).label(p) for p in PARTS])
                .where(j.ended >= since, j.ended <= until).group_by(b).order_by(b))
        with guard(self.engine, "goodput series"), self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [(since + int(r.b) * bucket, {p: float(r._mapping[p] or 0) for p in PARTS})
                for r in rows]


    # Fault evidence for the drained-node part: slurmguard's drains, and node failures the
    # requeue watcher saw under a job. Admin drains (maintenance) are not faults.
    def node_faults(self, nodes: Iterable[str], *, since: float,
                    until: float) -> list[tuple[str, float, str]]:
        names = sorted(set(nodes))
        out: list[tuple[str, float, str]] = []
        with guard(self.engine, "node faults"), self.engine.connect() as conn:
            for chunk in chunks(names):
                stmt = (select(Node.name, Event.at, Event.kind, Event.source, Event.reason)
                        .join(Node, Node.id == Event.node_id)
                        .where(Node.name.in_(chunk), Event.at >= since, Event.at <= until,
                               or_((Event.kind == "drain") & (Event.actor_kind == "slurmguard"),
                                   (Event.kind == "state_change") & (Event.source == "requeue"),
                                   Event.kind == "lemon")))
                for name, at, kind, source, reason in conn.execute(stmt):
                    out.append((name, float(at), f"{kind} ({source}): {reason}"[:200]))
        return sorted(out, key=lambda x: x[1])


def _breakdown(r: Any, nodes: list[str]) -> dict[str, Any]:
    parts = {p: getattr(r, f"{p}_s") for p in PARTS}
    details = json.loads(r.details or "{}")
    return {"job_id": r.job_id, "user": r.user, "partition": r.partition, "state": r.state,
            "nodes": nodes, "gpus": r.gpus, "start": r.started, "end": r.ended,
            "wall_s": r.wall_s, "allocated_s": r.wall_s, "held_s": r.held_s,
            "ettr": round(parts["productive"] / r.wall_s, 4) if r.wall_s > 0 else None,
            "parts": parts, "gpu_hours": {p: round(v * r.gpus / 3600, 4) for p, v in parts.items()},
            "allocated_gpu_hours": round(r.wall_s * r.gpus / 3600, 4),
            "held_gpu_hours": round(r.held_s * r.gpus / 3600, 4),
            "productive_gpu_hours": round(parts["productive"] * r.gpus / 3600, 4),
            "unknown": json.loads(r.unknown or "[]"), "steps_lost": r.steps_lost,
            "step_time_s": details.get("step_time_s"), "runs": details.get("runs", []),
            "stored": True}


def _nodeset(nodes: Iterable[str]) -> str:
    from slurmguard.nodeset import fold

    return fold(sorted(set(nodes)))
