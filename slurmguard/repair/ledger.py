"""The one reader of the repair ledger: a node's repair episodes as the ledger records them.
Pure (rows in, episodes out); `repair status`, `repair history`, `node show`, `nodes`,
`incident show` and the test harnesses' repair figures all read repairs through it, so
"returned", "ticketed" and "rebooted twice" mean one thing everywhere (docs/repair.md).

An episode is one drain of a node by slurmguard and what repair did about it: its events carry
``details.episode`` = the ledger id of that drain. Its state is the decision core's own fold
(:func:`slurmguard.repair.plan.episode_state`), so what this reader says of an episode is what
the next repair pass would act on.

    episodes(rows) -> [RepairEpisode, ...]   (oldest drain first)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slurmguard.policy.repair_params import REBOOTS
from slurmguard.repair.plan import REPAIR_KINDS, Episode, RepairEvent, episode_state

# What a reader asks the store for: the repair steps and the drains that begin episodes.
KINDS = (*REPAIR_KINDS, "drain")


@dataclass(frozen=True)
class RepairEpisode:
    """One drain of ``node`` and what repair did in it, from the ledger."""

    node: str
    episode: int  # ledger id of the drain that began it (0: the drain is not in the rows)
    drained_at: float | None  # that drain's time (None: outside the rows read)
    cause: str  # the guard's cause key, as repair recorded it (or the drain's source)
    reason: str  # the drain's reason ("" when the drain is not in the rows)
    state: Episode  # the decision core's fold of the episode's events
    started_at: float | None  # repair_start: evidence collected, the first rung next
    ended_at: float | None  # repair_return or repair_ticket
    rungs: tuple[tuple[float, str], ...]  # each rung taken: (when, rung)
    first_at: float  # the drain, or the oldest event read where the drain was not
    last_at: float  # the newest event of the episode

    @property
    def outcome(self) -> str:
        """returned, ticketed, open (repair under way), observed, or waiting (no rung yet)."""
        if self.state.done:
            return self.state.done
        if self.state.started:
            return "open"
        return "observed" if self.state.observed else "waiting"

    @property
    def reboots(self) -> int:
        """Rungs of this episode that restart the node (reboot, power cycle)."""
        return sum(1 for r in self.state.taken if r.name in REBOOTS)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "episode": self.episode, "drained_at": self.drained_at,
                "first_at": self.first_at, "cause": self.cause, "reason": self.reason,
                "outcome": self.outcome, "state": self.state.state,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "rungs": [{"at": at, "rung": r} for at, r in self.rungs],
                "reboots": self.reboots}


def episodes(rows: Iterable[Any]) -> list[RepairEpisode]:
    """Every repair episode in ``rows`` (the store's EventRow: ``repair_*`` events, and
    ``drain`` events that begin episodes), oldest drain first. A drain with no repair event is
    an episode in state ``waiting``; only slurmguard's own drains begin episodes."""
    rows = sorted(rows, key=lambda e: (e.at, e.id))
    drains = {e.id: e for e in rows if e.kind == "drain" and e.actor_kind == "slurmguard"}
    steps: dict[tuple[str, int], list[Any]] = {}
    for e in rows:
        if e.kind in REPAIR_KINDS and "episode" in e.details:
            steps.setdefault((e.node, int(e.details["episode"])), []).append(e)
    for d in drains.values():
        steps.setdefault((d.node, d.id), [])
    out = [_episode(node, ep, drains.get(ep), mine) for (node, ep), mine in steps.items()]
    return sorted(out, key=lambda r: (r.first_at, r.node, r.episode))


def _episode(node: str, episode: int, drain: Any, mine: Sequence[Any]) -> RepairEpisode:
    events = [RepairEvent(e.at, e.kind, e.details) for e in mine]
    state = episode_state(events, episode)
    cause = next((str(e.details["cause"]) for e in mine if "cause" in e.details), "")
    if not cause and drain is not None:
        cause = str(drain.source or "")
    first = {k: min((e.at for e in mine if e.kind == k), default=None)
             for k in ("repair_start", "repair_return", "repair_ticket")}
    ends = [t for t in (first["repair_return"], first["repair_ticket"]) if t is not None]
    rungs = tuple((e.at, str(e.details.get("rung", ""))) for e in mine if e.kind == "repair_rung")
    times = [e.at for e in mine] + ([drain.at] if drain is not None else [])
    return RepairEpisode(node, episode, drain.at if drain is not None else None, cause,
                         str(drain.reason or "") if drain is not None else "", state,
                         first["repair_start"], min(ends) if ends else None, rungs,
                         drain.at if drain is not None else min(times), max(times))


def latest(rows: Iterable[Any]) -> RepairEpisode | None:
    """The newest episode of one node's rows that repair has touched (a repair event), or
    None."""
    touched = [r for r in episodes(rows) if r.rungs or r.state.started or r.state.observed
               or r.state.done]
    return max(touched, key=lambda r: r.last_at) if touched else None
