"""Slow node -> suspect: which nodes enough jobs named slow to go first to burn-in (pure).

`slurmguard run` names a node slow when its median step time is 1.5x the job's; serve records
that as a ``suspect`` event with the evidence (slurmguard.serve.drains). One job's word is not
enough to act on (its data may be skewed, its ranks unbalanced), and even K jobs' word is not
enough to drain: a node named slow by at least ``jobs`` distinct jobs within ``window``
seconds is *queued first for burn-in*, and burn-in decides (drain, or return). Evidence older
than the node's latest burn-in submission does not count again: that burn-in answers it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def suspects(events: Iterable[Any], burnin_submitted: Mapping[str, float], *, jobs: int,
             window: float, now: float) -> dict[str, list[str]]:
    """Nodes named slow by at least ``jobs`` distinct jobs in ``window`` (and since their
    latest burn-in submission): node -> the jobs, sorted. ``events`` are the store's
    ``suspect`` EventRows (``details["job"]`` names the job)."""
    named: dict[str, set[str]] = {}
    for e in events:
        after = max(now - window, burnin_submitted.get(e.node, float("-inf")))
        job = e.details.get("job") if isinstance(e.details, dict) else None
        if e.kind == "suspect" and e.at > after and isinstance(job, str) and job:
            named.setdefault(e.node, set()).add(job)
    return {n: sorted(js) for n, js in sorted(named.items()) if len(js) >= jobs}


def from_store(store: Any, cfg: Any, now: float) -> dict[str, list[str]]:
    """:func:`suspects` over the store, with the ``[notice]`` thresholds."""
    window = float(cfg["notice.suspect_window"])
    events = store.nodes.events(since=now - window, kinds=("suspect",), limit=100000)
    runs = store.burnin.latest_runs(now - window, {e.node for e in events})
    return suspects(events, {r.node: r.submitted for r in runs},
                    jobs=int(cfg["notice.suspect_jobs"]), window=window, now=now)
