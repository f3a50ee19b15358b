"""SQLAlchemy 2 models of the node-state store.

Times are stored as epoch seconds (floats): the same type in SQLite and PostgreSQL, cheap to
compare in the gate's query, and what result records already carry. The ``nodes`` row holds
the node's *current* view (last result, lemon/burn-in/probation flags) so that the gate reads
one indexed row per node instead of scanning history; ``runs``/``results``/``events`` are the
history, append-only.

Any change here needs an Alembic revision in slurmguard/migrations/versions and regenerated
DDL in sql/ (``python -m slurmguard.store.ddl``); tests/test_store_schema.py fails otherwise.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Stable constraint names so that Alembic migrations are the same on both engines.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Actor kinds of node events (stable strings, stored).
ACTORS = ("slurmguard", "admin", "kubernetes", "slurm")
# Event kinds (stable strings, stored).
EVENT_KINDS = (
    "drain",  # a drain was set (by any actor)
    "clear",  # a drain was cleared (UNDRAIN / resume)
    "reboot_request",
    "state_change",  # a Slurm or Kubernetes state change seen
    "lemon",  # policy marked the node a lemon
    "lemon_cleared",  # burn-in passed or an admin returned it
    "probation_start",
    "probation_end",
    "drain_refused",  # the blast-radius guard refused a drain
    "drain_held",  # ... held it for the node's second look (others just drained for its cause)
    "permit",  # the blast-radius guard allowed a drain (holds its slot; slurmguard/drainguard.py)
    "drain_failed",  # a drain slurmguard asked Slurm for did not take (the error in reason)
    "security",  # serve refused a write for who sent it (docs/security.md); rate-limited
    "suspect",  # a job named the node slow (evidence for burn-in; never a drain by itself)
    "risk_refused",  # the gate refused the node to a large job for node risk (no drain)
    # autonomous repair (slurmguard/repair/, docs/repair.md): details.episode = the drain's id
    "repair_start",  # evidence collected, the episode's first rung next
    "repair_rung",  # a rung started (written before it is taken: never taken twice)
    "repair_outcome",  # proven, transient, permanent or verified
    "repair_return",  # verified and returned on probation
    "repair_ticket",  # handed to people; the node stays out as a lemon
    "repair_observe",  # observe mode: what repair would have done
    "repair_burnin",  # verification's quick burn-in submitted into the repair reservation
    # observe mode (slurmguard/wouldledger.py): what slurmguard would have done, once per episode
    "would_drain",  # would have drained, and the guard would have allowed it (counted)
    "would_drain_refused",  # would have drained, and the guard would have refused it
    "would_act",  # another state change withheld (details.verb, details.argv)
    "would_end",  # the node passed again: its would-episodes end
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    first_seen: Mapped[float] = mapped_column(Float)
    # The last result record of this node (any hook) and its worst health.
    last_seen: Mapped[float | None] = mapped_column(Float)
    last_health: Mapped[str | None] = mapped_column(String(16))
    last_hook: Mapped[str | None] = mapped_column(String(32))
    last_reason: Mapped[str | None] = mapped_column(Text)
    last_run_id: Mapped[int | None] = mapped_column(Integer)  # no FK: avoids a cycle
    # Lemon: set by policy; cleared by burn-in or an admin (`resume --force`).
    lemon: Mapped[bool] = mapped_column(Boolean, default=False)
    lemon_since: Mapped[float | None] = mapped_column(Float)
    lemon_reason: Mapped[str | None] = mapped_column(Text)
    # Awaiting burn-in: the node must pass a burn-in before it runs jobs again.
    burnin_required: Mapped[bool] = mapped_column(Boolean, default=False)
    # Probation: a returned node, marked in Slurm, until it has passed M jobs.
    probation: Mapped[bool] = mapped_column(Boolean, default=False)
    probation_since: Mapped[float | None] = mapped_column(Float)
    probation_passes: Mapped[int] = mapped_column(Integer, default=0)
    # Node risk as serve's policy pass last computed it (risk.gate_max_nodes): the gate reads
    # these two columns with its one query instead of computing risk on its hot path.
    risk_score: Mapped[float | None] = mapped_column(Float)
    risk_at: Mapped[float | None] = mapped_column(Float)


class Run(Base):
    """One hook run on one node: the envelope of a result record."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    record_id: Mapped[str] = mapped_column(String(64), unique=True)  # exactly-once ingest
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    hook: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[str | None] = mapped_column(String(64))
    started: Mapped[float] = mapped_column(Float)
    duration: Mapped[float] = mapped_column(Float, default=0.0)
    health: Mapped[str] = mapped_column(String(16))  # worst health of the run's results
    action: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    received: Mapped[float] = mapped_column(Float)
    version: Mapped[str] = mapped_column(String(32), default="")

    __table_args__ = (Index(None, "node_id", "started"), Index(None, "health", "started"))


