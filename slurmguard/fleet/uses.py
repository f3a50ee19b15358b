"""Uses of the node risk score (each off by default; docs/fleet.md, "Uses"). Pure.

``risk.probation_mark``: an at-risk node carries the probation mark (``policy.probation_mark``:
the ``policy.probation_feature`` feature or the ``policy.probation_weight`` weight), so that
Slurm gives large jobs the safest nodes first. The mark is wanted while the node is on
probation *or* at risk; when neither holds any more it comes off (serve does it in its
policy pass). A node Slurm does not report is left alone.

``risk.gate_max_nodes``: the gate refuses an at-risk node to a job of more than that many
nodes, without draining it (the node stays fine for small jobs); the requeue watcher then
excludes the refused nodes from the job. :func:`risk_refusal` says which nodes,
:func:`risk_room` whether refusing would leave the job a way to run.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from slurmguard.contract import REASON_PREFIX

# A job is refused for node risk at most this many times (then it runs where it lands: no
# requeue loops), and a stored score older than RISK_FRESH_S is not used (serve stopped).
RISK_REFUSALS_MAX = 2
RISK_FRESH_S = 3600.0


def mark_changes(nodes: Iterable[str], *, probation: set[str], at_risk: set[str],
                 marked: Mapping[str, bool]) -> dict[str, bool]:
    """node -> True (put the mark on) or False (take it off), for the nodes whose mark must
    change; ``marked``: whether Slurm shows the mark now (absent: unknown, left alone)."""
    out: dict[str, bool] = {}
    for n in nodes:
        if n not in marked:
            continue
        want = n in probation or n in at_risk
        if want != marked[n]:
            out[n] = want
    return out


def at_risk(scores: Mapping[str, tuple[float | None, float | None]], *, level: float, now: float,
            fresh: float = RISK_FRESH_S) -> set[str]:
    """The nodes whose stored score is at or above ``level`` and at most ``fresh`` seconds
    old; ``scores``: node -> (stored score, when scored). Never scored, or stale: not at risk."""
    return {n for n, (score, at) in scores.items()
            if score is not None and at is not None and now - at <= fresh and score >= level}


def risk_refusal(job_nodes: Sequence[str], scores: Mapping[str, tuple[float | None, float | None]],
                 *, max_nodes: int, level: float, now: float,
                 fresh: float = RISK_FRESH_S) -> dict[str, str]:
    """node -> why, for the at-risk nodes of a job the gate refuses (empty: none).
    ``max_nodes`` 0: the use is off; a job of at most ``max_nodes`` nodes is never refused."""
    size = len(set(job_nodes))
    if max_nodes <= 0 or size <= max_nodes:
        return {}
    hot = at_risk({n: scores.get(n, (None, None)) for n in set(job_nodes)}, level=level, now=now,
                  fresh=fresh)
    return {n: (f"{REASON_PREFIX} risk: score {scores[n][0]:g} >= risk.level {level:g}; job of "
                f"{size} nodes > risk.gate_max_nodes {max_nodes} (not drained)")
            for n in sorted(hot)}


def risk_room(job_size: int, pools: Mapping[str, Collection[str]], *, prior: int,
              max_refusals: int = RISK_REFUSALS_MAX) -> str | None:
    """Why the job must keep the nodes it was given after all, or None: refuse them.

    ``prior``: how many times the gate already refused this job for risk. ``pools``: for
    each partition that holds every node of the allocation (the job's partition is one of
    them), the nodes up, not drained and not at risk. Refusing is safe only when every such
    partition still has room for the whole job elsewhere."""
    if prior >= max_refusals:
        return f"already refused {prior} times for node risk (at most {max_refusals}): runs here"
    if not pools:
        return "no partition holds every node of the allocation: room elsewhere unknown"
    for part, usable in sorted(pools.items()):
        if len(usable) < job_size:
            return (f"partition {part} has {len(usable)} nodes up and not at risk, the job "
                    f"needs {job_size}: refusing would leave it no way to run")
    return None