class Result(Base):
    """One check's verdict within a run."""

    __tablename__ = "results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    started: Mapped[float] = mapped_column(Float)  # the run's start, denormalized for queries
    name: Mapped[str] = mapped_column(String(64))
    health: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[str] = mapped_column(Text, default="{}")  # JSON text (same on both engines)
    duration: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (
        Index(None, "node_id", "started"),
        Index(None, "name", "health", "started"),
        Index(None, "run_id"),
    )


class Event(Base):
    """The drain ledger: every drain, clear, reboot request and state change, with its actor."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    actor_kind: Mapped[str] = mapped_column(String(16))  # one of ACTORS
    actor: Mapped[str] = mapped_column(String(128))  # "slurmguard", an admin's name, ...
    source: Mapped[str] = mapped_column(String(64), default="")  # check or policy name
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[str] = mapped_column(Text, default="{}")

    __table_args__ = (Index(None, "node_id", "at"), Index(None, "at"), Index(None, "kind", "at"))


class FleetAlert(Base):
    """One suspected shared cause: the blast-radius guard stopped draining for it."""

    __tablename__ = "fleet_alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    opened: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float)
    closed: Mapped[float | None] = mapped_column(Float)
    cause: Mapped[str] = mapped_column(String(64))  # the check (or policy) failing fleet-wide
    scope: Mapped[str] = mapped_column(String(128))  # "partition:gpu", "group:rack1", "fleet"
    nodes: Mapped[str] = mapped_column(Text, default="")  # NodeSet of the nodes seen failing
    count: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index(None, "cause", "scope", "closed"),)


# Burn-in run states (stable strings, stored; docs/burnin.md).
BURNIN_STATUSES = ("submitted", "running", "complete", "partial", "failed")


class BurninRun(Base):
    """One node's burn-in job: submitted, running, then complete, partial or failed."""

    __tablename__ = "burnin_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    job_id: Mapped[str | None] = mapped_column(String(64))
    level: Mapped[str] = mapped_column(String(16), default="quick")
    night: Mapped[str] = mapped_column(String(16))  # the night it belongs to: "2026-12-02"
    group_key: Mapped[str] = mapped_column(String(128), default="")  # comparison group
    submitted: Mapped[float] = mapped_column(Float)
    started: Mapped[float | None] = mapped_column(Float)
    finished: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # one of BURNIN_STATUSES
    reason: Mapped[str] = mapped_column(Text, default="")  # failure or why partial
    reservation: Mapped[str] = mapped_column(String(128), default="")
    # What `burnin report --apply` decided: pass, flagged, failed, partial, no_verdict.
    verdict: Mapped[str | None] = mapped_column(String(16))
    verdict_at: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (Index(None, "node_id", "submitted"), Index(None, "status", "submitted"),
                      Index(None, "job_id"))


class BurninResult(Base):
    """One measured value (or an unsupported/failed measurement) of a burn-in run."""

    __tablename__ = "burnin_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("burnin_runs.id", ondelete="CASCADE"))
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Float)
    measurement: Mapped[str] = mapped_column(String(64))  # "host-cpu", "gpu-matmul"
    metric: Mapped[str] = mapped_column(String(64))  # "host_cpu_gflops" ("" for no value)
    value: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16), default="")
    status: Mapped[str] = mapped_column(String(16))  # ok, unsupported, error, failed
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[str] = mapped_column(Text, default="{}")

    __table_args__ = (Index(None, "run_id"), Index(None, "node_id", "metric", "at"))


class BurninSeries(Base):
    """Summary row per (node, metric): the latest complete value and the last nights'
    values, so that `burnin report` reads one row per node and metric instead of every
    result of every night (10,000 nodes x 10 metrics x 30 nights: docs/burnin.md). History
    beyond the last nights is in burnin_results."""

    __tablename__ = "burnin_series"

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"),
                                         primary_key=True)
    metric: Mapped[str] = mapped_column(String(64), primary_key=True)
    unit: Mapped[str] = mapped_column(String(16), default="")
    higher_is_better: Mapped[bool] = mapped_column(Boolean, default=True)
    group_key: Mapped[str] = mapped_column(String(128), default="")
    last_run_id: Mapped[int] = mapped_column(Integer)  # no FK: a summary, rebuilt from runs
    last_at: Mapped[float] = mapped_column(Float)
    last_value: Mapped[float] = mapped_column(Float)
    last_night: Mapped[str] = mapped_column(String(16))  # the night of last_value
    # The values of the last nights up to last_night, oldest first, one per night, space
    # separated ("nan" for a night without a complete run): parsed with str.split, which is
    # what keeps `burnin report` over 10,000 nodes x 10 metrics under a second.
    recent: Mapped[str] = mapped_column(Text, default="")
    # The same values as little-endian float64, 8 bytes a night (NULL: written before 0005,
    # read from ``recent``): `burnin report` takes 100,000 rows of them with numpy.frombuffer
    # instead of parsing 500,000 floats of text (docs/burnin.md, "Report at fleet scale").
    recent_f8: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class BurninPack(Base):
    """One row per node: its burnin_series rows packed (revision 0006), written with them by
    ``burnin_finish``, so that `burnin report` reads 10,000 rows of a 10,000-node fleet
    instead of 100,000 (the format: slurmguard/store/burnin_read.py, docs/store.md). A
    node without a pack (a series row whose values do not parse) makes the report read
    burnin_series."""

    __tablename__ = "burnin_packs"

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"),
                                         primary_key=True)
    meta: Mapped[str] = mapped_column(Text)  # JSON: [metric, unit, higher, group, night] each
    nums: Mapped[bytes] = mapped_column(LargeBinary)  # float64 x 4 a metric
    recent: Mapped[bytes] = mapped_column(LargeBinary)  # the metrics' recent_f8, in order


class GoodputJob(Base):
    """One job's goodput breakdown (slurmguard.goodput.account), stored by `slurmguard goodput`
    so that fleet reports are one aggregate query. Seconds of wall time per part; the parts
    add up to ``wall_s``; GPU-seconds are a part's seconds x ``gpus``."""

    __tablename__ = "goodput_jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(64), default="")
    partition: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(32), default="")
    nodes: Mapped[str] = mapped_column(Text, default="")  # NodeSet of every run's nodes
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    started: Mapped[float] = mapped_column(Float)  # first allocation's start
    ended: Mapped[float] = mapped_column(Float)  # last allocation's end
    wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    held_s: Mapped[float] = mapped_column(Float, default=0.0)
    productive_s: Mapped[float] = mapped_column(Float, default=0.0)
    lost_work_s: Mapped[float] = mapped_column(Float, default=0.0)
    requeue_wait_s: Mapped[float] = mapped_column(Float, default=0.0)
    restart_s: Mapped[float] = mapped_column(Float, default=0.0)
    stall_s: Mapped[float] = mapped_column(Float, default=0.0)
    checkpoint_save_s: Mapped[float] = mapped_column(Float, default=0.0)
    drained_node_s: Mapped[float] = mapped_column(Float, default=0.0)
    straggler_s: Mapped[float] = mapped_column(Float, default=0.0)
    other_s: Mapped[float] = mapped_column(Float, default=0.0)
    unknown_s: Mapped[float] = mapped_column(Float, default=0.0)
    unknown: Mapped[str] = mapped_column(Text, default="[]")  # JSON list: why parts are unknown
    steps_lost: Mapped[int] = mapped_column(Integer, default=0)
    collected: Mapped[float] = mapped_column(Float)
    details: Mapped[str] = mapped_column(Text, default="{}")  # JSON: the per-run breakdown
    unknown_notes: Mapped[int] = mapped_column(Integer, default=0)  # len(unknown), for reports

    __table_args__ = (
        Index(None, "ended"), Index(None, "partition", "ended"), Index(None, "user", "ended"),
        # Covers the fleet report (`goodput --since`): an index-only range scan, never the
        # wide rows (details is about 1 KB a job). Revision 0004.
        Index("ix_goodput_jobs_report", "ended", "partition", "user", "gpus", "wall_s", "held_s",
              "unknown_notes", *[f"{p}_s" for p in (
                  "productive", "lost_work", "requeue_wait", "restart", "stall",
                  "checkpoint_save", "drained_node", "straggler", "other", "unknown")]),
    )


class GoodputJobNode(Base):
    """The nodes a goodput job ran on (for `goodput --by node`)."""

    __tablename__ = "goodput_job_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_row: Mapped[int] = mapped_column(ForeignKey("goodput_jobs.id", ondelete="CASCADE"))
    node: Mapped[str] = mapped_column(String(128))
    share: Mapped[float] = mapped_column(Float, default=1.0)  # 1 / the job's node count (0004)

    # The last one covers `goodput --by node`'s join (revision 0004).
    __table_args__ = (Index(None, "job_row"), Index(None, "node"),
                      Index("ix_goodput_job_nodes_report", "job_row", "node", "share"))


ALL_TABLES = [Node.__table__, Run.__table__, Result.__table__, Event.__table__,
              FleetAlert.__table__, GoodputJob.__table__, GoodputJobNode.__table__,
              BurninRun.__table__, BurninResult.__table__, BurninSeries.__table__,
              BurninPack.__table__]


class ServeReplica(Base):
    """One `slurmguard serve` process that ran on this store: its heartbeat (every
    serve.leader_retry s), whether it was the leader, its last policy pass. Read by
    `slurmguard serve status`; a replica whose heartbeat stopped is shown as gone."""

    __tablename__ = "serve_replicas"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)  # "HOST ADDR:PORT"
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    started: Mapped[float] = mapped_column(Float)
    heartbeat: Mapped[float] = mapped_column(Float)
    leader: Mapped[bool] = mapped_column(Boolean)
    last_pass: Mapped[float | None] = mapped_column(Float, nullable=True)


class FleetSwitch(Base):
    """A fleet-wide switch an admin turns on from any host (`slurmguard repair pause`), read
    by whichever serve replica leads: one row per switch that is on; no row is off."""

    __tablename__ = "fleet_switches"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)  # "repair-paused"
    actor: Mapped[str] = mapped_column(String(255))  # "admin:carol"
    reason: Mapped[str] = mapped_column(String(1000))
    at: Mapped[float] = mapped_column(Float)


class SlurmViewRow(Base):
    """A view of Slurm's that one serve replica reads and publishes for the others
    (serve/slurmview.py): the node table as ``scontrol show node -o`` printed it, compressed,
    with the time of the read. One row per view (``nodes``); the body is rewritten only when
    it changed, the read time on every read."""

    __tablename__ = "slurm_views"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)  # "nodes"
    read_at: Mapped[float] = mapped_column(Float)  # epoch s the publisher's last read began
    changed_at: Mapped[float] = mapped_column(Float)  # when the body last changed
    digest: Mapped[str] = mapped_column(String(64))  # sha256 of the uncompressed text
    body: Mapped[bytes] = mapped_column(LargeBinary)  # zlib of the text
    publisher: Mapped[str] = mapped_column(String(200))  # the replica's label
